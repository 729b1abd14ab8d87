"""Cache layers replay puts under the model: record the prompt's state once, replay branches against it.

Full-attention layers hold keys/values (`DynamicLayer`), linear-attention layers conv and recurrent states
(`LinearAttentionLayer`); any other layout is refused rather than replayed inexactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

from training.replay.errors import ReplayUnsupportedError
from training.replay.model import _Policy


class _Append(torch.autograd.Function):
    """The earlier keys followed by the new ones, as a view of one buffer: no copy (a later chunk, or a branch).

    Forward writes the new keys into their slot of the buffer (the earlier positions already hold the earlier
    chunks' or the prompt's); backward adds the gradient on the earlier positions straight into their
    accumulator (no leaf, no prefix-sized gradient) and passes the rest to the new keys.
    """

    @staticmethod
    def forward(ctx: Any, new: torch.Tensor, slot: _Slot) -> torch.Tensor:
        ctx.slot = slot
        slot.buffer[..., slot.start : slot.end, :].copy_(new)
        return slot.buffer[..., : slot.end, :]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        slot = ctx.slot
        if slot.grad is not None and slot.start:
            slot.grad[..., : slot.start, :] += grad[..., : slot.start, :]
        return grad[..., slot.start :, :], None


@dataclass
class _Slot:
    """One layer's keys (or values) buffer for the whole prompt, the chunk's slot in it, and its accumulator."""

    buffer: torch.Tensor
    start: int
    end: int
    grad: torch.Tensor | None = None


class _RecordingLayer(DynamicLayer):
    """Prompt pass: attention sees exactly the new keys/values (the cache starts empty) and the first ones are kept.

    A checkpointed layer calls `update` again when backward recomputes it; the stock layer would then grow the
    cache to twice the prompt, so this one never grows and records once.
    """

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class _RecordingLinearLayer(LinearAttentionLayer):
    """Prompt pass of a linear-attention layer: prefill behaviour on every call, first states recorded.

    The recorded conv state is the stock prefill's (the last `kernel` inputs, left-padded with zeros).
    """

    def __init__(self, number_of_states: int = 1, **kwargs: Any) -> None:
        super().__init__(number_of_states=number_of_states)
        self.recorded_conv: dict[int, torch.Tensor] = {}
        self.recorded_recurrent: dict[int, torch.Tensor] = {}

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None,
                          **kwargs: Any) -> torch.Tensor:  # fmt: skip
        kernel = conv_kernel_size or conv_states.shape[-1]
        if conv_states.shape[-1] < kernel:
            conv_states = nn.functional.pad(conv_states, (kernel - conv_states.shape[-1], 0))
        if state_idx not in self.recorded_conv:
            self.recorded_conv[state_idx] = conv_states[..., -kernel:]
            self.conv_kernel_size[state_idx] = kernel
        return conv_states

    def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs: Any):
        self.recorded_recurrent.setdefault(state_idx, recurrent_states)
        return recurrent_states


class _ReplayLinearLayer(LinearAttentionLayer):
    """A branch's linear-attention layer over (leaf) prompt states: new states are *assigned*, never copied in.

    The stock layer copies each new recurrent state into its buffer (a static address for CUDA graphs); the
    chunked delta rule has saved that buffer for backward, so autograd fails. `record_past` makes the conv
    state grow by concatenation, and single-token chunks take the same (cat) path.
    """

    def __init__(self, conv: list, recurrent: list, kernel: list) -> None:
        super().__init__(number_of_states=len(conv))
        self.record_past = True
        for i, (c, r, k) in enumerate(zip(conv, recurrent, kernel)):
            self.conv_states[i], self.recurrent_states[i], self.conv_kernel_size[i] = c, r, k
            self.is_conv_states_initialized[i] = c is not None
            self.is_recurrent_states_initialized[i] = r is not None
            self.has_previous_state[i] = c is not None or r is not None
            if c is not None or r is not None:
                ref = c if c is not None else r
                self.device, self.dtype = ref.device, ref.dtype

    def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs: Any):
        self.recurrent_states[state_idx] = recurrent_states
        self.is_recurrent_states_initialized[state_idx] = True
        return recurrent_states


class _BufferKVLayer(DynamicLayer):
    """A full-attention layer whose past keys/values are the part of a shared buffer before its slots' start.

    Shared by a branch's layer (appends after the prompt) and a chunk's (appends after the earlier chunks).
    """

    def __init__(self, keys: _Slot, values: _Slot) -> None:
        super().__init__()
        past_k, past_v = keys.buffer[..., : keys.start, :], values.buffer[..., : values.start, :]
        self.lazy_initialization(past_k, past_v)
        self.keys, self.values = past_k, past_v  # what the mask's past length is read from
        self.slots = (keys, values)


class _BranchKVLayer(_BufferKVLayer):
    """A branch's full-attention layer: the prompt's keys/values with the branch's appended in the same buffer.

    The stock layer concatenates (a prefix-sized copy per layer, held and saved for backward); here the branch's
    keys go into the room left after the prompt (`_Append`), and the gradient on the prompt's part is added
    to the state's accumulator, so the prompt state needs no leaf copy either. One row only (the buffer has one).
    """

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if key_states.size(0) != 1:
            raise ValueError(f"a branch appended into the prompt buffer has one row, got {key_states.size(0)}")
        out = []
        for slot, new in zip(self.slots, (key_states, value_states)):
            end = slot.start + new.size(-2)
            if end > slot.buffer.size(-2):
                raise ValueError(f"the branch ({new.size(-2)} tokens) overruns the room after the prompt buffer")
            out.append(_Append.apply(new, _Slot(slot.buffer, slot.start, end, slot.grad)))
        return out[0], out[1]


def _new_cache(policy: _Policy, recording: bool = False) -> Any:
    """An empty cache laid out from the config; refuses layer types replay does not reproduce."""
    from transformers import DynamicCache

    cache = DynamicCache(config=policy.text_config)
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer:
            cache.layers[i] = _RecordingLayer() if recording else layer
        elif type(layer) is LinearAttentionLayer:
            cache.layers[i] = _RecordingLinearLayer(layer.number_of_states) if recording else layer
        else:
            raise ReplayUnsupportedError(
                f"layer {i} caches as {type(layer).__name__}; replay supports full attention (DynamicLayer) and "
                "linear attention (LinearAttentionLayer) only (sliding-window and hybrid-in-one-layer caches are "
                "not replayed): set replay_shared_prompt=false"
            )
    return cache
