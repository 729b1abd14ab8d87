"""LoRA over row segments: a batch whose rows come in runs of one adapter each, with slices instead of indices.

PEFT's mixed adapter batches (`adapter_names=[…]`, `LoraLayer._mixed_batch_forward`, PEFT 0.21) gather each
adapter's rows by an index list and add its update back with an indexed in-place add. Any row order works,
but under autograd the backward of every LoRA layer then goes through index-put, which cost more than the
batching saved when policies shared a training forward (docs/multi-policy.md). The multi-policy trainer's
rows already come grouped by policy, so each adapter's rows are one slice: `x[a:b]` is a view, and the
updates of all slices are concatenated and added to the base output once. The arithmetic per row is
PEFT's vanilla LoRA (`lora_B(lora_A(dropout(x))) * scaling`), so the results are the same.

Segments of equal size whose adapters have one shape (the trainer's usual case: every policy samples
prompts_per_step × G rows) go further: the adapters' weights are stacked and all segments' updates come
from two batched matmuls (`bmm`), as multi-LoRA servers batch adapters (Punica's SGMV), rather than two
small matmuls per segment. Without autograd (sampling) the stack is taken once per block, so a decode step
over four policies' 64 rows costs about 1.3× a one-policy step over 16 rows (docs/multi-policy.md); under
autograd it is taken in every forward, inside the graph, so each adapter still gets its own gradient.

    with adapter_segments(model, [("policy0", 16), ("policy1", 16), ("__base__", 8)]):
        logits = model(input_ids=ids, attention_mask=mask).logits

Models with LoRA layers this does not cover (embeddings, convolutions, DoRA and other variants, merged
weights) keep PEFT's own path: `adapter_segments` then yields False and the caller passes `adapter_names`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import groupby
from typing import Any

import torch

__all__ = ["adapter_segments", "runs_of"]


def runs_of(names: Sequence[str]) -> list[tuple[str, int]]:
    """`["a", "a", "b"]` → `[("a", 2), ("b", 1)]`: consecutive rows of one adapter as one segment."""
    return [(name, len(list(group))) for name, group in groupby(names)]


def _covered(model: Any) -> list[Any] | None:
    """The model's LoRA layers when all are plain `lora.Linear` with vanilla, unmerged adapters; else None."""
    from peft.tuners.lora.layer import Linear, LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    # A forward already set on the instance (accelerate's offload hooks) is not ours to replace.
    if not layers or any(type(m) is not Linear or m.lora_variant or m.merged or "forward" in vars(m) for m in layers):
        return None
    return layers


def _stackable(layer: Any, segments: list[tuple[str, int]]) -> bool:
    """Whether the segments can go through one batched matmul: two or more, of equal rows, every adapter in
    this layer with the same rank, no dropout and no LoRA bias."""
    if len(segments) < 2 or len({rows for _, rows in segments}) != 1:
        return False
    if any(name not in layer.lora_A for name, _ in segments):
        return False
    shapes = {(layer.lora_A[name].weight.shape, layer.lora_B[name].weight.shape) for name, _ in segments}
    return len(shapes) == 1 and all(
        isinstance(layer.lora_dropout[name], torch.nn.Identity) and layer.lora_B[name].bias is None
        for name, _ in segments
    )


def _stacked_weights(layer: Any, names: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """`(A [S, in, r], B·scaling [S, r, out])`: the segments' adapters stacked for `bmm`."""
    weight_a = torch.stack([layer.lora_A[name].weight.t() for name in names])
    weight_b = torch.stack([layer.lora_B[name].weight.t() * layer.scaling[name] for name in names])
    return weight_a, weight_b


def _stacked_delta(weights: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Every segment's LoRA update in two batched matmuls over the stacked adapters, as multi-LoRA servers
    batch adapters (Punica's SGMV), instead of two small matmuls and a scaling per segment."""
    weight_a, weight_b = weights
    grouped = x.to(weight_a.dtype).reshape(weight_a.shape[0], -1, x.shape[-1])  # [S, rows·tokens, in]
    delta = torch.bmm(torch.bmm(grouped, weight_a), weight_b)
    return delta.reshape(*x.shape[:-1], delta.shape[-1])


def _segment_forward(
    layer: Any,
    segments: list[tuple[str, int]],
    stackable: bool,
    cached: Any,
    x: torch.Tensor,
    *args: Any,
    **kwargs: Any,
):
    """`stackable`: go through stacked `bmm`s; `cached`: the stack taken once for a block entered without
    autograd (never reused under autograd: it has no gradient path), else None."""
    if sum(rows for _, rows in segments) != x.shape[0]:
        raise ValueError(f"adapter segments cover {sum(r for _, r in segments)} rows, the batch has {x.shape[0]}")
    result = layer.base_layer(x, *args, **kwargs)
    if layer.disable_adapters or all(name not in layer.lora_A for name, _ in segments):
        return result
    if stackable:
        fresh = cached is None or torch.is_grad_enabled()
        weights = _stacked_weights(layer, [name for name, _ in segments]) if fresh else cached
        return result + _stacked_delta(weights, x).to(result.dtype)
    deltas, start = [], 0
    for name, rows in segments:
        part = x[start : start + rows]
        start += rows
        if name in layer.lora_A:
            lora_A, lora_B = layer.lora_A[name], layer.lora_B[name]
            delta = lora_B(lora_A(layer.lora_dropout[name](part.to(lora_A.weight.dtype)))) * layer.scaling[name]
            deltas.append(delta.to(result.dtype))
        else:  # the bare base (`__base__`) or an adapter this layer does not have
            deltas.append(result.new_zeros((rows, *result.shape[1:])))
    return result + (deltas[0] if len(deltas) == 1 else torch.cat(deltas))


@contextmanager
def adapter_segments(model: Any, segments: Sequence[tuple[str, int]]) -> Iterator[bool]:
    """Within the block, every LoRA layer runs row segment `i` through adapter `segments[i][0]` (`"__base__"`: none).

    Yields True when the segments are in force, False when the model has LoRA layers they do not cover
    (the caller then uses PEFT's `adapter_names`). The segments' row counts must add up to the batch.
    A block entered without autograd stacks the adapters' weights once: do not change them inside it.
    """
    layers = _covered(model)
    if layers is None:
        yield False
        return
    plan = list(segments)
    names = [name for name, _ in plan]
    for layer in layers:
        stackable = _stackable(layer, plan)
        # without autograd the weights cannot change within the block: stack them once
        cached = _stacked_weights(layer, names) if stackable and not torch.is_grad_enabled() else None
        layer.forward = functools.partial(_segment_forward, layer, plan, stackable, cached)
    try:
        yield True
    finally:
        for layer in layers:
            del layer.forward
