"""The prompt state S: what later tokens need from prompt[:-1], its inputs and positions, and step (a)/(c)'s pass.

A branch reads S through a fresh cache over (leaf) copies of it; the positions continue where the padded
full-sequence forward would put the completion (3-D rope positions for Qwen2.5-VL images).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from training.replay.batch import ReplayBatch
from training.replay.cache import _BranchKVLayer, _new_cache, _RecordingLinearLayer, _ReplayLinearLayer, _Slot
from training.replay.model import _checkpointed_layers, _Policy


@dataclass
class _PromptState:
    """What later tokens need from prompt[:-1]: per layer (keys, values) or (conv…, recurrent…) tensors."""

    kinds: list[str]
    tensors: list[list[torch.Tensor | None]]
    kernels: list[list[int | None]]
    length: int
    last_token: torch.Tensor
    next_position: torch.Tensor
    """Text: () start position; mrope: (3,) per-section start position of the branch's first token."""
    slots: list[list[_Slot] | None] | None = None
    """Per full-attention layer with room after the prompt: its (keys, values) buffers and gradient accumulators,
    which one-row branches append into (`_BranchKVLayer`) instead of concatenating; None: no room."""

    @classmethod
    def capture(cls, cache: Any, length: int, last_token: torch.Tensor, next_position: torch.Tensor) -> _PromptState:
        kinds, tensors, kernels = [], [], []
        for layer in cache.layers:
            if isinstance(layer, _RecordingLinearLayer):
                n = layer.number_of_states
                kinds.append("linear")
                tensors.append([layer.recorded_conv.get(i) for i in range(n)]
                               + [layer.recorded_recurrent.get(i) for i in range(n)])  # fmt: skip
                kernels.append([layer.conv_kernel_size[i] for i in range(n)])
            else:
                kinds.append("kv")
                tensors.append([layer.keys, layer.values])
                kernels.append([])
        return cls(kinds, tensors, kernels, length, last_token, next_position)

    def flat(self) -> list[torch.Tensor]:
        return [t for layer in self.tensors for t in layer if t is not None]

    def with_room(self, extra: int, grad: bool) -> _PromptState:
        """The keys/values moved into buffers with `extra` free positions after the prompt (and, with `grad`,
        zeroed accumulators for dL/dstate): one-row branches then append instead of concatenating."""
        tensors: list[list[torch.Tensor | None]] = []
        slots: list[list[_Slot] | None] = []
        for kind, states in zip(self.kinds, self.tensors):
            if kind != "kv" or states[0] is None or states[0].size(0) != 1:
                tensors.append(states)
                slots.append(None)
                continue
            views, pair = [], []
            for t in states:
                buffer = t.new_empty(*t.shape[:-2], self.length + extra, t.shape[-1])
                buffer[..., : self.length, :] = t
                views.append(buffer[..., : self.length, :])
                pair.append(_Slot(buffer, self.length, self.length, torch.zeros_like(t) if grad else None))
            tensors.append(views)
            slots.append(pair)
        return _PromptState(self.kinds, tensors, self.kernels, self.length, self.last_token, self.next_position, slots)

    def leaves(self) -> _PromptState:
        """Detached copies that require grad, where branches accumulate dL/dstate on them (not in a slot's)."""
        slots = self.slots or [None] * len(self.tensors)
        tensors = [
            layer if slot is not None else [None if t is None else t.detach().requires_grad_() for t in layer]
            for layer, slot in zip(self.tensors, slots)
        ]
        return _PromptState(
            self.kinds, tensors, self.kernels, self.length, self.last_token, self.next_position, self.slots
        )

    def grads(self) -> list[torch.Tensor | None]:
        """dL/dstate after the branches, in `flat()` order: the slots' accumulators, or the leaves' `.grad`."""
        slots = self.slots or [None] * len(self.tensors)
        out: list[torch.Tensor | None] = []
        for layer, slot in zip(self.tensors, slots):
            present = [t for t in layer if t is not None]
            out += [s.grad for s in slot] if slot is not None else [t.grad for t in present]
        return out

    def cache(self, policy: _Policy, batch: int) -> Any:
        """A fresh cache over these tensors, expanded to `batch` rows (a reused cache would grow in place); with
        room after the prompt, one row appended into its buffers."""
        cache = _new_cache(policy)
        for i, (kind, states) in enumerate(zip(self.kinds, self.tensors)):
            if self.slots is not None and self.slots[i] is not None:
                cache.layers[i] = _BranchKVLayer(*self.slots[i])  # one row: refuses more
                continue
            grown = [None if t is None else t.expand(batch, *t.shape[1:]) for t in states]
            if kind == "kv":
                layer = cache.layers[i]
                layer.lazy_initialization(grown[0], grown[1])
                layer.keys, layer.values = grown[0], grown[1]
            else:
                n = len(self.kernels[i])
                cache.layers[i] = _ReplayLinearLayer(grown[:n], grown[n:], self.kernels[i])
        return cache

    def positions(self, batch: int, length: int) -> torch.Tensor:
        steps = torch.arange(length, device=self.next_position.device)
        if self.next_position.dim() == 0:
            return (self.next_position + steps).expand(batch, length)
        return (self.next_position[:, None, None] + steps).expand(3, batch, length)


