"""Grouped-query attention that never repeats the key/value heads: replay's passes run under it.

Every pass replay makes attends from a chunk or a branch to a cached prefix, so a mask is always passed, and
transformers' `sdpa_attention_forward` (read in transformers 5.24.0, `integrations/sdpa_attention.py`) then
copies each key/value head `num_key_value_groups` times (`repeat_kv`; `enable_gqa` only without a mask) and
attention saves those copies for backward, in every layer: heads/kv_heads times the prefix's keys and values.
Here the query heads that share a key/value head go through SDPA one group member at a time, against the
unrepeated keys and values and the same mask: the same attention per head, no copies, nothing new to save.
A boolean mask is made additive once per forward, not by SDPA in every layer (which saves each copy).

It is registered once in transformers' `AttentionInterface` (and `AttentionMaskInterface`, with SDPA's mask)
as "replay_sdpa", and `grouped_attention(config)` switches a model from "sdpa" to it for the duration of a
replay; other implementations (eager, flash, flex) are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["IMPLEMENTATION", "grouped_attention", "grouped_sdpa_forward"]

IMPLEMENTATION = "replay_sdpa"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; (batch, length, heads, dim) out, like `sdpa_attention_forward`."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    plain_mask = attention_mask is not None and attention_mask.dim() == 4 and attention_mask.size(1) == 1
    if groups == 1 or not plain_mask or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        # No mask: SDPA's own `enable_gqa` (or a causal kernel) already avoids the copies.
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, heads, length, _ = query.shape
    mask = _additive(attention_mask, query.dtype)
    # Head h = kv * groups + r reads key/value head kv (repeat_kv's order): member r of every group at once.
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, r::groups], key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
        )
        for r in range(groups)
    ]
    out = torch.stack(outs, dim=2).reshape(outs[0].size(0), heads, length, value.size(-1))
    return out.transpose(1, 2).contiguous(), None


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as SDPA's additive one, made once per mask and dtype and kept on the mask itself.

    SDPA converts a boolean mask itself on every call and saves the converted copy for backward: a
    (length, prefix) float per layer. One shared copy is saved once, whatever the number of layers and groups.
    """
    if mask.dtype != torch.bool:
        return mask
    made = mask.__dict__.setdefault("_replay_additive", {})
    if dtype not in made:
        made[dtype] = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return made[dtype]


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, grouped_sdpa_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)


@contextmanager
def grouped_attention(config: Any) -> Iterator[None]:
    """Switch `config` (the text config the attention layers read) from "sdpa" to the grouped form, then back."""
    if getattr(config, "_attn_implementation", None) != "sdpa":
        yield
        return
    _register()
    config._attn_implementation = IMPLEMENTATION
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
