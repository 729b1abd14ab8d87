"""Drawing a scene and its task from `(seed, index)`: the only place the world spends random numbers on items."""

from __future__ import annotations

import random

from data_synthesis.world.scene import (
    COLOURS,
    GRID,
    SHAPE_KINDS,
    SIZES,
    TASK_KINDS,
    TEXT_COLOURS,
    WORDS,
    Scene,
    Shape,
    Task,
    Text,
    _centre,
)


def sample_item(index: int, seed: int, *, size: int = 112, shaded: bool = False) -> tuple[Scene, Task]:
    """Draw item `index`; it depends only on `(seed, index)`, and kinds cycle so any five in a row cover all.

    `shaded` only changes the background (`Scene.shaded`): the objects, question and answer are the same.
    """
    scene, task = _sample(index, seed, size)
    scene.shaded = shaded
    return scene, task


def _sample(index: int, seed: int, size: int) -> tuple[Scene, Task]:
    rng = random.Random(f"{seed}:{index}")  # str seeds hash with SHA-512: stable across processes
    kind = TASK_KINDS[index % len(TASK_KINDS)]
    cells = rng.sample(range(GRID * GRID), GRID * GRID)

    def shapes(kinds: list[str], free: list[int]) -> list[Shape]:
        return [Shape(k, rng.choice(COLOURS), rng.choice(SIZES), *_centre(c, size)) for k, c in zip(kinds, free)]

    if kind == "attribute":  # the asked kind is unique, so "the circle" names one shape
        target = rng.choice(SHAPE_KINDS)
        kinds = [target] + [rng.choice([k for k in SHAPE_KINDS if k != target]) for _ in range(rng.randint(0, 3))]
        rng.shuffle(kinds)
        scene = Scene(size, size, shapes(kinds, cells))
        return scene, Task(kind, {"shape": kinds.index(target), "attribute": rng.choice(("colour", "size"))})
    if kind == "count":
        scene = Scene(size, size, shapes([rng.choice(SHAPE_KINDS) for _ in range(rng.randint(1, 4))], cells))
        ref = rng.choice(scene.shapes)  # the filter matches at least one shape
        mode = rng.choice(("kind", "kind", "colour", "both"))
        params = {"kind": ref.kind} if mode == "kind" else {"colour": ref.colour}
        return scene, Task(kind, params | ({"kind": ref.kind} if mode == "both" else {}))
    if kind == "spatial":  # two uniquely named shapes in different columns (or rows)
        a_kind, b_kind, other = rng.sample(SHAPE_KINDS, 3)
        axis = rng.choice(("horizontal", "vertical"))
        split = 1 if axis == "horizontal" else 0
        b_cell = next(c for c in cells[1:] if divmod(c, GRID)[split] != divmod(cells[0], GRID)[split])
        rest = [c for c in cells[1:] if c != b_cell]
        kinds = [a_kind, b_kind] + [other] * rng.randint(0, 2)
        return Scene(size, size, shapes(kinds, [cells[0], b_cell, *rest])), Task(kind, {"a": 0, "b": 1, "axis": axis})
    labels = [rng.choice(WORDS)] if kind == "ocr" else [str(rng.randint(1, 9)) for _ in range(2)]
    texts = [Text(t, *_centre(c, size), rng.choice(TEXT_COLOURS)) for t, c in zip(labels, cells)]
    distractors = shapes([rng.choice(SHAPE_KINDS) for _ in range(rng.randint(0, 2))], cells[len(texts) :])
    return Scene(size, size, distractors, texts), Task(kind, {"text": 0} if kind == "ocr" else {"texts": [0, 1]})
