"""The recipe's trainers and its judge: TRL's SFT and GRPO configs with the settings measured in
docs/learning.md, GRPO's batch rule, and the judge that scores on a CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.prompt import COMPACT_PROMPT

__all__ = ["TRAINER_DEFAULTS", "check_group", "grpo_config", "recipe_judge", "sft_config"]

TRAINER_DEFAULTS: dict[str, Any] = dict(
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
    dataloader_num_workers=0,
    # TRL switches checkpointing on by default; on a model this small it only buys recompute time.
    gradient_checkpointing=False,
)
"""TRL/`TrainingArguments` settings every CPU run of the recipe shares."""


def recipe_judge(
    model_dir: str | Path,
    *,
    image_root: str | Path | None,
    batch_size: int,
    max_new_tokens: int = 96,
    samples: int = 1,
    temperature: float = 0.0,
) -> Any:
    """The recipe's judge on a CPU: both display orders, greedy, `COMPACT_PROMPT`, one backend call per batch.
    With `samples` > 1 and a `temperature`, each order is sampled that many times, as GRPO samples it."""
    from judge.backends.hf import TransformersBackend
    from judge.judging import Judge, JudgeConfig

    return Judge(
        TransformersBackend(str(model_dir), device="cpu", max_batch_size=2 * samples * batch_size),
        JudgeConfig(
            orders=2,
            samples=samples,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            prompt=COMPACT_PROMPT,
        ),
        image_root=image_root,
    )


def check_group(batch_size: int, num_generations: int, prefix: str = "") -> None:
    """GRPO's rule, checked before any work: the batch is whole groups of at least 2 completions of a prompt."""
    if num_generations < 2 or batch_size % num_generations:
        raise ValueError(
            f"{prefix}per_device_train_batch_size ({batch_size}) must be a multiple of {prefix}num_generations "
            f"({num_generations}), which must be at least 2 (GRPO compares completions of one prompt)"
        )


def _trainer_config(cls: type, model: str | Path, train_file: str | Path, output_dir: str | Path, **fields: Any) -> Any:
    return cls(
        model_name_or_path=str(model),
        train_file=str(train_file),
        output_dir=str(output_dir),
        **{**TRAINER_DEFAULTS, **fields},
    )


def sft_config(
    model: str | Path,
    train_file: str | Path,
    output_dir: str | Path,
    *,
    max_steps: int,
    warmup_fraction: float = 0.03,
    **fields: Any,
) -> Any:
    """The warm-up SFT: lr held for 70 % of the steps after a short warm-up, then decayed (warmup_stable_decay).

    `fields` are `JudgeSFTConfig` fields; they win over the recipe's (batch 16, lr 3e-3, seed 0, `TRAINER_DEFAULTS`).
    """
    from training.sft import JudgeSFTConfig

    recipe = dict(
        max_steps=max_steps,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": int(0.3 * max_steps)},
        warmup_steps=int(warmup_fraction * max_steps),
        weight_decay=0.0,
        max_length=None,
        logging_steps=10,
        seed=0,
    )
    return _trainer_config(JudgeSFTConfig, model, train_file, output_dir, **{**recipe, **fields})


def grpo_config(
    model: str | Path, train_file: str | Path, output_dir: str | Path, *, max_steps: int, **fields: Any
) -> Any:
    """The judge GRPO after SFT: TRL's `grpo` loss with a small KL term, a short lr warm-up, sampled at
    temperature 0.7 (at 1.0 the tiny judge's image line is mostly noise, and the letter reward then pays for
    right answers reached from misread pictures: docs/learning.md, "RL that teaches"), the SFT data's wording.

    `fields` are `JudgeGRPOConfig` fields; they win over the recipe's (batch 16, 8 completions of at most 96
    tokens, lr 3e-5, beta 0.02, seed 0, `TRAINER_DEFAULTS`).
    """
    from training.grpo import JudgeGRPOConfig

    recipe = dict(
        max_steps=max_steps,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=96,
        learning_rate=3e-5,
        loss_type="grpo",
        beta=0.02,
        warmup_steps=0.1,
        temperature=0.7,
        prompt_instruction=COMPACT_PROMPT.instruction,  # the wording the SFT data used
        prompt_criteria="",
        prompt_answer_format=COMPACT_PROMPT.answer_format,
        logging_steps=2,
        seed=0,
    )
    return _trainer_config(JudgeGRPOConfig, model, train_file, output_dir, **{**recipe, **fields})
