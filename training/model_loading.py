"""Loading the model a recipe trains: the judge or policy, its processor, and the LoRA config the trainer applies.

`model_name_or_path` may be a full model or a LoRA adapter folder (docs/lora-handoff.md): an adapter is
continued (`use_lora=true`) or merged into its base for full fine-tuning; a resumed full fine-tuning run takes
its weights from the checkpoint. The arguments are `training.model_config`'s.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from training.model_config import JudgeModelArguments, get_peft_config

__all__ = ["load_training_model", "prepare_model"]


def prepare_model(
    args: JudgeModelArguments, *, dtype: Any = None, checkpoint: str | None = None
) -> tuple[Any, Any, Any]:
    """Load the judge and its processor; freeze the vision tower and/or build a LoRA config (`get_peft_config`) as
    asked.

    `checkpoint` (when resuming full fine-tuning) is where the weights come from: `Trainer` restores a
    checkpoint with a non-strict `load_state_dict`, and Qwen2.5-VL checkpoints are saved under renamed
    keys (`model.layers…` for `model.language_model.layers…`), so its own restore silently keeps the
    *initial* weights. `from_pretrained` applies the renaming. LoRA checkpoints hold adapters only and
    are restored by the trainer.

    A LoRA adapter folder as `model_name_or_path` loads over its base: with `use_lora` as the trainable
    PEFT model itself (the trainer keeps training it; TRL's GRPO then takes a frozen copy of it as the KL
    reference), without it merged into the base for full fine-tuning.

    The processor resizes images into [`min_pixels`, `max_pixels`] when they are set (TRL's collators call it),
    and keeps that range when the trainer saves it.

    Returns (model, processor, peft_config or None) — the trainer applies the PEFT config itself.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from judge.models import (
        load_adapter_onto,
        load_base_config,
        load_processor,
        merge_adapter_into,
        processor_folder,
        resolve_adapter,
        set_pixel_range,
    )

    source = resolve_adapter(args.model_name_or_path, args.base_model_name_or_path)
    # A local base is loaded by its absolute path, which PEFT writes into every adapter this run saves
    # (`base_model_name_or_path`), so the next command finds the base from any working directory.
    path = source.base if source else _absolute_if_local(args.model_name_or_path)
    config = load_base_config(source) if source else AutoConfig.from_pretrained(path)
    is_vlm = getattr(config, "vision_config", None) is not None
    auto = AutoModelForImageTextToText if is_vlm else AutoModelForCausalLM
    weights = checkpoint if checkpoint and not args.use_lora else path
    model = auto.from_pretrained(weights, dtype=dtype or torch.float32)
    processor = set_pixel_range(
        load_processor(processor_folder(source) if source else path, is_vlm=is_vlm, config_path=path),
        min_pixels=args.min_pixels,
        max_pixels=args.max_pixels,
    )
    if source is not None and args.use_lora:
        _warn_unused_lora_fields(args, source.config)
        model = load_adapter_onto(model, source, trainable=True)
        return model, processor, None  # already PEFT-wrapped: the trainer must not add a second adapter
    if source is not None and weights == path:  # a full fine-tuning checkpoint already holds the merged weights
        _check_mergeable_here(source)
        model = merge_adapter_into(model, source)
    if args.freeze_vision and is_vlm:
        visual = getattr(model, "visual", None) or model.model.visual
        for param in visual.parameters():
            param.requires_grad_(False)
    return model, processor, get_peft_config(args)


def load_training_model(config: Any, checkpoint: str | None, *, left_pad: bool = False) -> tuple[Any, Any, Any]:
    """`prepare_model` in the recipe's dtype (bf16 or float32); `left_pad` for GRPO, whose prompts TRL left-pads:
    the processor must pad the same way, or Qwen2.5-VL's mm_token_type_ids land beside the image tokens."""
    import torch

    dtype = torch.bfloat16 if config.bf16 else torch.float32
    model, processor, peft_config = prepare_model(config, dtype=dtype, checkpoint=checkpoint)
    if left_pad:
        getattr(processor, "tokenizer", processor).padding_side = "left"
    return model, processor, peft_config


def _absolute_if_local(path: str) -> str:
    return str(Path(path).expanduser().resolve()) if Path(path).expanduser().is_dir() else path


def _check_mergeable_here(source: Any) -> None:
    """A merge needs whole weights; under DeepSpeed ZeRO-3 each rank holds a shard from the moment they load."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        raise ValueError(
            f"model_name_or_path is the adapter {source.adapter} and use_lora=false asks to merge it, but under "
            "DeepSpeed ZeRO-3 the base loads sharded and cannot be merged in place: run `mrjudge adapters merge "
            f"{source.adapter} --out DIR` once and set model_name_or_path=DIR, or continue the adapter (use_lora=true)"
        )


def _warn_unused_lora_fields(args: JudgeModelArguments, adapter_config: dict[str, Any]) -> None:
    import warnings

    defaults = {f.name: f.default for f in dataclasses.fields(JudgeModelArguments)}
    changed = [
        f"{name}={getattr(args, name)} (the adapter's is {adapter_config.get(key)})"
        for name, key in (("lora_r", "r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout"))
        if getattr(args, name) != defaults[name] and getattr(args, name) != adapter_config.get(key)
    ]
    if changed:
        warnings.warn(
            f"continuing the adapter {args.model_name_or_path} with its own settings; not used: {', '.join(changed)}. "
            "Merge it first (`mrjudge adapters merge`) to train a new LoRA with these settings.",
            stacklevel=3,
        )
