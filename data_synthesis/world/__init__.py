"""The embedded synthetic world: seeded pictures of shapes and words whose gold answers come from a known scene.

It is the default data of the demo and the tests, small enough for a tiny VLM trained on a CPU: a white
112x112 image, objects on a 3x3 grid (so "left of" and "above" are never ambiguous), four clearly distinct
colours, and text large enough to read after resizing. Because the scene is known, everything built on it is
exact: the gold answer, the flawed negatives (the scene is perturbed and the answer re-rendered) and the
judge traces used for distillation. A real row of `records.jsonl` and its `scenes.jsonl` twin (seed 0):

    {"id": "world-000001", "image": "images/world-000001.png", "question": "How many triangles are there?",
     "answer": "There is 1 triangle, at the middle right.", "source": "world/count"}
    {"id": "world-000001", "scene": {"width": 112, "height": 112, "shapes": [
       {"kind": "square", "colour": "blue", "size": "small", "x": 18, "y": 56},
       {"kind": "square", "colour": "green", "size": "large", "x": 93, "y": 93},
       {"kind": "triangle", "colour": "blue", "size": "large", "x": 93, "y": 56}], "texts": []},
     "task": {"kind": "count", "params": {"kind": "triangle"}}}

A negative for it is `There are 2 triangles, at the middle right.` (incorrect_reasoning), and the trace
`scene_reasoner` writes for the two as options is

    <think>Image: a large blue triangle at the middle right; 1 triangle. A: says 2 triangles, but it is
    1 triangle, no. B: matches, yes.</think><answer>B</answer>
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from data_synthesis.records import Flaw, Negative, SFTRecord
from judge.jsonl import InputError, ResumableJsonlWriter, read_jsonl, read_records
from judge.prompt import option_letters

__all__ = [
    "TASK_KINDS",
    "Scene",
    "Shape",
    "Task",
    "Text",
    "WorldItem",
    "describe_scene",
    "load_world",
    "make_item",
    "question_answer",
    "render",
    "sample_item",
    "scene_negatives",
    "scene_reasoner",
    "world_item_from_row",
    "write_world",
]

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
    (`training.vision_warmup.VisionWarmupConfig.cell_head`)."""

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


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


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


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def render(scene: Scene) -> Image.Image:
    """Draw the scene: same scene, same pixels (no antialiasing randomness, no fonts from the host)."""
    image = Image.new("RGB", (scene.width, scene.height), "white")
    draw = ImageDraw.Draw(image)
    if scene.shaded:
        w, h = scene.width / GRID, scene.height / GRID
        for row in range(GRID):
            for col in range(GRID):
                box = (round(col * w), round(row * h), round((col + 1) * w) - 1, round((row + 1) * h) - 1)
                draw.rectangle(box, fill=CELL_SHADES[row][col])
    cell = min(scene.width, scene.height) / GRID
    for s in scene.shapes:
        r = round(cell * (0.38 if s.size == "large" else 0.2))
        box = (s.x - r, s.y - r, s.x + r, s.y + r)
        if s.kind == "circle":
            draw.ellipse(box, fill=RGB[s.colour])
        elif s.kind == "square":
            draw.rectangle(box, fill=RGB[s.colour])
        else:
            draw.polygon([(s.x, s.y - r), (s.x + r, s.y + r), (s.x - r, s.y + r)], fill=RGB[s.colour])
    for t in scene.texts:  # digits are drawn larger: they are single characters
        size = round(cell * (0.75 if t.text.isdigit() else 0.43))
        draw.text((t.x, t.y), t.text, fill=RGB[t.colour], font=_font(size), anchor="mm")
    return image


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


_BATCH = 64
"""Items per flush of the JSONL files: a crash loses at most this many, all cheap to redo."""


def _save_png(image: Image.Image, path: Path) -> None:
    """Write through a temporary file and a rename; PIL adds no metadata, so equal pixels give equal bytes."""
    tmp = path.with_name(f".{path.name}.tmp")
    image.save(tmp, format="PNG")
    os.replace(tmp, path)


