"""A world on disk: `write_world` (images, records.jsonl, scenes.jsonl; resumable) and reading it back."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from data_synthesis.records import SFTRecord
from data_synthesis.world.questions import make_item
from data_synthesis.world.rendering import render
from data_synthesis.world.sampling import sample_item
from data_synthesis.world.scene import Scene, Task, WorldItem
from jobs.jsonl import InputError, ResumableJsonlWriter, read_jsonl, read_records

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


def require_world(row: dict[str, Any], hint: str) -> dict[str, Any]:
    """The row's `world` (scene and task); a row of other data stops a scene-only stage, with `hint` saying what
    to use instead."""
    if "world" not in row:
        raise ValueError(f"row {row['id']!r} has no synthetic-world scene{hint}")
    return row["world"]


def world_item_from_row(row: dict[str, Any]) -> WorldItem:
    """A pipeline row (an SFT record dict with `"world": {"scene", "task"}`, as scenes.jsonl joins in) as an item."""
    record = SFTRecord.from_dict({k: v for k, v in row.items() if k in SFTRecord.__dataclass_fields__})
    return WorldItem(record, Scene.from_dict(row["world"]["scene"]), Task.from_dict(row["world"]["task"]))
