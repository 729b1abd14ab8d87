"""A scene in words: each object's phrase, the whole picture (`describe_scene`) and the part a question needs."""

from __future__ import annotations

from collections.abc import Callable

from data_synthesis.world.questions import _join, _matches, _noun, _numbers, _relation
from data_synthesis.world.scene import Scene, Shape, Task, Text, _reading_order, _where


def _phrase(scene: Scene, obj: Shape | Text) -> str:
    if isinstance(obj, Text):
        return f'"{obj.text}" in {obj.colour} at the {_where(scene, obj)}'
    return f"a {obj.size} {obj.colour} {obj.kind} at the {_where(scene, obj)}"


def _keyed_phrase(scene: Scene, obj: Shape | Text) -> str:
    """A shape's facts, each right after its kind: `square green, square small, square top right`.

    In "a small green square" the word before the colour is the size, which does not single out a shape,
    and a tiny judge gave the colour of another shape in the picture for 25 of 65 held-out attribute
    questions; with each fact right after the kind, which names one image token, it got all 65 right
    (README, "Training a judge").
    """
    if isinstance(obj, Text):
        return _phrase(scene, obj)
    return f"{obj.kind} {obj.colour}, {obj.kind} {obj.size}, {obj.kind} {_where(scene, obj)}"


def describe_scene(scene: Scene) -> str:
    """Every object, in reading order: the exact description distillation starts from.

    >>> describe_scene(Scene(112, 112, [Shape("circle", "red", "large", 18, 18)], [Text("CAT", 56, 93, "blue")]))
    'A white 112x112 image. Shapes: a large red circle at the top left. Text: "CAT" in blue at the bottom centre.'
    """
    parts = [f"A {'shaded' if scene.shaded else 'white'} {scene.width}x{scene.height} image."]
    for label, objs in (("Shapes", scene.shapes), ("Text", scene.texts)):
        phrases = [_phrase(scene, o) for o in _reading_order(scene, list(objs))]
        parts.append(f"{label}: {'; '.join(phrases) if phrases else 'none'}.")
    return " ".join(parts)


def _seen(scene: Scene, task: Task, phrase: Callable[[Scene, Shape | Text], str] = _phrase) -> str:
    """The part of the image the question needs, in words (each object worded by `phrase`)."""
    p = task.params
    if task.kind == "attribute":
        return phrase(scene, scene.shapes[p["shape"]])
    if task.kind == "count":
        found = _reading_order(scene, [s for s in scene.shapes if _matches(task, s)])
        if not found:
            return f"no {_noun(task, 2)}"
        return f"{', '.join(phrase(scene, s) for s in found)}; {len(found)} {_noun(task, len(found))}"
    if task.kind == "spatial":
        a, b = scene.shapes[p["a"]], scene.shapes[p["b"]]
        return f"{phrase(scene, a)} and {phrase(scene, b)}, so the {a.kind} is {_relation(scene, task)} the {b.kind}"
    if task.kind == "ocr":
        return phrase(scene, scene.texts[p["text"]])
    texts = _reading_order(scene, [scene.texts[i] for i in p["texts"]])
    numbers = _numbers(scene, task)
    return f"{_join([phrase(scene, t) for t in texts])}; {' + '.join(map(str, numbers))} = {sum(numbers)}"
