"""Every shipped training recipe, judge and policy alike, loads, and builds its TRL trainer with a tiny model
swapped in."""

from __future__ import annotations

from pathlib import Path

import pytest

from judge.reward import AsyncHttpJudgeReward, GroupedJudgeReward
from tests.support.training import CPU_GRPO_RECIPE, CPU_RECIPE
from training.config import load_config
from training.grpo import JudgeGRPOConfig, build_grpo_trainer
from training.policy import JudgePolicyGRPOConfig, build_policy_trainer
from training.sft import JudgeSFTConfig, build_sft_trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FAMILIES = {
    "judge": {
        "judge_sft_tiny.yaml",
        "judge_sft_qwen2_5_vl_7b.yaml",
        "judge_grpo_tiny.yaml",
        "judge_grpo_qwen2_5_vl_7b.yaml",
    },
    "policy": {"policy_grpo_tiny.yaml", "policy_grpo_qwen2_5_vl_7b.yaml"},
}
"""The recipes of each family: the judge's (SFT, then GRPO on its own reward) and the policy's (judge as reward)."""
RECIPES = sorted(path for family in FAMILIES for path in CONFIGS.glob(f"{family}_*.yaml"))
BUILDERS = {
    "judge_sft": (JudgeSFTConfig, build_sft_trainer, CPU_RECIPE),
    "judge_grpo": (JudgeGRPOConfig, build_grpo_trainer, CPU_GRPO_RECIPE),
    "policy_grpo": (JudgePolicyGRPOConfig, build_policy_trainer, CPU_GRPO_RECIPE),
}
"""A recipe's config class, trainer builder and CPU overrides, by its name's first two words."""


@pytest.mark.parametrize("family", FAMILIES)
def test_recipes_exist(family):
    assert {p.name for p in CONFIGS.glob(f"{family}_*.yaml")} == FAMILIES[family]


def test_the_recipes_launch_configs_exist():
    assert (CONFIGS / "accelerate" / "zero3.yaml").exists() and (CONFIGS / "accelerate" / "fsdp.yaml").exists()


def _data_files(path: Path, synth_data: Path, world: Path) -> list[str]:
    """The judge recipes train on the synthetic data's SFT or RL split, with its validation split; the policy's on
    world records, evaluated on them where the recipe evaluates."""
    if path.name.startswith("policy_"):
        return [f"train_file={world}", *([f"eval_file={world}"] if "eval_file" in path.read_text() else [])]
    data = synth_data / ("sft" if "_sft_" in path.name else "rl")
    return [f"train_file={data / 'train.jsonl'}", f"eval_file={data / 'val.jsonl'}"]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_builds_its_trainer(path, tiny_vlm_dir, synth_data, world, tmp_path):
    assert path.read_text().startswith("#"), "each recipe opens with its launch command"
    config_class, build, cpu = BUILDERS["_".join(path.name.split("_")[:2])]
    files = _data_files(path, synth_data, world)
    overrides = [f"model_name_or_path={tiny_vlm_dir}", *files, f"output_dir={tmp_path}", *cpu]
    trainer = build(load_config(config_class, path, overrides))
    assert len(trainer.train_dataset) > 0
    assert (trainer.eval_dataset is not None) == any(f.startswith("eval_file=") for f in files)
    if config_class is JudgePolicyGRPOConfig:
        [reward] = trainer.reward_funcs
        assert isinstance(reward, GroupedJudgeReward) and reward.mode == "listwise"
        assert {"prompt", "images", "answer"} <= set(trainer.train_dataset.column_names)
        assert ("7b" in path.name) == isinstance(reward, AsyncHttpJudgeReward)  # the 7B recipe uses a server


def test_unknown_and_missing_fields_are_explained(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_name_or_path: x\ntrain_file: y\nlearning_rat: 0.1\n")
    with pytest.raises(ValueError, match="unknown JudgeSFTConfig field\\(s\\) \\['learning_rat'\\]"):
        load_config(JudgeSFTConfig, path)
    with pytest.raises(ValueError, match="train_file is required"):
        load_config(JudgeSFTConfig, None, ["model_name_or_path=x", "output_dir=o"])
    with pytest.raises(ValueError, match="key=value"):
        load_config(JudgeSFTConfig, None, ["max_steps"])
