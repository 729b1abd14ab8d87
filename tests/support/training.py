"""Training settings shared by the training tests: the CPU overrides, and a tiny judge's SFT and GRPO configs.

The CPU settings have one home here, as `TrainingArguments` keywords (`ON_CPU`, `CPU_RUN`), and every variant a
test passes is built from them: as `key=value` overrides (`CPU_LOAD`, `CPU`) and for the shipped recipes, whose
GPU-only switches go off too (`CPU_RECIPE`, `CPU_GRPO_RECIPE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.config import load_config
from training.grpo import JudgeGRPOConfig
from training.sft import JudgeSFTConfig


def as_overrides(settings: Mapping[str, Any]) -> list[str]:
    """`settings` as `key=value` overrides, each value written as YAML reads it back.

    >>> as_overrides({"use_cpu": True, "report_to": "none", "seed": 0})
    ['use_cpu=true', 'report_to=none', 'seed=0']
    """
    return [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in settings.items()]


ON_CPU: dict[str, Any] = {"use_cpu": True, "bf16": False}
"""What any training config needs to load on a CPU: TRL's and the 7B recipes' bf16 needs a GPU."""
CPU_RUN: dict[str, Any] = {**ON_CPU, "report_to": "none", "logging_steps": 1, "disable_tqdm": True, "seed": 0}
"""A test's training run on a CPU: no trackers and no progress bar, a log row per step, a fixed seed."""

CPU_LOAD = as_overrides(ON_CPU)
CPU = as_overrides(CPU_RUN)
CPU_RECIPE = [*CPU, "activation_checkpointing=false"]
"""A shipped recipe on a CPU: also without the activation checkpointing the 7B recipes trade speed for memory with."""
CPU_GRPO_RECIPE = [*CPU_RECIPE, "use_vllm=false"]
"""A shipped GRPO recipe on a CPU: also generating with the trained model itself instead of a vLLM server."""


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
