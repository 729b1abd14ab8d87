"""The recipes' model arguments: what they add to TRL's configs, and the LoRA config those ask for.

As TRL's `ModelConfig` with `get_peft_config`: `JudgeModelArguments` is a field mixin (model, image size, LoRA,
adapter store, data files, resume) that `JudgeSFTConfig`, `JudgeGRPOConfig` and `JudgePolicyGRPOConfig` put in
front of TRL's own config, and `get_peft_config` turns its LoRA fields into the `LoraConfig` the trainer applies.
Loading the model they name is `training.model_loading`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from judge.config import setting
from training.config import post_init_next

__all__ = ["JudgeModelArguments", "get_peft_config"]


@dataclass
class JudgeModelArguments:
    """Fields the recipes (judge SFT and GRPO, policy GRPO) add to TRL's configs."""

    # Model
    model_name_or_path: str | None = setting(
        None,
        "Judge to train: a folder or hub id (e.g. Qwen/Qwen2.5-VL-7B-Instruct), or a LoRA adapter "
        "folder from an earlier use_lora run (see use_lora for what happens to it).",
    )
    base_model_name_or_path: str | None = setting(
        None,
        "When model_name_or_path is an adapter folder: its base model, instead of the one its "
        "adapter_config.json names (for a base that moved or was written on another machine).",
    )
    freeze_vision: bool = setting(False, "Keep the vision tower fixed (train the language side only).")
    vision_learning_rate: float | None = setting(
        None,
        "Learning rate of the vision tower and its merger, in their own optimizer groups "
        "(default: learning_rate, one group).",
    )
    # Image size (Qwen's min_pixels / max_pixels)
    min_pixels: int | None = setting(
        None,
        "Images with fewer pixels are enlarged to about this many (aspect kept, sides multiples of 28) "
        "by the model's processor (default: its own config).",
    )
    max_pixels: int | None = setting(
        None,
        "Images with more pixels are shrunk to at most this many by the model's processor, and the "
        "saved processor keeps it. Each 28x28 block is one visual token: 1003520 (1280*28*28) caps an image at "
        "1,280; Qwen2.5-VL's stock 12845056 allows ~16k, more than a 4096-token max_length holds "
        "(default: the processor's own config).",
    )
    # LoRA (PEFT)
    use_lora: bool = setting(
        False,
        "Train LoRA adapters instead of all weights. Starting from an adapter folder, true keeps "
        "training that adapter (its own rank, alpha and targets; the lora_* fields are not used) and false "
        "merges it into the base and trains all weights. For a new LoRA over the merged model, run "
        "`mrjudge adapters merge ADAPTER --out DIR` and start from DIR.",
    )
    lora_r: int = setting(16, "LoRA rank; higher fits more and costs more memory.")
    lora_alpha: int = setting(32, "LoRA scaling numerator (alpha / r scales the update).")
    lora_dropout: float = setting(0.05, "Dropout on the LoRA input.")
    lora_target_modules: list[str] = setting(
        help="Language-model module names that get adapters (the vision tower never does).",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    # Adapter store (LoRA runs): every save becomes a revision servers can load (`mrjudge adapters`)
    adapter_store: str | None = setting(
        None, "Adapter store folder to export each saved LoRA adapter to (needs use_lora)."
    )
    adapter_policy: str | None = setting(
        None, "Policy name the exported revisions go under (default: output_dir's name)."
    )
    adapter_parent: str | None = setting(
        None, "Revision this run continues (policy@rev), recorded as the first parent."
    )
    # Data
    train_file: str | None = setting(None, "Training data from `mrjudge synth` (sft/train.jsonl or rl/train.jsonl).")
    eval_file: str | None = setting(None, "Optional validation data in the same format.")
    keep_text_only_rows: bool = setting(
        False,
        "Keep text-only rows of a data file that also has images (default: drop them, with their count "
        "in the log; under DeepSpeed ZeRO-3 a batch without images on one rank hangs training).",
    )
    resume: bool = setting(False, "Resume from the last checkpoint in output_dir (optimizer and RNG state included).")
    rank_fingerprints: bool = setting(
        False,
        "Write each process's sha256 of its parameters at train start and end to "
        "output_dir/rank_fingerprints/rank{R}.json (data-parallel replicas must agree; sharded ones differ).",
    )

    def __post_init__(self) -> None:
        from judge.images import PixelRange

        PixelRange(self.min_pixels, self.max_pixels)  # refused when the config loads
        post_init_next(self, JudgeModelArguments)


def get_peft_config(args: JudgeModelArguments) -> Any:
    """The `LoraConfig` of a new adapter when `args.use_lora`, else None (TRL's `get_peft_config`, for our fields);
    the trainer applies it itself."""
    if not args.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        # A regex, so the vision tower's projections (which share these names) stay frozen.
        target_modules=rf"^(?!.*visual).*\.({'|'.join(args.lora_target_modules)})$",
        task_type="CAUSAL_LM",
    )
