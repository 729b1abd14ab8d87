"""Warm-up SFT of the judge on distilled reasoning (TRL `SFTTrainer`), full or LoRA.

    mrjudge train sft --config configs/judge_sft_tiny.yaml
    mrjudge train sft --config configs/judge_sft_qwen2_5_vl_7b.yaml max_steps=200 use_lora=true
    mrjudge adapters merge runs/judge-sft-lora --out runs/judge-sft-merged   # a LoRA run's output, merged
    accelerate launch --config_file configs/accelerate/zero3.yaml -m mrjudge.cli train sft --config configs/judge_sft_qwen2_5_vl_7b.yaml

The data are `sft/train.jsonl` examples from `mrjudge synth distill`; the loss is on the assistant's
completion only (prompt/completion form), images go through the model's processor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trl import SFTConfig, SFTTrainer

from judge.config import setting
from training.data import load_sft_dataset
from training.model_config import JudgeModelArguments
from training.model_loading import load_training_model
from training.recipe import build_trainer, run_recipe

__all__ = ["FULL_LOGITS_MAX_VOCAB", "JudgeSFTConfig", "JudgeSFTTrainer", "build_sft_trainer", "run_sft"]

FULL_LOGITS_MAX_VOCAB = 16_384
"""Vocabularies up to this size take the loss from the full logits by default (`full_logits_loss`)."""


@dataclass
class JudgeSFTConfig(JudgeModelArguments, SFTConfig):
    """TRL's `SFTConfig` plus the judge fields (model, LoRA, vision freezing, data files, resume)."""

    full_logits_loss: bool | None = setting(
        None,
        "Take the loss from the model's full logits instead of TRL's fused LM head, which projects in "
        "tiles so that a large vocabulary's logits never exist at once. Default (null): full logits when the "
        f"vocabulary has at most {FULL_LOGITS_MAX_VOCAB} entries, where they are small and the tiles are pure "
        "overhead on a CPU (0.09 s of a 0.33 s step on the tiny judge); the fused head otherwise (Qwen's 152k).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # Qwen2.5-VL prompts carry image tokens the collator must not truncate away.
        if self.max_length is not None and self.max_length < 64:
            raise ValueError(f"max_length ({self.max_length}) leaves no room for the judge prompt; use None or >= 64")


class JudgeSFTTrainer(SFTTrainer):
    """`SFTTrainer` whose plain negative log-likelihood can come from the full logits (`full_logits_loss`).

    TRL asks for a subclass overriding `compute_loss` to change the loss. This one changes only how it is
    computed: the same mean over completion tokens, and the same `entropy`, `mean_token_accuracy` and
    `num_tokens` metrics. Every other case (label smoothing, a `compute_loss_func`, DFT, MoE aux loss,
    sequence parallelism, `return_outputs`) stays TRL's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vocab = self.model.get_output_embeddings().weight.shape[0]
        choice = getattr(self.args, "full_logits_loss", None)
        self.full_logits = vocab <= FULL_LOGITS_MAX_VOCAB if choice is None else bool(choice)

    def _plain_nll(self) -> bool:
        args = self.args
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        return (
            self.full_logits
            and args.loss_type == "nll"
            and args.label_smoothing_factor == 0
            and self.compute_loss_func is None
            and not self.aux_loss_enabled
            and not (parallelism is not None and getattr(parallelism, "sp_enabled", False))
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Padding-free batches (no attention mask) keep TRL's path: their token count comes from position ids.
        if return_outputs or "attention_mask" not in inputs or not self._plain_nll():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        import torch

        mode = "train" if self.model.training else "eval"
        labels = inputs["labels"][:, 1:]
        logits = model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False).logits[:, :-1]
        mask = labels != -100
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        target = log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
        num_tokens = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -target.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())

        with torch.no_grad():
            entropy = -(log_probs.exp() * log_probs).sum(-1).masked_fill(~mask, 0.0)
            top1 = (logits.argmax(-1) == labels) & mask
            gather = self.accelerator.gather_for_metrics
            valid = gather(mask.sum()).sum()
            for name, value in (("entropy", entropy.sum()), ("mean_token_accuracy", top1.sum())):
                self._metrics[mode][name].append((gather(value).sum() / valid).item() if valid > 0 else 0.0)
            if mode == "train":
                self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item() // self._tp_size
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return loss


def build_sft_trainer(
    config: JudgeSFTConfig, *, callbacks: list[Any] | None = None, checkpoint: str | None = None
) -> Any:
    """A `JudgeSFTTrainer` ready to `train()`: model, processor, datasets and (optionally) PEFT wired in."""
    keep = config.keep_text_only_rows
    return build_trainer(
        JudgeSFTTrainer,
        config,
        load_training_model(config, checkpoint),
        lambda path: load_sft_dataset(path, keep_text_only=keep),
        callbacks=callbacks,
    )


def run_sft(config: JudgeSFTConfig, *, callbacks: list[Any] | None = None) -> Any:
    """Train, resuming from the last checkpoint when `config.resume`; save the judge and its processor."""
    return run_recipe(build_sft_trainer, config, callbacks)