def write_world(
    n: int,
    seed: int,
    out_dir: str | Path,
    *,
    size: int = 112,
    shaded: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write `n` items (images, records.jsonl, scenes.jsonl) to `out_dir`, resuming whatever a crash left.

    Ids already in both JSONL files (finished or `.partial`) are skipped; everything else is regenerated
    from `(seed, index)`. Resuming with another seed, size or shading raises `ValueError` instead of mixing
    worlds. `shaded` draws every cell on its own background (`Scene.shaded`).
    """
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    ids = [f"world-{i:06d}" for i in range(n)]
    records, scenes = ResumableJsonlWriter(out / "records.jsonl"), ResumableJsonlWriter(out / "scenes.jsonl")
    try:
        done = records.done_ids & scenes.done_ids
        positions = {item_id: index for index, item_id in enumerate(ids)}
        for _, row in read_jsonl(scenes.partial):  # the writer has just rewritten it with every earlier row
            if row["id"] in positions:
                scene, task = sample_item(positions[row["id"]], seed, size=size, shaded=shaded)
                if row["scene"] != scene.to_dict() or row["task"] != task.to_dict():
                    raise ValueError(f"{out} holds {row['id']} from another seed, size or shading; use a fresh out_dir")
        batch_records: list[dict[str, Any]] = []
        batch_scenes: list[dict[str, Any]] = []
        for index, item_id in enumerate(ids):
            image_path = f"images/{item_id}.png"
            if item_id not in done or not (out / image_path).exists():
                item = make_item(index, seed, image_path=image_path, size=size, shaded=shaded)
                _save_png(render(item.scene), out / image_path)  # the image first: a row never lacks its file
                batch_records.append(item.record.to_dict())
                batch_scenes.append({"id": item_id, "scene": item.scene.to_dict(), "task": item.task.to_dict()})
            if len(batch_records) >= _BATCH or index == n - 1:
                records.write(batch_records)
                scenes.write(batch_scenes)
                batch_records, batch_scenes = [], []
            if progress is not None and (index % _BATCH == _BATCH - 1 or index == n - 1):
                progress(index + 1)
        records.finish(order=ids)
        scenes.finish(order=ids)
    finally:
        records.close()
        scenes.close()
    return out


def load_world(out_dir: str | Path) -> list[WorldItem]:
    """Read a written world back; image paths stay relative to `out_dir`."""
    out = Path(out_dir)
    scenes = {row["id"]: row for _, row in read_jsonl(out / "scenes.jsonl")}
    items = []
    for record in read_records(out / "records.jsonl", SFTRecord.from_dict):
        if record.id not in scenes:
            raise InputError(f"{out / 'scenes.jsonl'}: no scene for {record.id} — rerun write_world to resume")
        row = scenes[record.id]
        items.append(WorldItem(record, Scene.from_dict(row["scene"]), Task.from_dict(row["task"])))
    return items


def world_item_from_row(row: dict[str, Any]) -> WorldItem:
    """A pipeline row (an SFT record dict with `"world": {"scene", "task"}`, as scenes.jsonl joins in) as an item."""
    record = SFTRecord.from_dict({k: v for k, v in row.items() if k in SFTRecord.__dataclass_fields__})
    return WorldItem(record, Scene.from_dict(row["world"]["scene"]), Task.from_dict(row["world"]["task"]))


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


_TOKEN = re.compile(
    r'"[^"]*"|(?:top|middle|bottom) (?:left|centre|right)|to the (?:left|right) of'
    r"|\d+(?: [+=] \d+)+|\d+(?:(?:, | and )\d+)+|\w+|[^\w\s]"
)
"""Words, with the facts an answer states kept whole: `"CAT"`, `top left`, `to the left of`, `3 + 5 = 8`, `3 and 5`."""
_FILLER = {"a", "the", "is", "are", "at", "and", "in", "so", ",", ".", ";"}


def _span(tokens: list[str]) -> str:
    """A diff span without the filler around it: `, and 3 + 5 = 8` → `3 + 5 = 8`."""
    while tokens and tokens[0].lower() in _FILLER:
        tokens = tokens[1:]
    while tokens and tokens[-1].lower() in _FILLER:
        tokens = tokens[:-1]
    return re.sub(r" ([,.;])", r"\1", " ".join(tokens))


def _verdict(letter: str, truth: list[str], option: list[str]) -> str:
    """Name the first meaningful difference between an option and the true answer."""
    if [t.lower() for t in option] == [t.lower() for t in truth]:
        return f"{letter}: matches, yes."
    matcher = difflib.SequenceMatcher(None, [t.lower() for t in truth], [t.lower() for t in option], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        old, new = _span(truth[i1:i2]), _span(option[j1:j2])
        if op == "replace" and old and new:
            return f"{letter}: says {new}, but it is {old}, no."
        if old and not new:
            return f"{letter}: leaves out {old}, no."
        if new and not old:
            return f"{letter}: adds {new}, which is wrong, no."
    return f"{letter}: worded differently, no."


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


def _restated(tokens: list[str]) -> str:
    """An answer's facts without filler words: `The square at the top left is red.` → `square top left red`."""
    return " ".join(t.lower() for t in tokens if t.lower() not in _FILLER)


REASONER_STYLES = ("diff", "restate", "contrast", "pairs", "scene", "keyed", "checks")


def _checked_facts(tokens: list[str]) -> list[str]:
    """An answer's facts, a stated place, relation or sum kept whole: `square`, `top left`, `red`."""
    return [t.lower() for t in tokens if t.lower() not in _FILLER and t.lower() != "there"]


def _facts(tokens: list[str]) -> list[str]:
    """The same facts, one word each (`top left` → `top`, `left`), as the `pairs` style compares them."""
    return " ".join(_checked_facts(tokens)).split()


def _pairs(letter: str, truth: list[str], option: list[str]) -> str:
    """Each of an option's facts beside the image's fact in the same slot, with a verdict per slot.

    "A: triangle-square no; bottom-bottom yes; red-red yes; so no." Every yes/no compares the two tokens
    just written, each copied from where the one before it was copied (the option text, the image line),
    so no step of the trace needs more than a copy and a local comparison.
    """
    facts, said = _facts(truth), _facts(option)
    parts = []
    matcher = difflib.SequenceMatcher(None, facts, said, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            parts += [f"{o}-{o} yes" for o in said[j1:j2]]
        else:
            seen, says = facts[i1:i2], said[j1:j2]
            width = max(len(seen), len(says))
            seen, says = seen + ["none"] * (width - len(seen)), says + ["none"] * (width - len(says))
            parts += [f"{o}-{t} no" for o, t in zip(says, seen)]
    return f"{letter}: {'; '.join(parts)}; so {'yes' if facts == said else 'no'}."


def _owners(scene: Scene, task: Task, facts: list[str]) -> list[str | None]:
    """The kind of the shape each of the true answer's facts is about (None for kinds, relations, counts).

    An attribute answer is about one shape; a spatial answer is about the first shape up to its relation
    and about the second after it. Count and text answers name no single shape per fact.
    """
    if task.kind == "attribute":
        kind = scene.shapes[task.params["shape"]].kind
        return [None if f == kind else kind for f in facts]
    if task.kind == "spatial":
        a, b = scene.shapes[task.params["a"]].kind, scene.shapes[task.params["b"]].kind
        relation = facts.index(_relation(scene, task))
        return [None if f in (a, b) or i == relation else (a if i < relation else b) for i, f in enumerate(facts)]
    return [None] * len(facts)


def _checks(letter: str, truth: list[str], owners: list[str | None], option: list[str]) -> str:
    """One check per fact: the option's fact against the image's, keyed by the shape it is about.

    "A: triangle against triangle yes; triangle bottom centre against bottom left no; triangle green against
    green yes; so no." The image's fact is copied from the `keyed` image line, where it follows the same
    kind ("triangle bottom left"), and each yes/no compares the two facts written just before it, so every
    step is a keyed copy or a local comparison. Facts the option adds or leaves out are checked against
    `none`. The separator is a word: after "-" a tokenizer splits "green" into pieces ("g", "reen") that
    are not the image line's token for it.
    """
    parts = []
    matcher = difflib.SequenceMatcher(None, truth, option, autojunk=False)
    for _, i1, i2, j1, j2 in matcher.get_opcodes():
        width = min(i2 - i1, j2 - j1)  # slot by slot, then what is left over as one span against none
        for i, said in zip(range(i1, i1 + width), option[j1 : j1 + width]):
            key = f"{owners[i]} " if owners[i] else ""
            parts.append(f"{key}{said} against {truth[i]} {'yes' if said == truth[i] else 'no'}")
        said, seen = " ".join(option[j1 + width : j2]) or "none", " ".join(truth[i1 + width : i2]) or "none"
        if said != seen:
            key = next((f"{o} " for o in owners[i1 + width : i2] if o), "")
            parts.append(f"{key}{said} against {seen} no")
    return f"{letter}: {'; '.join(parts)}; so {'yes' if truth == option else 'no'}."


def _contrast(letters: list[str], truth: list[str], tokens: list[list[str]], best: int) -> str:
    """Compare the options with each other first (text only), then check only what they disagree on.

    "A says triangle; B says square. Image: square. B is right." — the image is consulted for one slot,
    the one the options dispute, instead of for a whole description compared option by option.
    """
    low = [t.lower() for t in tokens[best]]
    said, extra = [], []
    for i, option in enumerate(tokens):
        if i == best:
            continue
        matcher = difflib.SequenceMatcher(None, low, [t.lower() for t in option], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            right, wrong = _span(tokens[best][i1:i2]), _span(option[j1:j2])
            if op == "replace" and right and wrong:
                said.append((letters[i], wrong, right))
                break
            if right and not wrong:
                extra.append(f"{letters[i]} leaves out {right}, so it is incomplete.")
                break
            if wrong and not right:
                extra.append(f"{letters[i]} adds {wrong}, which is wrong.")
                break
    parts = []
    if said:
        claims = sorted([(letters[best], said[0][2])] + [(letter, w) for letter, w, _ in said])
        parts.append("; ".join(f"{letter} says {w}" for letter, w in claims) + f". Image: {said[0][2]}.")
    parts.extend(extra)
    parts.append(f"{letters[best]} is right.")
    return " ".join(parts)


def scene_reasoner(scene: Scene, task: Task, question: str, options: list[str], style: str = "diff") -> str:
    """A judge trace computed from the scene: what the image shows, then one verdict per option.

    Each option is compared, word by word, with the answer the scene implies (`question` is implied by
    `task` and only kept for the reasoner signature). An exact match (ignoring case and spacing) wins;
    if none matches, the closest option by `difflib` ratio wins, the earliest on ties.

    Styles: "diff" names each wrong option's first difference in words ("A: says blue, but it is red,
    no."); "restate" states the true facts, then restates every option's facts in the same order and
    form and says yes or no ("Image: square top left red. A: square top left blue, no. B: square top
    left red, yes.") — the same decision, laid out so that a tiny model can compare token by token;
    "contrast" compares the options with each other first and then checks only the disputed slot against
    the image ("A says square; B says triangle. Image: square. A is right."), falling back to "diff" when no
    option is exactly right; "scene" describes the whole picture first, worded as the describe stage words
    it ("Image: Shapes: a large red circle at the top left; …. Text: none."), then gives "diff" verdicts,
    so a judge that also learns to describe pictures writes the same description inside its reasoning;
    "keyed" gives "diff" verdicts after an image line that puts every fact right after the kind it belongs
    to ("Image: square green, square small, square top right."), see `_keyed_phrase`; "checks" writes the
    same image line, then checks each option fact by fact against it, each fact keyed by the shape it is
    about ("A: square against square yes; square top left against top right no; so no."), see `_checks`.
    """
    if style not in REASONER_STYLES:
        raise ValueError(f"style must be one of {REASONER_STYLES}, got {style!r}")
    truth = _TOKEN.findall(_answer(scene, task))
    letters = option_letters(len(options))
    tokens = [_TOKEN.findall(o) for o in options]
    low = [x.lower() for x in truth]
    exact = [i for i, t in enumerate(tokens) if [x.lower() for x in t] == low]
    if style == "contrast" and exact:
        return f"<think>{_contrast(letters, truth, tokens, exact[0])}</think><answer>{letters[exact[0]]}</answer>"
    if style == "pairs":
        lines = [_pairs(letter, truth, t) for letter, t in zip(letters, tokens)]
    elif style == "checks":
        facts = _checked_facts(truth)
        owners = _owners(scene, task, facts)
        lines = [_checks(letter, facts, owners, _checked_facts(t)) for letter, t in zip(letters, tokens)]
    elif style == "restate":
        facts = _restated(truth)
        lines = [
            f"{letter}: {_restated(t)}, {'yes' if _restated(t) == facts else 'no'}."
            for letter, t in zip(letters, tokens)
        ]
    else:
        lines = [_verdict(letter, truth, t) for letter, t in zip(letters, tokens)]
    if exact:
        best = exact[0]
    else:
        ratios = [difflib.SequenceMatcher(None, low, [x.lower() for x in t], autojunk=False).ratio() for t in tokens]
        best = ratios.index(max(ratios))
        lines.append(f"None is right; {letters[best]} is closest.")
    if style == "pairs":
        seen = " ".join(_facts(truth))
    elif style == "scene":  # the whole picture, worded as the describe stage words it
        seen = describe_scene(scene).split(" image. ", 1)[1].rstrip(".")
    elif style in ("keyed", "checks"):
        seen = _seen(scene, task, _keyed_phrase)
    else:
        seen = _restated(truth) if style == "restate" else _seen(scene, task)
    return f"<think>Image: {seen}. {' '.join(lines)}</think><answer>{letters[best]}</answer>"
