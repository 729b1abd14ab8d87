"""Warm-up SFT of the judge on distilled reasoning (TRL `SFTTrainer`), full or LoRA.

    mrjudge train sft --config configs/judge_sft_tiny.yaml
    mrjudge train sft --config configs/judge_sft_qwen2_5_vl_7b.yaml max_steps=200 use_lora=true
    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged   # a LoRA run's output, merged
    accelerate launch --config_file configs/accelerate/zero3.yaml -m scripts.cli train sft --config configs/judge_sft_qwen2_5_vl_7b.yaml

The data are `sft/train.jsonl` examples from `mrjudge synth distill`; the loss is on the assistant's
completion only (prompt/completion form), images go through the model's processor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trl import SFTConfig

from training.common import JudgeModelArguments, prepare_model, run_recipe, with_vision_learning_rate
from training.data import load_sft_dataset

__all__ = ["JudgeSFTConfig", "build_sft_trainer", "run_sft"]


@dataclass
class JudgeSFTConfig(JudgeModelArguments, SFTConfig):
    """TRL's `SFTConfig` plus the judge fields (model, LoRA, vision freezing, data files, resume)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Qwen2.5-VL prompts carry image tokens the collator must not truncate away.
        if self.max_length is not None and self.max_length < 64:
            raise ValueError(f"max_length ({self.max_length}) leaves no room for the judge prompt; use None or >= 64")


def build_sft_trainer(
    config: JudgeSFTConfig, *, callbacks: list[Any] | None = None, checkpoint: str | None = None
) -> Any:
    """An `SFTTrainer` ready to `train()`: model, processor, datasets and (optionally) PEFT wired in."""
    import torch
    from trl import SFTTrainer

    dtype = torch.bfloat16 if config.bf16 else torch.float32
    model, processor, peft_config = prepare_model(config, dtype=dtype, checkpoint=checkpoint)
    keep = config.keep_text_only_rows
    train = load_sft_dataset(config.train_file, keep_text_only=keep)
    evaluation = load_sft_dataset(config.eval_file, keep_text_only=keep) if config.eval_file else None
    return with_vision_learning_rate(SFTTrainer, config)(
        model=model,
        args=config,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=callbacks,
    )


def run_sft(config: JudgeSFTConfig, *, callbacks: list[Any] | None = None) -> Any:
    """Train, resuming from the last checkpoint when `config.resume`; save the judge and its processor."""
    return run_recipe(build_sft_trainer, config, callbacks)