def _prompt_inputs(policy: _Policy, batch: ReplayBatch, row: int) -> dict[str, Any]:
    """The row's prompt without padding, and the positions the padded full-sequence forward gives it."""
    mask = batch.prompt_mask[row]
    valid = int(mask.sum())
    ids = batch.prompt_ids[row, -valid:].unsqueeze(0)
    images = batch.images_of([row])
    device = ids.device
    if policy.mrope and images:
        # Qwen2.5-VL: 3-D positions from the image grids; text after the last image continues at
        # index + rope_delta, which is how the full-sequence forward places the completion.
        if batch.mm_token_type_ids is not None:
            types = batch.mm_token_type_ids[row, : batch.prompt_ids.size(1)][-valid:].unsqueeze(0)
        else:
            types = torch.isin(ids, torch.tensor(policy.image_token_ids, device=device)).long()
        positions, delta = policy.backbone.get_rope_index(
            input_ids=ids, mm_token_type_ids=types, image_grid_thw=images["image_grid_thw"]
        )
        start = torch.full((3,), valid - 1, device=device, dtype=positions.dtype) + delta.reshape(-1)[0]
        # The last prompt token is text (checked in `_replayable`), so its position is start in every section.
        return {
            "ids": ids,
            "positions": positions[:, :, : valid - 1],
            "next_position": start,
            "pixel_values": images["pixel_values"],
            "image_grid_thw": images["image_grid_thw"],
            "types": types[0],  # where the image tokens are: chunk boundaries never split an image
        }
    # Text: the padded forward numbers positions from the first (pad) column, so the prompt starts at the
    # pad count. Rotary attention does not depend on this offset, learned absolute positions would.
    offset = batch.prompt_ids.size(1) - valid
    positions = torch.arange(offset, offset + valid, device=device)
    return {"ids": ids, "positions": positions[None, :-1], "next_position": positions[-1]}


def _prompt_state(policy: _Policy, prompt: dict[str, Any], checkpoint: bool = False) -> _PromptState:
    """Forward prompt[:-1] into a fresh recording cache (with or without autograd, as the caller set it)."""
    cache = _new_cache(policy, recording=True)
    kwargs = {k: prompt[k] for k in ("pixel_values", "image_grid_thw") if k in prompt}
    ids = prompt["ids"]
    with _checkpointed_layers(policy.backbone) if checkpoint else nullcontext():
        policy.backbone(input_ids=ids[:, :-1], position_ids=prompt["positions"], cache=cache, use_cache=True, **kwargs)
    return _PromptState.capture(cache, ids.size(1) - 1, ids[:, -1], prompt["next_position"])
