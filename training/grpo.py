"""Judge GRPO on multiple-choice items (TRL `GRPOTrainer`) with MR. Judge's reward.

    mrjudge train grpo --config configs/judge_grpo_tiny.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml -m mrjudge.cli train grpo --config configs/judge_grpo_qwen2_5_vl_7b.yaml

The data are `rl/train.jsonl` items from `mrjudge synth assemble`; the reward is
`training.judge_reward.JudgeReward`: 0.9 · correct + 0.1 · well-formed, 0 past the length budget.

From a LoRA warm-up SFT, either continue its adapter or start from the merged judge (docs/lora-handoff.md):

    mrjudge train grpo --config configs/judge_grpo_tiny.yaml model_name_or_path=runs/judge-sft-lora use_lora=true
    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged
    mrjudge train grpo --config configs/judge_grpo_tiny.yaml model_name_or_path=runs/judge-sft-merged

Continuing trains the SFT adapter itself (its rank and targets; with beta > 0 TRL keeps a frozen copy of it
as the KL reference) and writes an adapter; the merged start trains all weights, or a new LoRA with
use_lora=true whose base is the merged folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trl import GRPOConfig

from judge.config import setting
from judge.prompt import PromptConfig
from training.data import load_grpo_dataset
from training.judge_reward import JudgeReward
from training.model_config import JudgeModelArguments
from training.model_loading import load_training_model
from training.recipe import build_trainer, run_recipe

__all__ = ["JudgeGRPOConfig", "build_grpo_trainer", "run_grpo"]


@dataclass
class JudgeGRPOConfig(JudgeModelArguments, GRPOConfig):
    """TRL's `GRPOConfig` plus the judge fields and the reward's weights and budget."""

    accuracy_weight: float = setting(0.9, "Reward for choosing the labelled option.")
    format_weight: float = setting(0.1, "Reward for a well-formed <think>…</think><answer>X</answer>.")
    reward_max_tokens: int | None = setting(
        None, "Completions reaching this many tokens earn 0 (default: max_completion_length)."
    )
    prompt_instruction: str | None = setting(None, "Judge prompt's first paragraph (default: judge.prompt's).")
    prompt_criteria: str | None = setting(None, "Ranking criteria paragraph (default: judge.prompt's; '' omits it).")
    prompt_answer_format: str | None = setting(None, "Answer-format paragraph (default: judge.prompt's).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.accuracy_weight < 0 or self.format_weight < 0:
            raise ValueError(f"reward weights must be >= 0, got {self.accuracy_weight} and {self.format_weight}")

    def prompt_config(self) -> PromptConfig:
        """The judge prompt's wording; it must match the SFT data's (`SynthConfig.prompt`)."""
        default = PromptConfig()
        return PromptConfig(
            instruction=self.prompt_instruction if self.prompt_instruction is not None else default.instruction,
            criteria=(self.prompt_criteria or None) if self.prompt_criteria is not None else default.criteria,
            answer_format=self.prompt_answer_format if self.prompt_answer_format is not None else default.answer_format,
        )

    def reward(self) -> JudgeReward:
        return JudgeReward(
            accuracy_weight=self.accuracy_weight,
            format_weight=self.format_weight,
            max_completion_tokens=self.reward_max_tokens or self.max_completion_length,
        )


def build_grpo_trainer(
    config: JudgeGRPOConfig, *, callbacks: list[Any] | None = None, checkpoint: str | None = None
) -> Any:
    from trl import GRPOTrainer

    loaded = load_training_model(config, checkpoint, left_pad=True)
    prompt, keep = config.prompt_config(), config.keep_text_only_rows
    return build_trainer(
        GRPOTrainer,
        config,
        loaded,
        lambda path: load_grpo_dataset(path, prompt, keep_text_only=keep),
        callbacks=callbacks,
        reward_funcs=[config.reward()],
    )


def run_grpo(config: JudgeGRPOConfig, *, callbacks: list[Any] | None = None) -> Any:
    """Train (resuming when `config.resume`); save the judge and its processor."""
    return run_recipe(build_grpo_trainer, config, callbacks)
