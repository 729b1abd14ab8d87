"""The pieces of a causal LM / VLM that replay calls directly, and the switches it flips around its passes.

Wrappers (DDP, accelerate, PEFT) are looked through; HF's own activation checkpointing is turned off (it drops
the cache inside layers) and replaced by `_checkpointed_layers`, which keeps cache writes; `_RngReplay` gives a
recomputation the dropout masks of the pass it repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from training.replay.errors import ReplayUnsupportedError

_IMAGE_MODELS = ("qwen2_5_vl",)
"""VLMs whose image prompts are replayed (3-D rope positions from `get_rope_index`; tested). Image rows of
other VLMs take the plain path; their text-only rows are replayed."""


@dataclass
class _Policy:
    """The pieces of a causal LM / VLM replay calls directly (TRL's fused forward turns the cache off)."""

    model: nn.Module
    backbone: nn.Module
    head: nn.Module
    text_config: Any
    mrope: bool
    image_token_ids: tuple[int, ...]
    softcap: float | None
    logit_scale: float


def _unwrap(model: nn.Module) -> nn.Module:
    while hasattr(model, "module") and isinstance(model.module, nn.Module):  # DDP / accelerate wrappers
        model = model.module
    if hasattr(model, "get_base_model"):  # PEFT: the adapters live inside the base model's modules
        model = model.get_base_model()
    return model


def _logit_scale(text_config: Any) -> float:
    """The multiplier on the logits, read the way TRL's fused head reads it (1.0 for Qwen)."""
    for name in ("logit_scale", "output_multiplier", "lm_head_multiplier"):
        if getattr(text_config, name, None) is not None:
            return float(getattr(text_config, name))
    scaling = getattr(text_config, "logits_scaling", None)
    if scaling is not None:
        return float(scaling) if text_config.model_type == "hyperclovax" else 1.0 / float(scaling)
    return 1.0


def _resolve(model: nn.Module) -> _Policy:
    hf = _unwrap(model)
    backbone = getattr(hf, "base_model", None)  # `base_model_prefix`'s module: what TRL's fused head calls too
    head = hf.get_output_embeddings() if hasattr(hf, "get_output_embeddings") else None
    if not isinstance(backbone, nn.Module) or backbone is hf or head is None:
        raise ReplayUnsupportedError(f"{type(hf).__name__} is not a causal LM with a backbone and an LM head")
    text_config = hf.config.get_text_config()
    config = hf.config
    image_ids = tuple(
        int(v)
        for v in (getattr(config, "image_token_id", None), getattr(config, "video_token_id", None))
        if v is not None
    )
    return _Policy(
        model=hf,
        backbone=backbone,
        head=head,
        text_config=text_config,
        mrope=getattr(config, "model_type", None) in _IMAGE_MODELS and hasattr(backbone, "get_rope_index"),
        image_token_ids=image_ids,
        softcap=getattr(text_config, "final_logit_softcapping", None),
        logit_scale=_logit_scale(text_config),
    )


@contextmanager
def _no_checkpointing(model: nn.Module) -> Iterator[None]:
    """Activation checkpointing forces `use_cache=False` inside layers (the cache would stay empty): off here."""
    switched = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for module in switched:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in switched:
            module.gradient_checkpointing = True


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


class _RngReplay:
    """Same RNG state for the no-grad prompt pass (a) and its recomputation (c): equal dropout masks."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = torch.cuda.get_rng_state(device) if self.cuda else None

    @contextmanager
    def replay(self) -> Iterator[None]:
        cpu_now = torch.get_rng_state()
        cuda_now = torch.cuda.get_rng_state(self.device) if self.cuda else None
        torch.set_rng_state(self.cpu_state)
        if self.cuda:
            torch.cuda.set_rng_state(self.cuda_state, self.device)
        try:
            yield
        finally:
            torch.set_rng_state(cpu_now)
            if self.cuda:
                torch.cuda.set_rng_state(cuda_now, self.device)


@contextmanager
def _checkpointed_layers(backbone: nn.Module) -> Iterator[None]:
    """Non-reentrant activation checkpointing of each decoder (and vision) layer, cache writes included.

    HF's own checkpointing drops the cache inside layers; this keeps it, which `_RecordingLayer` makes safe.
    The prompt pass (c) then holds each layer's input instead of all its activations.
    """
    from functools import partial

    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_layers import GradientCheckpointingLayer

    def run(forward: Callable, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    wrapped: list[tuple[nn.Module, Any]] = []
    inside: list[str] = []
    for name, module in backbone.named_modules():
        if not isinstance(module, GradientCheckpointingLayer) or any(name.startswith(p + ".") for p in inside):
            continue
        inside.append(name)
        wrapped.append((module, module.__dict__.get("forward")))
        module.forward = partial(run, module.forward)
    try:
        yield
    finally:
        for module, own in wrapped:
            if own is None:
                del module.forward
            else:
                module.forward = own
