"""Reading a scene back from its words: the description `describe_scene` writes and the question asked.

The world's stand-in for a *text* reasoning model (`data_synthesis.distill.DescriptionReasoner`) knows the
picture only through its description. `read_description` turns that description into the scene it states
(objects at their cells' centres) and `read_question` finds what the question asks in it; where the
description is wrong, the scene read is wrong too, and so is every answer computed from it.
"""

from __future__ import annotations

import re

from data_synthesis.world.scene import _COLS, _ROWS, GRID, Scene, Shape, Task, Text

__all__ = ["read_description", "read_question"]

_HEADER = re.compile(r"^A (shaded|white) (\d+)x(\d+) image\.")
_SHAPE = re.compile(r"^an? (\w+) (\w+) (\w+) at the (.+)$")
_TEXT = re.compile(r'^"(.*)" in (\w+) at the (.+)$')
_WHERE = {"centre": 4} | {f"{r} {c}": GRID * i + j for i, r in enumerate(_ROWS) for j, c in enumerate(_COLS)}
_QUESTIONS = (
    (re.compile(r"^What colour is the (\w+)\?$"), "colour"),
    (re.compile(r"^Is the (\w+) small or large\?$"), "size"),
    (re.compile(r"^How many (.+) are there\?$"), "count"),
    (re.compile(r"^Is the (\w+) to the left or to the right of the (\w+)\?$"), "horizontal"),
    (re.compile(r"^Is the (\w+) above or below the (\w+)\?$"), "vertical"),
    (re.compile(r"^What word is written in the image, and in what colour\?$"), "ocr"),
    (re.compile(r"^What is the sum of the two numbers written in the image\?$"), "arithmetic"),
)


def _section(text: str, label: str) -> list[str]:
    match = re.search(rf"\b{label}: (.*?)\.(?: [A-Z][a-z]+:|$)", text)
    if match is None:
        raise ValueError(f"the description has no {label!r} part: {text[:80]!r}")
    body = match.group(1)
    return [] if body == "none" else body.split("; ")


def read_description(text: str) -> Scene:
    """The scene a `describe_scene` text states; `ValueError` for text in another form."""
    header = _HEADER.match(text)
    if header is None:
        raise ValueError(f"not a world description: {text[:80]!r}")
    width, height = int(header.group(2)), int(header.group(3))
    scene = Scene(width, height, shaded=header.group(1) == "shaded")

    def centre(where: str) -> tuple[int, int]:
        row, col = divmod(_WHERE[where], GRID)
        return int((col + 0.5) * width / GRID), int((row + 0.5) * height / GRID)

    for phrase in _section(text, "Shapes"):
        size, colour, kind, where = _parse(_SHAPE, phrase).groups()
        scene.shapes.append(Shape(kind, colour, size, *centre(where)))
    for phrase in _section(text, "Text"):
        word, colour, where = _parse(_TEXT, phrase).groups()
        scene.texts.append(Text(word, *centre(where), colour))
    return scene


def _parse(pattern: re.Pattern[str], phrase: str) -> re.Match[str]:
    match = pattern.match(phrase)
    if match is None or match.groups()[-1] not in _WHERE:
        raise ValueError(f"cannot read {phrase!r} as an object of a world description")
    return match


def _shape_of(scene: Scene, kind: str) -> int | None:
    return next((i for i, s in enumerate(scene.shapes) if s.kind == kind), None)


def read_question(scene: Scene, question: str) -> Task | None:
    """What `question` asks about `scene` (a scene read from a description), or None where the scene lacks
    what it asks about (the description left the object out)."""
    for pattern, asks in _QUESTIONS:
        match = pattern.match(question)
        if match is None:
            continue
        if asks in ("colour", "size"):
            shape = _shape_of(scene, match.group(1))
            return None if shape is None else Task("attribute", {"shape": shape, "attribute": asks})
        if asks == "count":
            *colour, noun = match.group(1).split(" ")
            params = {} if noun == "shapes" else {"kind": noun.removesuffix("s")}
            return Task("count", params | ({"colour": colour[0]} if colour else {}))
        if asks in ("horizontal", "vertical"):
            a, b = _shape_of(scene, match.group(1)), _shape_of(scene, match.group(2))
            return None if a is None or b is None else Task("spatial", {"a": a, "b": b, "axis": asks})
        if asks == "ocr":
            return Task("ocr", {"text": 0}) if scene.texts else None
        numbers = [i for i, t in enumerate(scene.texts) if t.text.isdigit()]
        return Task("arithmetic", {"texts": numbers}) if len(numbers) == 2 else None
    raise ValueError(f"not a world question: {question!r}")
