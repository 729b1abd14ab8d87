"""Training data decode images per batch, as the trainer reads rows, never all up front; text-only rows
beside image rows are dropped (with their count) so no ZeRO-3 rank is left without an image."""

from __future__ import annotations

import json
import logging

import pytest
from PIL import Image

import training.data
from data_synthesis.assemble import to_sft_example
from judge.types import DataError
from training.data import load_grpo_dataset, load_sft_dataset
from training.policy import load_prompt_dataset

N = 24  # examples with an image


class DecodeCounter:
    """Wraps the real `load_image`: counts every decode the training data does."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def decodes(monkeypatch):
    counter = DecodeCounter(training.data.load_image)
    monkeypatch.setattr(training.data, "load_image", counter)
    return counter


def _items(folder, n_text_only=0):
    (folder / "img").mkdir(parents=True, exist_ok=True)
    items = []
    for i in range(N):
        Image.new("RGB", (56, 56), (10 * i, 80, 160)).save(folder / "img" / f"{i}.png")
        items.append({"id": f"i{i}", "image": f"img/{i}.png", "question": "Colour?", "candidates": ["Blue.", "Red."]})
    for i in range(n_text_only):
        items.append({"id": f"t{i}", "image": None, "question": "2 + 2?", "candidates": ["4", "5"]})
    return [{**item, "label": 0} for item in items]


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_sft_images_decode_per_batch_while_training(tiny_vlm_dir, tmp_path, decodes, caplog):
    from tests.support.training import CPU
    from training.config import load_config
    from training.sft import JudgeSFTConfig, build_sft_trainer

    examples = [to_sft_example(item, "<think>It is blue.</think><answer>A</answer>") for item in _items(tmp_path, 2)]
    path = _write(tmp_path / "train.jsonl", examples)
    with caplog.at_level(logging.WARNING, logger="training.data"):
        dataset = load_sft_dataset(path)
    assert decodes.calls == 0, "building the dataset decoded images"
    assert len(dataset) == N and "dropped 2 text-only row(s) of 26" in caplog.text
    assert dataset[3]["images"][0].size == (56, 56) and decodes.calls == 1  # one row read, one image decoded

    decodes.calls = 0
    config = load_config(
        JudgeSFTConfig,
        None,
        [f"model_name_or_path={tiny_vlm_dir}", f"train_file={path}", f"output_dir={tmp_path / 'out'}",
         "max_steps=2", "per_device_train_batch_size=2", "save_strategy=no", "max_length=null", *CPU],
    )  # fmt: skip
    trainer = build_sft_trainer(config)
    trainer.train()
    assert trainer.state.global_step == 2
    # Two steps of two rows, plus the row TRL peeks at (is it a vision set?) and the batch accelerate's
    # loader fetches one ahead: 1 + 3 × 2 decodes, never all 24.
    assert 2 * 2 <= decodes.calls <= 1 + (2 + 1) * 2, decodes.calls


def test_grpo_items_keep_references_until_read(tmp_path, decodes, caplog):
    items = _items(tmp_path, 1)
    with caplog.at_level(logging.WARNING, logger="training.data"):
        dataset = load_grpo_dataset(_write(tmp_path / "rl.jsonl", items))
    assert decodes.calls == 0 and len(dataset) == N and "dropped 1 text-only row(s) of 25" in caplog.text
    assert dataset.column_names == ["prompt", "label", "n_options", "image"]
    rows = dataset[:3]
    assert [image.size for image in rows["image"]] == [(56, 56)] * 3 and decodes.calls == 3
    # Kept on request (one process, no ZeRO-3): the text-only item has no image.
    assert load_grpo_dataset(tmp_path / "rl.jsonl", keep_text_only=True)[N]["image"] is None


def test_items_with_several_images_use_the_images_column(tmp_path, decodes):
    items = _items(tmp_path)
    items[0] = {**items[0], "image": ["img/0.png", "img/1.png"]}
    dataset = load_grpo_dataset(_write(tmp_path / "rl.jsonl", items))
    assert "images" in dataset.column_names and "image" not in dataset.column_names
    assert [len(row["images"]) for row in (dataset[0], dataset[1])] == [2, 1] and decodes.calls == 3
    assert sum(part.get("type") == "image" for part in dataset[0]["prompt"][0]["content"]) == 2


def test_policy_prompts_decode_lazily_too(tmp_path, decodes):
    rows = [{"question": f"Q{i}?", "image": item["image"], "answer": "A."} for i, item in enumerate(_items(tmp_path))]
    dataset = load_prompt_dataset(_write(tmp_path / "prompts.jsonl", rows))
    assert decodes.calls == 0
    assert dataset[5]["images"][0].size == (56, 56) and decodes.calls == 1


def test_a_missing_image_still_fails_at_load_time_without_decoding(tmp_path, decodes):
    items = _items(tmp_path)
    items[7] = {**items[7], "image": "img/gone.png"}
    with pytest.raises(DataError, match=r"rl\.jsonl line 8: field 'images': image file not found: .*gone\.png"):
        load_grpo_dataset(_write(tmp_path / "rl.jsonl", items))
    assert decodes.calls == 0
