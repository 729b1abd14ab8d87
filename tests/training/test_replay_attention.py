"""Replay's grouped-query attention: the stock SDPA path's numbers without its repeated key/value heads."""

from __future__ import annotations

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from tests.support.replay import SavedBytes
from training.replay.attention import IMPLEMENTATION, grouped_attention, grouped_sdpa_forward


class _Attention(nn.Module):
    num_key_value_groups = 3
    is_causal = True


def _inputs(prefix: int = 40, length: int = 5, batch: int = 2) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, 6, length, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(batch, 2, prefix + length, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(batch, 2, prefix + length, 8, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 1, length, prefix + length, dtype=torch.bool).tril(prefix)  # a chunk after a prefix
    return q, k, v, mask


def test_grouped_attention_equals_sdpa_values_and_gradients():
    module = _Attention()
    q, k, v, mask = _inputs()
    for m in (mask, torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, float("-inf")), None):
        want, _ = sdpa_attention_forward(module, q, k, v, m, scaling=0.3)
        got, _ = grouped_sdpa_forward(module, q, k, v, m, scaling=0.3)
        assert got.shape == want.shape == (2, 5, 6, 8)
        assert torch.allclose(got, want, atol=1e-12)
        w = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        grads = [torch.autograd.grad((out * w).sum(), (q, k, v)) for out in (want, got)]
        assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(*grads))


def test_grouped_attention_saves_no_repeated_heads():
    """Measured: what attention saves for backward, stock (keys/values repeated 3×) against grouped."""
    module = _Attention()
    q, k, v, mask = _inputs(prefix=2000, length=4, batch=1)
    saved = {}
    for name, fn in (("stock", sdpa_attention_forward), ("grouped", grouped_sdpa_forward)):
        with SavedBytes(module) as meter:
            out, _ = fn(module, q, k, v, mask, scaling=0.3)
        saved[name] = meter.peak
        del out
    kv = 2 * k.untyped_storage().nbytes()
    assert saved["stock"] >= 3 * kv  # the repeated copies
    assert saved["grouped"] <= 1.2 * kv, (saved, kv)  # the keys/values themselves, plus small tensors


def test_the_switch_applies_to_sdpa_only_and_is_undone():
    from transformers import Qwen2Config

    config = Qwen2Config(num_attention_heads=4, num_key_value_heads=2)
    config._attn_implementation = "sdpa"
    with grouped_attention(config):
        assert config._attn_implementation == IMPLEMENTATION
    assert config._attn_implementation == "sdpa"
    config._attn_implementation = "eager"
    with grouped_attention(config):
        assert config._attn_implementation == "eager"
