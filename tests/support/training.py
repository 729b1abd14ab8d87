"""Judge training settings shared by the training tests: a tiny judge's SFT and GRPO configs on the CPU."""

from __future__ import annotations

from pathlib import Path

from training.common import load_config
from training.grpo import JudgeGRPOConfig
from training.sft import JudgeSFTConfig

CPU = ["use_cpu=true", "bf16=false", "report_to=none", "logging_steps=1", "disable_tqdm=true", "seed=0"]


def sft_config(tiny_vlm_dir: Path, synth_data: Path, out: Path, *extra: str) -> JudgeSFTConfig:
    """A judge SFT config for the tiny judge on `synth_data`'s SFT split, on the CPU; `extra`: key=value overrides."""
    return load_config(
        JudgeSFTConfig,
        None,
        [f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'sft' / 'train.jsonl'}", f"output_dir={out}",
         "per_device_train_batch_size=4", "learning_rate=0.001", "max_length=null", *CPU, *extra],
    )  # fmt: skip


def grpo_config(tiny_vlm_dir: Path, synth_data: Path, out: Path, *extra: str) -> JudgeGRPOConfig:
    """A judge GRPO config for the tiny judge on `synth_data`'s RL split (4 prompts × 4 completions a step), on the
    CPU; `extra`: key=value overrides."""
    return load_config(
        JudgeGRPOConfig,
        None,
        [f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'rl' / 'train.jsonl'}", f"output_dir={out}",
         "per_device_train_batch_size=4", "num_generations=4", *CPU, *extra],
    )  # fmt: skip
