"""Perception warm-up: teach a judge built from a config to see synthetic-world pictures before judge SFT.

A real MLLM judge arrives with a pretrained vision encoder; a tiny one from `tiny_world.model` has never seen a
picture. Trained end to end on judge traces, its vision tower collapses: after 1,500 SFT steps the image
features barely depend on the picture (`tiny_world.recipe.vision_sensitivity` 0.01–0.1), and every flaw that
needs the image is decided at chance, while text-only flaws are perfect. A frozen random tower keeps the
information (a linear probe reads kind, colour and size from it perfectly) but the language side did not
learn to read a shape's kind from it in the same budget.

This stage is the tiny analogue of vision pretraining: for every image token, small linear heads on the
RMS-normalised merger output (what the language model's first norm sees) predict the shape in the grid
cell under the token (kind, colour and size, or empty), trained with the vision tower and merger; the heads
are then dropped. Judge SFT afterwards keeps the tower fixed (`freeze_vision=true`, as the 7B recipes do).
On the learning benchmark (200 steps, 35 s) the judge then described held-out pictures right (kind 0.89,
colour 0.90, size 0.93 with image → description examples in SFT), but its held-out judging accuracy did
not rise until its traces were `checks` traces (README, "Training a judge"); with them the benchmark runs
1,500 warm-up steps by default (0.85 held-out; 200 and 600 steps scored lower). `cell_head` adds
a head for the token's grid cell; on the shaded world it let the judge name the asked shape's cell (0.85
of attribute questions against 0.11 without it, in a probe with the `keyed` image line).

    from tiny_world.vision_warmup import VisionWarmupConfig, warm_up_vision
    warm_up_vision("runs/untrained", rows, image_root="runs/data", out_dir="runs/seeing", config=VisionWarmupConfig())
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from judge.config import check_at_least_one

__all__ = ["VisionWarmupConfig", "image_token_features", "token_cells", "token_labels", "warm_up_vision"]

Row = dict[str, Any]


@dataclass
class VisionWarmupConfig:
    """Budget of the warm-up (one step = one batch of pictures, every image token of each labelled)."""

    steps: int = 200
    batch_size: int = 32
    learning_rate: float = 1e-3
    seed: int = 0
    cell_head: bool = False
    """Also predict each token's grid cell, so that the features carry where the token is. A shaded world
    (`Scene.shaded`) shows the cell in the pixels; on white pictures only the picture's edges tell cells
    apart (Qwen2.5-VL's vision tower has no absolute position embeddings)."""

    def __post_init__(self) -> None:
        check_at_least_one(self, ("steps", "batch_size"))
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate ({self.learning_rate}) must be positive")


def image_token_features(model: Any, processor: Any, images: Sequence[Any]) -> tuple[Any, Any]:
    """The merger's output for every image token of `images` (one row per token, picture by picture), as the
    language model receives them, and the processor's `image_grid_thw`."""
    import torch

    inputs = processor.image_processor(images=list(images), return_tensors="pt")
    out = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
    return torch.cat(list(out.pooler_output)), inputs["image_grid_thw"]


def token_labels(scene: Any, grid: tuple[int, int]) -> list[tuple[int, int, int]]:
    """(kind, colour, size) class of the shape in the cell under each image token, 0 for none, row by row.

    `grid` is the merged token grid (rows, columns) covering the scene; a token takes the cell that holds
    its centre. Text in a cell counts as no shape.
    """
    from data_synthesis.world import COLOURS, SHAPE_KINDS, SIZES, _cell

    by_cell = {_cell(scene, s.x, s.y): s for s in scene.shapes}
    shapes = [by_cell.get(cell) for cell in token_cells(scene, grid)]
    return [
        (0, 0, 0)
        if s is None
        else (1 + SHAPE_KINDS.index(s.kind), 1 + COLOURS.index(s.colour), 1 + SIZES.index(s.size))
        for s in shapes
    ]


def token_cells(scene: Any, grid: tuple[int, int]) -> list[int]:
    """The world grid cell (`data_synthesis.world.GRID`, row by row) that holds each image token's centre."""
    from data_synthesis.world import _cell

    rows, cols = grid
    return [
        _cell(scene, int((c + 0.5) * scene.width / cols), int((r + 0.5) * scene.height / rows))
        for r in range(rows)
        for c in range(cols)
    ]


def warm_up_vision(
    model_dir: str | Path,
    rows: Sequence[Row],
    *,
    image_root: str | Path | None,
    out_dir: str | Path,
    config: VisionWarmupConfig | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train the vision tower of the judge in `model_dir` on world `rows`; write the whole judge to `out_dir`.

    `rows` are pipeline rows with `image` and `world` (a scene), e.g. `data_synthesis.pipeline.load_rows`
    of records; pass only training-split rows. `progress(step, figures)` is called every 25 steps.
    Returns the final loss, the per-head token accuracies on the last batch, the steps and the wall time.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    import judge.backends.hf_compat  # noqa: F401  (the image-only processor where torchvision does not import)
    from data_synthesis.world import COLOURS, GRID, SHAPE_KINDS, SIZES, Scene
    from judge.images import load_image
    from judge.models import load_processor

    config = config or VisionWarmupConfig()
    if not rows:
        raise ValueError("rows is empty: pass the training split's world records")
    missing = [row.get("id") for row in rows if "world" not in row]
    if missing:
        raise ValueError(f"rows without a world scene (e.g. {missing[0]!r}): the warm-up needs synthetic-world rows")
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    processor = load_processor(str(model_dir), is_vlm=True)
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32)
    images = [load_image(row["image"], image_root) for row in rows]
    scenes = [Scene.from_dict(row["world"]["scene"]) for row in rows]
    classes = [1 + len(values) for values in (SHAPE_KINDS, COLOURS, SIZES)]
    heads = torch.nn.ModuleList(
        torch.nn.Linear(model.config.text_config.hidden_size, n) for n in classes + [GRID * GRID] * config.cell_head
    )
    names = ("kind", "colour", "size", "cell")[: len(heads)]
    visual = model.model.visual
    optimizer = torch.optim.AdamW([*visual.parameters(), *heads.parameters()], lr=config.learning_rate)
    merge = model.config.vision_config.spatial_merge_size
    rng = random.Random(config.seed)
    figures: dict[str, float] = {}
    model.train()
    for step in range(config.steps):
        batch = rng.sample(range(len(rows)), min(config.batch_size, len(rows)))
        features, grid_thw = image_token_features(model, processor, [images[i] for i in batch])
        grids = [(int(h) // merge, int(w) // merge) for _, h, w in grid_thw.tolist()]
        targets = torch.tensor(
            [
                (*label, cell)
                for i, grid in zip(batch, grids)
                for label, cell in zip(token_labels(scenes[i], grid), token_cells(scenes[i], grid))
            ]
        )
        features = features * torch.rsqrt(features.pow(2).mean(-1, keepdim=True) + 1e-6)
        logits = [head(features) for head in heads]
        loss = sum(torch.nn.functional.cross_entropy(out, targets[:, j]) for j, out in enumerate(logits))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 24 or step == config.steps - 1:
            figures = {"loss": round(loss.item(), 4)}
            for j, (name, out) in enumerate(zip(names, logits)):
                figures[f"{name}_accuracy"] = round(float((out.argmax(-1) == targets[:, j]).float().mean()), 4)
            if progress is not None:
                progress(step + 1, figures)
    model.eval()
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {**figures, "steps": config.steps, "config": asdict(config), "wall_s": round(time.perf_counter() - start, 1)}
