"""A captioner's errors on a scene: the picture as an imperfect describer would see it.

MR. Judge distils its traces from an MLLM's *description* of each image, and descriptions are wrong now
and then. `misread` draws such a reading of a known scene at a stated per-fact error rate, errors of the
kinds captioners make: an object left out, a wrong kind, colour or size, an object put in the wrong grid
cell, a word misread.

Every object has one fact "it is there" and, when it is described, its other facts (a shape's kind,
colour, size and cell; a text's word, colour and cell). Each is misread with probability `rate`, the
"left out" one first: an object left out has no other fact to get wrong. Counted that way, the expected
share of misread facts is exactly `rate` (`Misreading.error_rate` is the measured share), so the set rate
and the measured one agree within sampling error.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from data_synthesis.world.scene import (
    COLOURS,
    GRID,
    SHAPE_KINDS,
    SIZES,
    TEXT_COLOURS,
    WORDS,
    Scene,
    Shape,
    Text,
    _cell,
    _free_cells,
)

__all__ = ["Misreading", "misread"]


@dataclass
class Misreading:
    """The scene as read (`scene`), how many facts the description states or omits (`facts`) and which of them
    are wrong (`errors`, one line each, e.g. "shape 1 colour: red as blue")."""

    scene: Scene
    facts: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def error_rate(self) -> float:
        return len(self.errors) / self.facts if self.facts else 0.0

    def to_dict(self) -> dict:
        return {"facts": self.facts, "misread": len(self.errors), "errors": list(self.errors)}


def _other(rng: random.Random, choices: tuple[str, ...], value: str) -> str:
    return rng.choice([c for c in choices if c != value])


def _other_word(rng: random.Random, word: str) -> str:
    if word.isdigit():
        return str(rng.choice([d for d in range(1, 10) if str(d) != word]))
    return _other(rng, WORDS, word)


def misread(scene: Scene, rate: float, rng: random.Random) -> Misreading:
    """The scene as a describer with per-fact error `rate` reads it (the input scene is not changed)."""
    if not 0 <= rate <= 1:
        raise ValueError(f"describe_error_rate ({rate}) must be in [0, 1]")
    read = Scene(scene.width, scene.height, [], [], scene.shaded)
    reading = Misreading(read)
    free = _free_cells(scene)

    def wrong() -> bool:
        reading.facts += 1
        return rng.random() < rate

    def moved(obj: Shape | Text, name: str) -> tuple[int, int]:
        if not wrong() or not free:
            return obj.x, obj.y
        cell = rng.choice(free)
        free.remove(cell)
        free.append(_cell(scene, obj.x, obj.y))
        reading.errors.append(f"{name} cell: {_cell(scene, obj.x, obj.y)} as {cell}")
        row, col = divmod(cell, GRID)
        return int((col + 0.5) * scene.width / GRID), int((row + 0.5) * scene.height / GRID)

    for i, shape in enumerate(scene.shapes):
        name = f"shape {i}"
        if wrong():
            reading.errors.append(f"{name}: left out")
            continue
        kind, colour, size = shape.kind, shape.colour, shape.size
        if wrong():
            kind = _other(rng, SHAPE_KINDS, kind)
            reading.errors.append(f"{name} kind: {shape.kind} as {kind}")
        if wrong():
            colour = _other(rng, COLOURS, colour)
            reading.errors.append(f"{name} colour: {shape.colour} as {colour}")
        if wrong():
            size = _other(rng, SIZES, size)
            reading.errors.append(f"{name} size: {shape.size} as {size}")
        read.shapes.append(Shape(kind, colour, size, *moved(shape, name)))
    for i, text in enumerate(scene.texts):
        name = f"text {i}"
        if wrong():
            reading.errors.append(f"{name}: left out")
            continue
        word, colour = text.text, text.colour
        if wrong():
            word = _other_word(rng, word)
            reading.errors.append(f"{name} word: {text.text} as {word}")
        if wrong():
            colour = _other(rng, TEXT_COLOURS, colour)
            reading.errors.append(f"{name} colour: {text.colour} as {colour}")
        x, y = moved(text, name)
        read.texts.append(Text(word, x, y, colour))
    return reading
