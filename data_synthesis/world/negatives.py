"""Exact flawed answers: each negative re-renders a perturbed scene or bends the answer template, so its flaw
is known (`Flaw`) and it is wrong by construction."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable

from data_synthesis.records import Flaw, Negative
from data_synthesis.world.questions import _answer, _matches
from data_synthesis.world.scene import (
    COLOURS,
    SHAPE_KINDS,
    SIZES,
    TEXT_COLOURS,
    Scene,
    Shape,
    Task,
    Text,
    WorldItem,
    _centre,
    _free_cells,
)

_CORNERS = {"circle": ("two", "four"), "square": ("three", "five"), "triangle": ("two", "four")}
"""Wrong corner counts, for the incorrect-knowledge negatives ("every triangle has four corners")."""
_THINGS = {
    "red": "ripe tomatoes",
    "green": "fresh grass",
    "blue": "a clear sky",
    "yellow": "ripe bananas",
    "black": "coal",
}
"""Unambiguous colour facts; pairing a colour with another colour's thing makes a false one."""


def _knowledge(scene: Scene, task: Task, gold: str) -> list[str]:
    """The gold answer plus one false general fact about a shape or a colour the answer names."""
    p = task.params
    kinds = [scene.shapes[p[k]].kind for k in ("shape", "a") if k in p] + ([p["kind"]] if "kind" in p else [])
    colours = ([scene.texts[p["text"]].colour] if "text" in p else []) + ([p["colour"]] if "colour" in p else [])
    if task.kind == "attribute" and p["attribute"] == "colour":
        colours.append(scene.shapes[p["shape"]].colour)
    clauses = [f"every {k} has {c} corners" for k in kinds for c in _CORNERS[k]]
    clauses += [f"{c} is the colour of {_THINGS[o]}" for c in colours for o in _THINGS if o != c]
    return [f"{gold[:-1]}, and {clause}." for clause in clauses]


