"""LoRA adapters for tests: seeded, strong enough to change a tiny model's greedy output everywhere."""

from __future__ import annotations

from typing import Any

import torch

# Language-side attention only (the regex keeps the vision tower's projections out, as training does).
TARGETS = r"^(?!.*visual).*\.(q_proj|v_proj|o_proj)$"


def lora_model(base_dir: Any, seed: int, *, r: int = 4, alpha: int | None = None) -> Any:
    """The tiny model at `base_dir` wrapped by PEFT with random (non-zero) LoRA weights from `seed`.

    `init_lora_weights=False` makes both LoRA matrices random, and a large alpha lets the adapter, not
    the base, decide the greedy tokens, so two seeds answer differently and robustly.
    """
    from peft import LoraConfig, get_peft_model

    from judge.models import load_model

    model = load_model(str(base_dir), device="cpu").model
    torch.manual_seed(seed)
    alpha = 16 * r if alpha is None else alpha
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights=False, lora_dropout=0.0)
    return get_peft_model(model, config).eval()


def served_copy(base_dir: Any) -> Any:
    """A fresh `TransformersBackend` over the base at `base_dir` (what a server keeps resident)."""
    from judge.backends.hf import TransformersBackend

    return TransformersBackend(str(base_dir), device="cpu", max_batch_size=16)
