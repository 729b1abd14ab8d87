"""What a picture of the world holds: the palette, the 3x3 grid, and the scene, task and item types.

Everything else in the world (sampling, rendering, questions, negatives, traces) reads these; a `Scene` is
the single source of truth for an item's answers.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from data_synthesis.records import SFTRecord

TASK_KINDS = ("attribute", "count", "spatial", "ocr", "arithmetic")
SHAPE_KINDS = ("circle", "square", "triangle")
SIZES = ("small", "large")
RGB = {"red": (220, 30, 30), "green": (20, 150, 40), "blue": (30, 60, 220), "yellow": (235, 185, 0), "black": (0, 0, 0)}
COLOURS = ("red", "green", "blue", "yellow")
"""Shape colours; text is also drawn in black, and never in yellow (too pale on white)."""
TEXT_COLOURS = ("black", "red", "green", "blue")
WORDS = ("CAT", "DOG", "SUN", "BUS", "CUP", "HAT", "PEN", "BOX", "KEY", "CAR", "BED", "EGG", "FOX", "JAR", "OAK")
"""Three letters, no M or W, so every word fits one grid cell at the default size."""
GRID = 3
CELL_SHADES = [[(255 - 28 * row, 255, 255 - 28 * col) for col in range(GRID)] for row in range(GRID)]
"""Background of each cell of a shaded scene, by (row, column): less red further down, less blue further
right; pale enough that every shape colour stands out."""
_ROWS, _COLS = ("top", "middle", "bottom"), ("left", "centre", "right")


@dataclass
class Shape:
    kind: str
    colour: str
    size: str
    x: int
    """Centre, in pixels."""
    y: int


@dataclass
class Text:
    text: str
    x: int
    """Centre, in pixels."""
    y: int
    colour: str


@dataclass
class Scene:
    """Everything drawn in one image; the single source of truth for its answers."""

    width: int
    height: int
    shapes: list[Shape] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    shaded: bool = False
    """Give each grid cell its own pale background (`CELL_SHADES`), so that *where* an object is shows in the
    pixels under it. Qwen2.5-VL's vision tower has no absolute position embeddings (rotary attention only),
    and at Qwen's M-RoPE a small language model can barely tell image tokens' positions apart. An option
    for experiments: the tiny judge places objects from it only after a warm-up with a cell head
    (`tiny_world.vision_warmup.VisionWarmupConfig.cell_head`)."""

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if not self.shaded:  # plain scenes serialise as they always have
            del row["shaded"]
        return row

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Scene:
        shapes, texts = [Shape(**s) for s in row["shapes"]], [Text(**t) for t in row["texts"]]
        return cls(row["width"], row["height"], shapes, texts, bool(row.get("shaded", False)))


@dataclass
class Task:
    """What the question asks, e.g. `Task("attribute", {"shape": 0, "attribute": "colour"})`."""

    kind: str
    params: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": copy.deepcopy(self.params)}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Task:
        return cls(row["kind"], copy.deepcopy(dict(row["params"])))


@dataclass
class WorldItem:
    record: SFTRecord
    scene: Scene
    task: Task


# Layout: a 3x3 grid of cells, one object per cell.
def _centre(cell: int, size: int) -> tuple[int, int]:
    row, col = divmod(cell, GRID)
    return int((col + 0.5) * size / GRID), int((row + 0.5) * size / GRID)


def _cell(scene: Scene, x: int, y: int) -> int:
    return min(GRID - 1, y * GRID // scene.height) * GRID + min(GRID - 1, x * GRID // scene.width)


def _where(scene: Scene, obj: Shape | Text) -> str:
    row, col = divmod(_cell(scene, obj.x, obj.y), GRID)
    return "centre" if (row, col) == (1, 1) else f"{_ROWS[row]} {_COLS[col]}"


def _free_cells(scene: Scene) -> list[int]:
    used = {_cell(scene, o.x, o.y) for o in [*scene.shapes, *scene.texts]}
    return [c for c in range(GRID * GRID) if c not in used]


def _reading_order(scene: Scene, objs: list) -> list:
    return sorted(objs, key=lambda o: _cell(scene, o.x, o.y))
