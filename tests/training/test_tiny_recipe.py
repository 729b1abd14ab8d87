"""The tiny-judge recipe shared by the learning benchmark and the demo: its data, held-out pairs and settings."""

from __future__ import annotations

from collections import Counter

import pytest

from training.tiny_recipe import (
    COMPACT_PROMPT,
    distill_judge_data,
    grpo_config,
    heldout_pairs,
    sft_config,
    world_size_for,
    write_kind_world,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from data_synthesis.pipeline import run_negatives

    out = tmp_path_factory.mktemp("recipe")
    rows = write_kind_world(out / "world", out / "data", kinds=["attribute", "count"], n=60, seed=0)
    run_negatives(out / "data", out / "data", generator="scene", n=3, seed=0, show_progress=False)
    summary = distill_judge_data(out / "data", out / "data", val_fraction=0.25, seed=0)
    return out / "data", rows, summary


def test_world_keeps_only_the_asked_kinds(data):
    folder, rows, _ = data
    assert world_size_for(60, ["attribute", "count"]) == 155
    assert {r["source"] for r in rows} == {"world/attribute", "world/count"} and 45 <= len(rows) <= 75
    assert (folder / "records.jsonl").is_file() and (folder / "scenes.jsonl").is_file()


def test_sft_examples_use_the_compact_prompt(data):
    import json

    folder, _, summary = data
    assert summary["items"] > 0 and summary["sft_train"] > 0 and summary["kept_fraction"] == 1.0
    example = json.loads((folder / "sft" / "train.jsonl").read_text().splitlines()[0])
    prompt = example["messages"][0]["content"][-1]["text"]
    assert prompt.startswith(COMPACT_PROMPT.instruction) and prompt.endswith(COMPACT_PROMPT.answer_format)


def test_heldout_pairs_come_from_validation_only(data):
    import json

    folder, _, _ = data
    splits = {json.loads(line)["id"]: json.loads(line)["meta"]["split"] for line in open(folder / "items.jsonl")}
    pairs = heldout_pairs(folder, 100, seed=0)
    assert pairs and all(splits[p.id] == "val" for p in pairs)
    assert all(len(p.candidates) == 2 and p.label in (0, 1) and p.meta["kind"] in ("attribute", "count") for p in pairs)
    assert heldout_pairs(folder, 100, seed=0) == pairs  # seeded
    assert set(Counter(p.label for p in pairs)) <= {0, 1}


def test_trainer_settings_are_the_measured_recipe(tmp_path):
    sft = sft_config("m", "t.jsonl", tmp_path, steps=1000)
    assert sft.learning_rate == 3e-3 and sft.lr_scheduler_type == "warmup_stable_decay"
    assert sft.lr_scheduler_kwargs == {"num_decay_steps": 300} and sft.warmup_steps == 30
    assert sft.per_device_train_batch_size == 16 and not sft.gradient_checkpointing and sft.use_cpu
    assert sft_config("m", "t.jsonl", tmp_path, steps=10, logging_steps=1).logging_steps == 1  # overrides win
    grpo = grpo_config("m", "t.jsonl", tmp_path, steps=20)
    assert grpo.beta == 0.0 and grpo.temperature == 1.0 and grpo.num_generations == 4
    assert grpo.prompt_config().instruction == COMPACT_PROMPT.instruction and grpo.prompt_config().criteria is None
