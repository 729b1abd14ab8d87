"""The perception warm-up: labels per image token, and a few real steps that train the vision tower only."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from data_synthesis.world import Scene, Shape
from tiny_world.vision_warmup import VisionWarmupConfig, token_cells, token_labels, warm_up_vision


def test_token_labels_follow_the_grid_cells():
    scene = Scene(84, 84, [Shape("triangle", "blue", "large", 14, 14), Shape("circle", "red", "small", 70, 42)])
    labels = token_labels(scene, (3, 3))
    assert labels[0] == (3, 3, 2)  # triangle, blue, large in the top-left cell
    assert labels[5] == (1, 1, 1)  # circle, red, small at the middle right
    assert [i for i, label in enumerate(labels) if label != (0, 0, 0)] == [0, 5]
    # A finer token grid: each token takes the cell under its centre.
    assert token_labels(scene, (6, 6))[:3] == [(3, 3, 2), (3, 3, 2), (0, 0, 0)]


def test_token_cells_name_the_world_cell_under_each_token():
    scene = Scene(84, 84, [])
    assert token_cells(scene, (3, 3)) == list(range(9))
    assert token_cells(scene, (6, 6))[:6] == [0, 0, 1, 1, 2, 2] and token_cells(scene, (6, 6))[-1] == 8


@pytest.fixture(scope="module")
def world_rows(tmp_path_factory):
    from data_synthesis.pipeline import load_rows
    from data_synthesis.world import write_world

    out = tmp_path_factory.mktemp("world")
    write_world(12, 0, out, size=84)
    return out, load_rows(out, "records", out)


def test_warm_up_trains_the_vision_tower_only(tiny_vlm_dir, world_rows, tmp_path):
    root, rows = world_rows
    seen = []
    result = warm_up_vision(
        tiny_vlm_dir,
        rows,
        image_root=root,
        out_dir=tmp_path / "seeing",
        config=VisionWarmupConfig(steps=25, batch_size=4),
        progress=lambda step, figures: seen.append((step, figures)),
    )
    assert [step for step, _ in seen] == [25]
    assert result["steps"] == 25 and set(result) >= {"loss", "kind_accuracy", "colour_accuracy", "size_accuracy"}
    before = load_file(str(tiny_vlm_dir / "model.safetensors"))
    after = load_file(str(tmp_path / "seeing" / "model.safetensors"))
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before if "visual" in k)
    assert all(torch.equal(before[k], after[k]) for k in before if "visual" not in k)

    from judge.models import load_model

    assert load_model(str(tmp_path / "seeing"), device="cpu").processor.image_processor is not None


def test_cell_head_learns_where_tokens_are_on_a_shaded_world(tiny_vlm_dir, tmp_path):
    """Each cell of a shaded picture has its own background, so the tower can learn to say where a token is."""
    from data_synthesis.pipeline import load_rows
    from data_synthesis.world import write_world

    write_world(8, 0, tmp_path / "world", size=84, shaded=True)
    rows = load_rows(tmp_path / "world", "records", tmp_path / "world")
    config = VisionWarmupConfig(steps=100, batch_size=8, learning_rate=3e-3, cell_head=True)
    result = warm_up_vision(tiny_vlm_dir, rows, image_root=tmp_path / "world", out_dir=tmp_path / "o", config=config)
    assert result["config"]["cell_head"] is True
    assert result["cell_accuracy"] >= 0.9, result  # chance is 1/9


def test_warm_up_refuses_rows_without_a_scene(tiny_vlm_dir, tmp_path):
    with pytest.raises(ValueError, match="world scene"):
        warm_up_vision(tiny_vlm_dir, [{"id": "x", "image": "a.png"}], image_root=tmp_path, out_dir=tmp_path / "o")
    with pytest.raises(ValueError, match="steps"):
        VisionWarmupConfig(steps=0)
