"""Chunked prompt backward for exact replay: the prompt's activations held one chunk at a time, gradient unchanged.

Replay's step (c) re-runs the whole prompt with autograd, so its peak still grows with the prompt's activations.
Here the prompt runs in chunks of `prompt_chunk` tokens:

    (a) chunk 0, 1, …, K-1 without autograd, each against the state of the chunks before it; each chunk's own
        state is kept (its keys/values, or a linear-attention layer's conv/recurrent state at its end)
    (b) the branches, as in `training.replay`, against leaf copies of the whole state -> dL/dstate
    (c) chunk K-1 down to 0: re-run chunk k with autograd against *leaf* copies of the earlier chunks' state,
        backward(chunk k's own state, its accumulated gradient), then add the gradient on those leaves to
        the earlier chunks' accumulators

Each chunk's gradient is complete when its turn comes (branches and every later chunk have added theirs), so
the sum is the exact gradient. Peak memory is one chunk's activations plus the state and its gradient
accumulators (the keys/values once, and for a linear-attention layer one conv + recurrent state per chunk
boundary), whatever the prompt length. `offload=True` keeps the saved state in (pinned) CPU memory between
uses, so on a GPU the state is not what bounds the prompt either.

Images (Qwen2.5-VL): a chunk boundary never splits an image's tokens (it moves to the image's end), each chunk
gets the pixels of the images that start in it, and the 3-D rope positions of the whole prompt are sliced per
chunk, so they continue across chunks exactly as in the single forward.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from training.replay.cache import _Append, _BufferKVLayer, _new_cache, _RecordingLinearLayer, _ReplayLinearLayer, _Slot
from training.replay.errors import ReplayUnsupportedError
from training.replay.model import _checkpointed_layers, _Policy, _RngReplay
from training.replay.state import _PromptState

__all__ = ["chunk_bounds", "chunked_prompt_backward", "chunked_prompt_state"]


class _ChunkKVLayer(_BufferKVLayer):
    """A full-attention layer over the earlier chunks' keys/values in the prompt buffer; records the chunk's own.

    It never grows, so a checkpointed layer's recomputation sees the same past again.
    """

    def __init__(self, keys: _Slot, values: _Slot) -> None:
        super().__init__(keys, values)
        self.new: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if self.new is None:
            self.new = (key_states, value_states)
        return _Append.apply(key_states, self.slots[0]), _Append.apply(value_states, self.slots[1])


class _ChunkLinearLayer(_ReplayLinearLayer):
    """A linear-attention layer continuing from the previous chunk's end state; records this chunk's end state.

    Nothing is written back into the layer, so a checkpointed recomputation starts from the same state.
    """

    def __init__(self, conv: list, recurrent: list, kernel: list) -> None:
        super().__init__(conv, recurrent, kernel)
        self.recorded_conv: dict[int, torch.Tensor] = {}
        self.recorded_recurrent: dict[int, torch.Tensor] = {}

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None,
                          **kwargs: Any) -> torch.Tensor:  # fmt: skip
        past = self.conv_states[state_idx]
        full = conv_states if past is None else torch.cat([past, conv_states], dim=-1)
        kernel = self.conv_kernel_size[state_idx] or conv_kernel_size or full.shape[-1]
        if full.shape[-1] < kernel:
            full = torch.nn.functional.pad(full, (kernel - full.shape[-1], 0))
        self.recorded_conv.setdefault(state_idx, full[..., -kernel:])
        return full

    def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs: Any):
        self.recorded_recurrent.setdefault(state_idx, recurrent_states)
        return recurrent_states


def chunk_bounds(length: int, size: int, image_tokens: torch.Tensor | None = None) -> list[tuple[int, int]]:
    """[start, end) of each chunk of `size` tokens; a boundary inside an image's tokens moves to the image's end.

    >>> chunk_bounds(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    >>> chunk_bounds(10, 4, torch.tensor([0, 0, 1, 1, 1, 1, 1, 0, 0, 0]).bool())
    [(0, 7), (7, 10)]
    """
    if size < 1:
        raise ValueError(f"prompt_chunk must be >= 1 to chunk, got {size}")
    bounds, start = [], 0
    flags = image_tokens.tolist() if image_tokens is not None else None
    while start < length:
        end = min(start + size, length)
        while flags is not None and end < length and flags[end - 1] and flags[end]:
            end += 1
        bounds.append((start, end))
        start = end
    return bounds


@dataclass
class _Chunk:
    start: int
    end: int
    inputs: dict[str, Any]
    rng: _RngReplay | None = None


def _plan(policy: _Policy, prompt: dict[str, Any], size: int) -> list[_Chunk]:
    """prompt[:-1] cut into chunks, each with its ids, positions and the images whose tokens it holds."""
    ids = prompt["ids"][:, :-1]
    length = ids.size(1)
    flags = prompt["types"][:length].bool() if "types" in prompt else None
    bounds = chunk_bounds(length, size, flags)
    runs: list[tuple[int, int]] = []
    if flags is not None and "image_grid_thw" in prompt:
        f = flags.tolist()
        runs = [(i, 0) for i in range(length) if f[i] and (i == 0 or not f[i - 1])]
        grids = prompt["image_grid_thw"]
        if len(runs) != grids.size(0):
            raise ReplayUnsupportedError(
                f"the prompt has {len(runs)} runs of image tokens but {grids.size(0)} images, so its chunks cannot "
                "be given their own images: set replay_prompt_chunk=0"
            )
        patches = grids.prod(-1).tolist()
        offsets = [sum(patches[:i]) for i in range(len(patches) + 1)]
    chunks = []
    for start, end in bounds:
        inputs: dict[str, Any] = {"ids": ids[:, start:end], "positions": prompt["positions"][..., start:end]}
        mine = [i for i, (s, _) in enumerate(runs) if start <= s < end]
        if mine:
            inputs["image_grid_thw"] = prompt["image_grid_thw"][mine[0] : mine[-1] + 1]
            inputs["pixel_values"] = prompt["pixel_values"][offsets[mine[0]] : offsets[mine[-1] + 1]]
        chunks.append(_Chunk(start, end, inputs))
    return chunks


def _run_chunk(policy: _Policy, chunk: _Chunk, past: list[list[torch.Tensor | None]] | None, kinds: list[str] | None,
               kernels: list[list[int | None]] | None) -> tuple[list[str], list[list[int | None]], list[list]]:  # fmt: skip
    """Forward one chunk against `past` (None: the first chunk); returns each layer's kind, kernels, own state."""
    cache = _new_cache(policy, recording=True)
    if past is not None:
        assert kinds is not None and kernels is not None
        for i, (kind, states) in enumerate(zip(kinds, past)):
            if kind == "kv":
                cache.layers[i] = _ChunkKVLayer(states[0], states[1])  # two _Slot
            else:
                n = len(kernels[i])
                cache.layers[i] = _ChunkLinearLayer(states[:n], states[n:], kernels[i])
    inputs = chunk.inputs
    kwargs = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
    policy.backbone(input_ids=inputs["ids"], position_ids=inputs["positions"], cache=cache, use_cache=True, **kwargs)
    own_kinds, own_kernels, own = [], [], []
    for layer in cache.layers:
        if isinstance(layer, (_RecordingLinearLayer, _ChunkLinearLayer)):
            n = layer.number_of_states
            own_kinds.append("linear")
            own.append(
                [layer.recorded_conv.get(i) for i in range(n)] + [layer.recorded_recurrent.get(i) for i in range(n)]
            )
            own_kernels.append([layer.conv_kernel_size[i] for i in range(n)])
        elif isinstance(layer, _ChunkKVLayer):
            assert layer.new is not None, "a full-attention layer saw no keys"
            own_kinds.append("kv")
            own.append(list(layer.new))
            own_kernels.append([])
        else:
            own_kinds.append("kv")
            own.append([layer.keys, layer.values])
            own_kernels.append([])
    return own_kinds, own_kernels, own


def _to(t: torch.Tensor | None, device: torch.device | None, pin: bool) -> torch.Tensor | None:
    if t is None or device is None:
        return t
    if device.type == "cpu":
        out = torch.empty(t.shape, dtype=t.dtype, pin_memory=pin)
        return out.copy_(t, non_blocking=pin)
    return t.to(device, non_blocking=True)


@dataclass
class ChunkedState:
    """The whole prompt's state, built chunk by chunk: full keys/values per layer, linear states per boundary."""

    chunks: list[_Chunk]
    kinds: list[str]
    kernels: list[list[int | None]]
    length: int = 0
    """Tokens in prompt[:-1]."""
    kv: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    """Layer -> [keys, values] buffers, (1, heads, length + room, dim): the whole prompt[:-1], then room for a
    one-row branch to append into."""
    boundaries: list[dict[int, list[torch.Tensor | None]]] = field(default_factory=list)
    """Per chunk: layer -> its linear-attention state at the chunk's end (conv…, recurrent…)."""
    offload: torch.device | None = None
    """Where the per-boundary linear states wait between uses (CPU), or None to keep them on the device."""

    def past(self, k: int, device: torch.device, leaves: bool, kv_grad: dict | None = None) -> list[list] | None:
        """The state chunk k continues from (None for chunk 0): per full-attention layer two `_Slot`s (keys,
        values; `kv_grad` their accumulators), per linear-attention layer the states at chunk k-1's end
        (`leaves`: detached copies that require grad)."""
        if k == 0:
            return None
        chunk = self.chunks[k]
        out: list[list] = []
        for i, kind in enumerate(self.kinds):
            if kind == "kv":
                grads = kv_grad[i] if kv_grad is not None else [None, None]
                out.append([_Slot(t, chunk.start, chunk.end, g) for t, g in zip(self.kv[i], grads)])
                continue
            else:
                states = [None if t is None else t.to(device, non_blocking=True) for t in self.boundaries[k - 1][i]]
            if leaves:
                states = [None if t is None else t.detach().requires_grad_() for t in states]
            out.append(states)
        return out

    def prompt_state(self, prompt: dict[str, Any], device: torch.device, grad: bool = False) -> _PromptState:
        """What the branches read: all keys/values, the linear states at the last chunk's end. With room after
        the prompt in the buffers, the branches append there (with `grad`, into zeroed accumulators)."""
        last, n = len(self.chunks) - 1, self.length
        tensors = [
            [t[..., :n, :] for t in self.kv[i]]
            if kind == "kv"
            else [None if t is None else t.to(device) for t in self.boundaries[last][i]]
            for i, kind in enumerate(self.kinds)
        ]
        room = any(t.size(-2) > n for pair in self.kv.values() for t in pair)
        slots = [
            [_Slot(t, n, n, torch.zeros_like(t[..., :n, :]) if grad else None) for t in self.kv[i]]
            if kind == "kv" and room
            else None
            for i, kind in enumerate(self.kinds)
        ]
        return _PromptState(self.kinds, tensors, self.kernels, n, prompt["ids"][:, -1], prompt["next_position"],
                            slots if room else None)  # fmt: skip


def chunked_prompt_state(policy: _Policy, prompt: dict[str, Any], size: int, *, offload: bool = False,
                         room: int = 0) -> ChunkedState:  # fmt: skip
    """Step (a): prompt[:-1] forward in chunks (call it under `torch.no_grad()`), keeping each chunk's state;
    `room` free positions after the prompt in the key/value buffers for one-row branches to append into."""
    chunks = _plan(policy, prompt, size)
    device = prompt["ids"].device
    state: ChunkedState | None = None
    length = prompt["ids"].size(1) - 1
    for k, chunk in enumerate(chunks):
        chunk.rng = _RngReplay(device)
        past = None if state is None else state.past(k, device, leaves=False)
        kinds, kernels, own = _run_chunk(policy, chunk, past, state and state.kinds, state and state.kernels)
        if state is None:
            where = torch.device("cpu") if offload and device.type != "cpu" else None
            state = ChunkedState(chunks, kinds, kernels, length, offload=where)
            for i, kind in enumerate(kinds):
                if kind == "kv":  # the whole prompt's keys/values, filled chunk by chunk (no re-concatenation)
                    state.kv[i] = [t.new_empty(*t.shape[:-2], length + room, t.shape[-1]) for t in own[i]]
        boundary: dict[int, list[torch.Tensor | None]] = {}
        for i, kind in enumerate(kinds):
            if kind == "kv":
                if k == 0:  # later chunks write their keys/values into the buffer themselves (`_Append`)
                    for full, part in zip(state.kv[i], own[i]):
                        full[..., chunk.start : chunk.end, :] = part
            else:
                pin = device.type == "cuda"
                boundary[i] = [_to(t, state.offload, pin) if k < len(chunks) - 1 else t for t in own[i]]
        state.boundaries.append(boundary)
    assert state is not None, "a prompt of one token has nothing to chunk"
    return state


def chunked_prompt_backward(policy: _Policy, state: ChunkedState, grads: list[torch.Tensor | None],
                            checkpoint: bool = False) -> None:  # fmt: skip
    """Step (c): walk the chunks last to first; `grads` are dL/d(prompt state) in `_PromptState.flat()` order."""
    device = next(iter(state.kv.values()))[0].device if state.kv else grads[0].device if grads[0] is not None else None
    # Accumulators: one per key/value tensor (whole prompt), one per linear state (the current boundary).
    kv_grad: dict[int, list[torch.Tensor]] = {}
    linear_grad: dict[int, list[torch.Tensor | None]] = {}
    flat = iter(grads)
    last = state.boundaries[-1]
    for i, kind in enumerate(state.kinds):
        if kind == "kv":
            kv_grad[i] = [
                g if g is not None else torch.zeros_like(t[..., : state.length, :])
                for g, t in zip((next(flat), next(flat)), state.kv[i])
            ]
        else:
            linear_grad[i] = [None if t is None else next(flat) for t in last[i]]
    for k in range(len(state.chunks) - 1, -1, -1):
        chunk = state.chunks[k]
        assert chunk.rng is not None
        past = state.past(k, device, leaves=True, kv_grad=kv_grad)
        with (
            torch.enable_grad(),
            chunk.rng.replay(),
            _checkpointed_layers(policy.backbone) if checkpoint else nullcontext(),
        ):
            _, _, own = _run_chunk(policy, chunk, past, state.kinds, state.kernels)
        outputs, seeds = [], []
        for i, kind in enumerate(state.kinds):
            if kind == "kv":
                pairs = zip(own[i], [g[..., chunk.start : chunk.end, :] for g in kv_grad[i]])
            else:
                pairs = zip(own[i], linear_grad[i])
            for t, g in pairs:
                if t is not None and g is not None and t.requires_grad:
                    outputs.append(t)
                    seeds.append(g.to(t.device))
        if outputs:
            torch.autograd.backward(outputs, seeds)
        del outputs, seeds, own
        if past is None:
            break
        for i, kind in enumerate(state.kinds):
            if kind != "kv":  # full-attention layers' earlier chunks were credited by `_Append.backward`
                linear_grad[i] = [None if leaf is None else leaf.grad for leaf in past[i]]
        del past
