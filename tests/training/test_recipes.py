"""Every shipped training recipe loads, and builds its TRL trainer with a tiny model swapped in."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.common import load_config
from training.grpo import JudgeGRPOConfig, build_grpo_trainer
from training.sft import JudgeSFTConfig, build_sft_trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECIPES = sorted(CONFIGS.glob("judge_*.yaml"))
CPU = ["use_cpu=true", "bf16=false", "activation_checkpointing=false", "report_to=none"]


def test_recipes_exist():
    names = {p.name for p in RECIPES}
    assert {"judge_sft_qwen2_5_vl_7b.yaml", "judge_grpo_qwen2_5_vl_7b.yaml"} <= names
    assert (CONFIGS / "accelerate" / "zero3.yaml").exists() and (CONFIGS / "accelerate" / "fsdp.yaml").exists()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_builds_its_trainer(path, tiny_vlm_dir, synth_data, tmp_path):
    assert path.read_text().startswith("#"), "each recipe opens with its launch command"
    is_sft = "_sft_" in path.name
    data = synth_data / ("sft" if is_sft else "rl")
    overrides = [
        f"model_name_or_path={tiny_vlm_dir}",
        f"train_file={data / 'train.jsonl'}",
        f"eval_file={data / 'val.jsonl'}",
        f"output_dir={tmp_path}",
        *CPU,
    ]
    if is_sft:
        trainer = build_sft_trainer(load_config(JudgeSFTConfig, path, overrides))
    else:
        trainer = build_grpo_trainer(load_config(JudgeGRPOConfig, path, [*overrides, "use_vllm=false"]))
    assert len(trainer.train_dataset) > 0 and trainer.eval_dataset is not None


def test_unknown_and_missing_fields_are_explained(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_name_or_path: x\ntrain_file: y\nlearning_rat: 0.1\n")
    with pytest.raises(ValueError, match="unknown JudgeSFTConfig field\\(s\\) \\['learning_rat'\\]"):
        load_config(JudgeSFTConfig, path)
    with pytest.raises(ValueError, match="train_file is required"):
        load_config(JudgeSFTConfig, None, ["model_name_or_path=x", "output_dir=o"])
    with pytest.raises(ValueError, match="key=value"):
        load_config(JudgeSFTConfig, None, ["max_steps"])
