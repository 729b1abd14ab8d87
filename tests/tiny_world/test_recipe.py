"""The tiny-judge recipe shared by the learning benchmark and the demo: its data, held-out pairs and settings."""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

import pytest

from tiny_world.heldout import heldout_pairs
from tiny_world.recipe import (
    COMPACT_PROMPT,
    RENAMED,
    TinyJudgeRecipe,
    distill_judge_data,
    grpo_config,
    sft_config,
    vision_sensitivity,
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
    sft = sft_config("m", "t.jsonl", tmp_path, max_steps=1000)
    assert sft.learning_rate == 3e-3 and sft.lr_scheduler_type == "warmup_stable_decay"
    assert sft.lr_scheduler_kwargs == {"num_decay_steps": 300} and sft.warmup_steps == 30
    assert sft.per_device_train_batch_size == 16 and not sft.gradient_checkpointing and sft.use_cpu
    assert sft_config("m", "t.jsonl", tmp_path, max_steps=10, logging_steps=1).logging_steps == 1  # overrides win
    grpo = grpo_config("m", "t.jsonl", tmp_path, max_steps=20)
    assert grpo.loss_type == "grpo" and grpo.beta == 0.02 and grpo.temperature == 0.7 and grpo.num_generations == 8
    assert grpo.warmup_steps == 0.1 and grpo.learning_rate == 3e-5
    assert grpo.prompt_config().instruction == COMPACT_PROMPT.instruction and grpo.prompt_config().criteria is None


def test_the_recipe_is_the_learning_benchmarks(tmp_path):
    """One recipe (docs/learning.md's defaults) drives the demo and the benchmark; its configs follow it."""
    from tiny_world.demo.config import DemoConfig

    recipe = TinyJudgeRecipe()
    assert (recipe.shaded, recipe.reasoner_style, recipe.vision_warmup_steps) == (True, "checks", 1500)
    assert recipe.max_new_tokens == 192 and recipe.freeze_vision
    assert TinyJudgeRecipe(reasoner_style="diff").max_new_tokens == 96
    assert TinyJudgeRecipe(judge_max_new_tokens=40).max_new_tokens == 40
    assert not TinyJudgeRecipe(vision_warmup_steps=0).freeze_vision
    assert not TinyJudgeRecipe(train_vision=True).freeze_vision
    sft = recipe.sft_config("m", "t.jsonl", tmp_path)
    assert sft.max_steps == 1500 and sft.learning_rate == 1e-3 and sft.freeze_vision
    grpo = recipe.grpo_config("m", "t.jsonl", tmp_path, logging_steps=1)
    assert (
        grpo.max_steps == 100 and grpo.max_completion_length == 192 and grpo.freeze_vision and grpo.logging_steps == 1
    )
    assert (grpo.beta, grpo.loss_type, grpo.temperature) == (recipe.grpo_beta, recipe.grpo_loss_type, 0.7)
    assert DemoConfig().recipe() == recipe  # the demo's defaults are the recipe's


def test_each_setting_has_trls_name_from_the_yaml_to_the_trainer(tmp_path):
    """A recipe field a trainer reads is named as TRL names it (after `sft_` or `grpo_` where both have one)."""
    recipe = TinyJudgeRecipe(
        sft_max_steps=7, sft_learning_rate=0.01, per_device_train_batch_size=6, num_generations=3, grpo_max_steps=2
    )
    sft, grpo = recipe.sft_config("m", "t", tmp_path), recipe.grpo_config("m", "t", tmp_path)
    assert (sft.max_steps, sft.learning_rate, sft.per_device_train_batch_size) == (7, 0.01, 6)
    assert (grpo.max_steps, grpo.num_generations, grpo.per_device_train_batch_size) == (2, 3, 6)
    for old, new in RENAMED.items():
        assert new in {f.name for f in fields(TinyJudgeRecipe)} and old not in {f.name for f in fields(TinyJudgeRecipe)}
    with pytest.raises(ValueError, match=r"per_device_train_batch_size \(6\) must be a multiple of num_generations"):
        TinyJudgeRecipe(per_device_train_batch_size=6, num_generations=4)


def test_warm_up_of_zero_steps_keeps_the_model(tmp_path):
    figures = TinyJudgeRecipe(vision_warmup_steps=0).warm_up("base", tmp_path, tmp_path, tmp_path / "seeing")
    assert figures == {"steps": 0, "wall_s": 0.0, "model": "base", "frozen": False}


def test_vision_sensitivity_sees_a_collapsed_vision_tower(tiny_vlm_dir, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    fresh = vision_sensitivity(tiny_vlm_dir)
    assert set(fresh) == {"colour", "kind", "size"} and all(v > 0.1 for v in fresh.values()), fresh

    # A merger whose last layer ignores its input outputs one constant vector: features no longer move.
    collapsed = tmp_path / "collapsed"
    shutil.copytree(tiny_vlm_dir, collapsed)
    weights = load_file(str(collapsed / "model.safetensors"))
    (name,) = [k for k in weights if k.endswith("merger.mlp.2.weight")]
    weights[name] = torch.zeros_like(weights[name])
    weights[name.replace("weight", "bias")] = torch.ones_like(weights[name.replace("weight", "bias")])
    save_file(weights, str(collapsed / "model.safetensors"), metadata={"format": "pt"})
    assert vision_sensitivity(collapsed) == {"colour": 0.0, "kind": 0.0, "size": 0.0}


def test_description_examples_join_the_training_file(data, tmp_path):
    import shutil

    from data_synthesis.assemble import write_sft_examples
    from jobs.jsonl import read_jsonl
    from tiny_world.recipe import DESCRIBE_PROMPT
    from training.data import load_sft_dataset

    folder = tmp_path / "copy"
    shutil.copytree(data[0].parent, folder)
    folder = folder / data[0].name
    items, distilled, described = (
        [row for _, row in read_jsonl(folder / f"{name}.jsonl")] for name in ("items", "distilled", "described")
    )
    plain = write_sft_examples(items, distilled, folder)
    counts = write_sft_examples(
        items, distilled, folder, described=described, describe_share=0.25, describe_instruction=DESCRIBE_PROMPT
    )
    n = plain["sft_train"]
    assert counts["sft_train_descriptions"] == round(n / 3) and counts["sft_train"] == n + round(n / 3)
    assert counts["sft_val"] == plain["sft_val"]  # validation stays judge examples only
    rows = [row for _, row in read_jsonl(folder / "sft" / "train.jsonl")]
    split = {item["id"]: item["meta"]["split"] for item in items}
    descriptions = [row for row in rows if row["id"].endswith("/describe")]
    assert all(split[row["id"].removesuffix("/describe")] == "train" for row in descriptions)
    first = descriptions[0]
    assert first["messages"][0]["content"][1]["text"] == DESCRIBE_PROMPT
    assert first["messages"][1]["content"][0]["text"].startswith("A white 84x84 image. Shapes: ")
    dataset = load_sft_dataset(folder / "sft" / "train.jsonl")  # every image path resolves from sft/
    assert len(dataset) == len(rows) and dataset[len(rows) - 1]["images"][0].size == (84, 84)
    with pytest.raises(ValueError, match="describe_share"):
        write_sft_examples(items, distilled, folder, describe_share=0.5)


def test_distilled_data_records_how_the_reasoner_used_the_hint(data, tmp_path):
    """The recipe's distilled traces with `reasoner_hint`: "ignore" keeps fewer traces than "lean" and drops
    the items whose description lacks the asked object as `unparsed`; the stage records the setting."""
    import json
    import shutil

    folder, _, _ = data
    summaries = {}
    for hint in ("lean", "ignore"):
        out = tmp_path / hint
        shutil.copytree(folder, out, ignore=shutil.ignore_patterns("described*", "items*", "distilled*", "sft", "rl"))
        summaries[hint] = distill_judge_data(
            out, out, val_fraction=0.25, traces="distilled", describe_error_rate=0.4, reasoner_hint=hint, seed=0
        )
        settings = json.loads((out / "distilled.settings.json").read_text())["reasoner"]
        assert settings.get("hint", "lean") == hint
    lean, ignore = summaries["lean"], summaries["ignore"]
    assert ignore["sft_train"] + ignore["sft_val"] < lean["sft_train"] + lean["sft_val"]
    assert ignore["drop_reasons"].get("unparsed", 0) > 0 and "unparsed" not in lean["drop_reasons"]