def _mutants(scene: Scene, task: Task, rng: random.Random) -> dict[str, list[str]]:
    """Candidate negatives by flaw: scene flaws re-render a perturbed scene, the others bend the template."""
    p, out = task.params, {f.value: [] for f in Flaw}

    def perturb(flaw: Flaw, change: Callable[[Scene, Task], None]) -> None:
        s, t = copy.deepcopy(scene), copy.deepcopy(task)
        change(s, t)
        out[flaw.value].append(_answer(s, t))

    def absent_kinds() -> list[str]:
        return [k for k in SHAPE_KINDS if k not in {s.kind for s in scene.shapes}]

    free = _free_cells(scene)
    out[Flaw.INCORRECT_KNOWLEDGE.value] = _knowledge(scene, task, _answer(scene, task))
    if task.kind != "count" or sum(_matches(task, s) for s in scene.shapes) >= 2:
        out[Flaw.INCOMPLETE.value].append(_answer(scene, task, "incomplete"))
    if task.kind == "attribute":
        i, attribute = p["shape"], p["attribute"]
        for value in COLOURS if attribute == "colour" else SIZES:
            perturb(Flaw.HALLUCINATED_ATTRIBUTE, lambda s, t, v=value: setattr(s.shapes[i], attribute, v))
        for cell in free:
            perturb(Flaw.HALLUCINATED_SPATIAL, lambda s, t, c=cell: _move(s.shapes[i], c, s.width))
        for kind in absent_kinds():
            perturb(Flaw.HALLUCINATED_OBJECT, lambda s, t, k=kind: setattr(s.shapes[i], "kind", k))
    elif task.kind == "count":
        matching = [i for i, s in enumerate(scene.shapes) if _matches(task, s)]
        for extra in (1, 2):  # add one or two matching shapes in free cells
            perturb(Flaw.HALLUCINATED_COUNT, lambda s, t, k=extra: s.shapes.extend(_extra(t, free, k, s.width, rng)))
        perturb(Flaw.HALLUCINATED_COUNT, lambda s, t: s.shapes.pop(rng.choice(matching)))
        for i in matching:
            perturb(Flaw.HALLUCINATED_SPATIAL, lambda s, t, i=i: _move(s.shapes[i], rng.choice(free), s.width))
        for delta in (-1, 1) if len(matching) >= 2 else (1,):  # lists the right places, counts them wrong
            out[Flaw.INCORRECT_REASONING.value].append(_answer(scene, task, delta=delta))
    elif task.kind == "spatial":
        a, b = p["a"], p["b"]
        perturb(Flaw.HALLUCINATED_SPATIAL, lambda s, t: _swap(s.shapes[a], s.shapes[b]))
        for i in (a, b):
            for colour in COLOURS:
                perturb(Flaw.HALLUCINATED_ATTRIBUTE, lambda s, t, i=i, c=colour: setattr(s.shapes[i], "colour", c))
            for kind in absent_kinds():
                perturb(Flaw.HALLUCINATED_OBJECT, lambda s, t, i=i, k=kind: setattr(s.shapes[i], "kind", k))
    elif task.kind == "ocr":
        word = scene.texts[p["text"]].text
        for pos in range(len(word)):
            for letter in rng.sample([c for c in "ABCDEFGHIJKLNOPRSTUVXYZ" if c != word[pos]], 2):
                new = word[:pos] + letter + word[pos + 1 :]
                perturb(Flaw.HALLUCINATED_TEXT, lambda s, t, w=new: setattr(s.texts[p["text"]], "text", w))
        for colour in TEXT_COLOURS:
            perturb(Flaw.HALLUCINATED_ATTRIBUTE, lambda s, t, c=colour: setattr(s.texts[p["text"]], "colour", c))
    else:
        for i in p["texts"]:
            for digit in rng.sample(range(1, 10), 3):
                perturb(Flaw.HALLUCINATED_TEXT, lambda s, t, i=i, d=digit: setattr(s.texts[i], "text", str(d)))
        perturb(Flaw.HALLUCINATED_OBJECT, lambda s, t: _add_number(s, t, rng.choice(free), rng.randint(1, 9)))
        for delta in (-2, -1, 1, 2):
            out[Flaw.INCORRECT_REASONING.value].append(_answer(scene, task, delta=delta))
        out[Flaw.INCORRECT_KNOWLEDGE.value].append(_answer(scene, task, "multiply"))
    return out


def _move(shape: Shape, cell: int, size: int) -> None:
    shape.x, shape.y = _centre(cell, size)


def _swap(a: Shape, b: Shape) -> None:
    a.x, a.y, b.x, b.y = b.x, b.y, a.x, a.y


def _extra(task: Task, free: list[int], k: int, size: int, rng: random.Random) -> list[Shape]:
    kind, colour = task.params.get("kind"), task.params.get("colour")
    cells = rng.sample(free, min(k, len(free)))
    return [
        Shape(kind or rng.choice(SHAPE_KINDS), colour or rng.choice(COLOURS), rng.choice(SIZES), *_centre(c, size))
        for c in cells
    ]


def _add_number(scene: Scene, task: Task, cell: int, digit: int) -> None:
    scene.texts.append(Text(str(digit), *_centre(cell, scene.width), "black"))
    task.params["texts"] = [*task.params["texts"], len(scene.texts) - 1]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def scene_negatives(item: WorldItem, n: int, rng: random.Random) -> list[Negative]:
    """Up to `n` distinct flawed answers, flaws taken in turn (in an rng-shuffled order) so they vary."""
    gold = _norm(item.record.answer)
    pools = _mutants(item.scene, item.task, rng)
    flaws = [f for f in pools if pools[f]]
    rng.shuffle(flaws)
    for flaw in flaws:
        rng.shuffle(pools[flaw])
    seen, negatives = {gold}, []
    while len(negatives) < n and any(pools[f] for f in flaws):
        for flaw in flaws:
            while pools[flaw] and len(negatives) < n:
                text = pools[flaw].pop()
                if _norm(text) not in seen:
                    seen.add(_norm(text))
                    negatives.append(Negative(text, flaw))
                    break
    return negatives
