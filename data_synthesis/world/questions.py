"""The question a task asks and the answers a scene implies: the gold one, and the templates negatives bend."""

from __future__ import annotations

from data_synthesis.records import SFTRecord
from data_synthesis.world.sampling import sample_item
from data_synthesis.world.scene import Scene, Shape, Task, WorldItem, _reading_order, _where


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _matches(task: Task, s: Shape) -> bool:
    return all(getattr(s, key) == task.params[key] for key in ("kind", "colour") if key in task.params)


def _noun(task: Task, n: int) -> str:
    colour = task.params.get("colour")
    noun = task.params.get("kind", "shape") + ("" if n == 1 else "s")
    return f"{colour} {noun}" if colour else noun


def _numbers(scene: Scene, task: Task) -> list[int]:
    return [int(t.text) for t in _reading_order(scene, [scene.texts[i] for i in task.params["texts"]])]


def _question(scene: Scene, task: Task) -> str:
    p = task.params
    if task.kind == "attribute":
        kind = scene.shapes[p["shape"]].kind
        return f"What colour is the {kind}?" if p["attribute"] == "colour" else f"Is the {kind} small or large?"
    if task.kind == "count":
        return f"How many {_noun(task, 2)} are there?"
    if task.kind == "spatial":
        a, b = scene.shapes[p["a"]].kind, scene.shapes[p["b"]].kind
        if p["axis"] == "horizontal":
            return f"Is the {a} to the left or to the right of the {b}?"
        return f"Is the {a} above or below the {b}?"
    if task.kind == "ocr":
        return "What word is written in the image, and in what colour?"
    return "What is the sum of the two numbers written in the image?"


def _relation(scene: Scene, task: Task) -> str:
    a, b = scene.shapes[task.params["a"]], scene.shapes[task.params["b"]]
    if task.params["axis"] == "horizontal":
        return "to the left of" if a.x < b.x else "to the right of"
    return "above" if a.y < b.y else "below"


def _answer(scene: Scene, task: Task, style: str = "gold", delta: int = 0) -> str:
    """The answer template; `style` "incomplete" drops the asked part, "multiply" adds wrongly, `delta` miscounts."""
    p = task.params
    if task.kind == "attribute":
        s = scene.shapes[p["shape"]]
        if style == "incomplete":
            return f"The {s.kind} is at the {_where(scene, s)}."
        return f"The {s.kind} at the {_where(scene, s)} is {getattr(s, p['attribute'])}."
    if task.kind == "count":
        found = _reading_order(scene, [s for s in scene.shapes if _matches(task, s)])
        places, n = _join([f"the {_where(scene, s)}" for s in found]) if found else "", len(found) + delta
        if style == "incomplete":
            return f"There are {_noun(task, 2)} at {places}."
        if n == 0 or not found:
            return f"There are no {_noun(task, 2)}."
        return f"There {'is' if n == 1 else 'are'} {n} {_noun(task, n)}, at {places}."
    if task.kind == "spatial":
        a, b = scene.shapes[p["a"]], scene.shapes[p["b"]]
        relation = "near" if style == "incomplete" else _relation(scene, task)
        return f"The {a.colour} {a.kind} is {relation} the {b.colour} {b.kind}."
    if task.kind == "ocr":
        t = scene.texts[p["text"]]
        return f'The word "{t.text}" is written' + ("." if style == "incomplete" else f" in {t.colour}.")
    numbers = _numbers(scene, task)
    listed, expression = _join([str(x) for x in numbers]), " + ".join(str(x) for x in numbers)
    if style == "incomplete":
        return f"The numbers are {listed}."
    if style == "multiply":
        return f"The numbers are {listed}, and adding means multiplying, so {expression} = {numbers[0] * numbers[1]}."
    return f"The numbers are {listed}, and {expression} = {sum(numbers) + delta}."


def question_answer(scene: Scene, task: Task) -> tuple[str, str]:
    """The question and its gold answer, both computed from the scene."""
    return _question(scene, task), _answer(scene, task)


def make_item(index: int, seed: int, *, image_path: str, size: int = 112, shaded: bool = False) -> WorldItem:
    scene, task = sample_item(index, seed, size=size, shaded=shaded)
    question, answer = question_answer(scene, task)
    record = SFTRecord(f"world-{index:06d}", image_path, question, answer, f"world/{task.kind}")
    return WorldItem(record, scene, task)
