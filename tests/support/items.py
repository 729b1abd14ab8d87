"""MC items for tests: in memory (`make_items`) or as a JSONL file with images beside it (`write_items`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image

from judge.types import MCItem


def make_items(n: int, *, seed: int = 0, k_choices=(2, 3)) -> list[MCItem]:
    """`n` MC items with in-memory images and a known label."""
    rng = random.Random(seed)
    colours = ["red", "green", "blue", "yellow", "purple"]
    items = []
    for i in range(n):
        k = rng.choice(k_choices)
        names = rng.sample(colours, k)
        image = Image.new("RGB", (84, 84), {"red": (220, 0, 0), "green": (0, 170, 0)}.get(names[0], (0, 0, 200)))
        items.append(
            MCItem(
                id=f"item-{i}",
                question="What colour is the image?",
                candidates=[f"It is {c}." for c in names],
                image=image,
                label=0,
            )
        )
    return items


def write_items(folder: Path, n: int = 5) -> tuple[Path, list[dict]]:
    """`folder/items.jsonl`: `n` MC items of 2 or 3 candidates with images under `img/`; also the rows."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (84, 84), (40 * i, 100, 200)).save(folder / f"img/{i}.png")
        k = 2 + i % 2
        rows.append(
            {
                "id": f"q{i}",
                "image": f"img/{i}.png",
                "question": "What colour?",
                "candidates": [f"c{j}" for j in range(k)],
                "label": i % k,
            }
        )
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows
