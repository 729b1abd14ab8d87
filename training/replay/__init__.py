"""Exact shared-prompt replay: the GRPO loss of G completions of one prompt at the memory of one prompt.

In GRPO the G completions of a prompt share it, and the batched loss holds G copies of the prompt's
activations. Replay runs the prompt once, keeps the state later tokens need (each layer's keys and values,
or a linear-attention layer's conv and recurrent state), and replays each completion alone against it:

    (a) prompt[:-1] forward without autograd            -> the prompt state S
    (b) for each completion (or `branch_batch` of them): a fresh cache from *leaf* copies of S, forward
        [prompt[-1], completion[:-1]], loss, backward    -> parameter gradients, plus dL/dS on the leaves
    (c) prompt[:-1] forward with autograd, backward(S, dL/dS)  -> the prompt's share of the gradient

The sum is the full-sequence gradient (not LongStraw's detached-prompt approximation), and peak memory is
the prompt's activations once plus one branch. Log-probabilities without gradient (TRL's old-policy and
reference log-probs) take (a) and (b) only.

    from training.replay import GRPOLoss, ReplayBatch, replay_backward
    batch = ReplayBatch.from_trl_inputs(inputs)          # TRL's GRPO micro-batch: prompts left-padded
    loss = GRPOLoss(loss_type="dapo", beta=0.04)         # TRL's loss as per-token terms × per-row weights
    weights = loss.row_weights(batch.completion_mask, num_items_in_batch=inputs["num_items_in_batch"])
    loss_fn = loss.loss_fn(weights, batch.completion_mask, inputs["advantages"], old_logps, ref_logps)
    result = replay_backward(model, batch, loss_fn)      # gradients accumulate in the parameters' .grad

Rows are grouped by content (identical prompt ids, mask and images), not by position: TRL shuffles a
generation batch before splitting it into micro-batches. A prompt with a single completion gains nothing,
and rows replay cannot reproduce exactly go through the plain full-sequence forward instead: a completion
mask with holes, a prompt of one token, a prompt ending in an image token, images inside a completion,
images for a VLM other than Qwen2.5-VL, or multimodal inputs other than `pixel_values` + `image_grid_thw`.

Models: decoder LMs whose cache layers are plain full-attention `DynamicLayer`s or linear-attention
`LinearAttentionLayer`s (Qwen2/2.5/3, Llama-style, Qwen3-Next, Qwen3.5), and Qwen2.5-VL with images. Before a model's first replay a probe compares replayed hidden states with a plain
forward on a short random sequence, and anything that disagrees (e.g. a transformers version whose
linear-attention layers restart from zero on a multi-token chunk) raises `ReplayUnsupportedError` instead
of returning wrong gradients. Sliding-window and other cache layouts are refused (so are DeepSpeed and FSDP,
by `training.replay_trainer`). With gradient checkpointing on, the prompt's recomputation (c) checkpoints
each layer (cache writes kept), so it holds layer inputs instead of all activations.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

__all__ = [
    "GRPOLoss",
    "LOSS_TYPES",
    "ReplayBatch",
    "ReplayResult",
    "ReplayUnsupportedError",
    "check_replay_exact",
    "find_groups",
    "plain_backward",
    "replay_backward",
    "replay_token_logps",
]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
"""TRL loss types the replay loss reproduces (each is a per-token loss times a per-row weight)."""

LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
"""`loss_fn(rows, logps, entropy)`: rows (b,) index the batch, logps/entropy are (b, R) with autograd; returns
the rows' share of the loss as a scalar. The full loss must be the sum over disjoint row sets."""

# The forward probe's tolerance on hidden states (relative L2): rounding differences between a replayed
# chunk and a full forward are ~1e-6 in fp32 and ~1e-2 in bf16; a state that is ignored or mis-positioned
# moves them by O(1).
_PROBE_RTOL = {torch.float64: 1e-4, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


_IMAGE_MODELS = ("qwen2_5_vl",)
"""VLMs whose image prompts are replayed (3-D rope positions from `get_rope_index`; tested). Image rows of
other VLMs take the plain path; their text-only rows are replayed."""


class ReplayUnsupportedError(ValueError):
    """Replay cannot reproduce this model's full-sequence forward exactly; the message says why and what to do."""


# -- the batch ---------------------------------------------------------------------------------------------


@dataclass
class ReplayBatch:
    """A GRPO micro-batch in TRL's layout: left-padded prompts, right-padded completions.

    Shapes: prompt_ids/prompt_mask (B, P); completion_ids/completion_mask (B, R); pixel_values (patches, D)
    for all rows' images in row order; image_grid_thw (images, 3); num_images[i] images in row i;
    mm_token_type_ids (B, P + R) with 1 on image tokens (Qwen-VL).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    num_images: list[int] | None = None
    mm_token_type_ids: torch.Tensor | None = None
    unsupported: tuple[str, ...] = ()
    """Multimodal inputs replay does not handle (e.g. `token_type_ids`): every row takes the plain path."""

    _EXTRA_KEYS = ("pixel_attention_mask", "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids",
                   "image_position_ids", "pixel_values_videos", "video_grid_thw")  # fmt: skip

    @classmethod
    def from_trl_inputs(cls, inputs: dict[str, Any]) -> ReplayBatch:
        """From the dict `GRPOTrainer._prepare_inputs` returns."""
        return cls(
            prompt_ids=inputs["prompt_ids"],
            prompt_mask=inputs["prompt_mask"],
            completion_ids=inputs["completion_ids"],
            completion_mask=inputs["completion_mask"],
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            unsupported=tuple(k for k in cls._EXTRA_KEYS if inputs.get(k) is not None),
        )

    @classmethod
    def from_sequences(
        cls, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_length: int, **multimodal: Any
    ) -> ReplayBatch:
        """From prompt+completion rows as `GRPOTrainer._get_per_token_logps_and_entropies` receives them."""
        split = input_ids.size(1) - completion_length
        return cls(
            prompt_ids=input_ids[:, :split],
            prompt_mask=attention_mask[:, :split],
            completion_ids=input_ids[:, split:],
            completion_mask=attention_mask[:, split:],
            pixel_values=multimodal.pop("pixel_values", None),
            image_grid_thw=multimodal.pop("image_grid_thw", None),
            num_images=multimodal.pop("num_images", None),
            mm_token_type_ids=multimodal.pop("mm_token_type_ids", None),
            unsupported=tuple(k for k, v in multimodal.items() if v is not None),
        )

    @property
    def size(self) -> int:
        return self.prompt_ids.size(0)

    def _image_ranges(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Per row: its images' index range in image_grid_thw and its patches' row range in pixel_values."""
        b = self.size
        if self.pixel_values is None or self.image_grid_thw is None:
            return [(0, 0)] * b, [(0, 0)] * b
        counts = self.num_images if self.num_images is not None else [1] * b
        patches = self.image_grid_thw.prod(-1).tolist()
        images, rows, i, p = [], [], 0, 0
        for n in counts:
            images.append((i, i + n))
            rows.append((p, p + sum(patches[i : i + n])))
            i, p = i + n, p + sum(patches[i : i + n])
        return images, rows

    def images_of(self, rows: Sequence[int]) -> dict[str, Any]:
        """`pixel_values`, `image_grid_thw` (and `num_images`) of `rows`, concatenated in their order."""
        if self.pixel_values is None or self.image_grid_thw is None:
            return {}
        image_ranges, patch_ranges = self._image_ranges()
        grids = [self.image_grid_thw[slice(*image_ranges[r])] for r in rows]
        pixels = [self.pixel_values[slice(*patch_ranges[r])] for r in rows]
        if not sum(g.size(0) for g in grids):
            return {}
        return {
            "pixel_values": torch.cat(pixels),
            "image_grid_thw": torch.cat(grids),
            "num_images": [g.size(0) for g in grids],
        }


def _same_prompt(batch: ReplayBatch, a: int, b: int, patch_ranges: list, image_ranges: list) -> bool:
    if not (
        torch.equal(batch.prompt_ids[a], batch.prompt_ids[b])
        and torch.equal(batch.prompt_mask[a], batch.prompt_mask[b])
    ):
        return False
    if batch.pixel_values is None or batch.image_grid_thw is None:
        return True
    ia, ib, pa, pb = image_ranges[a], image_ranges[b], patch_ranges[a], patch_ranges[b]
    return torch.equal(batch.image_grid_thw[slice(*ia)], batch.image_grid_thw[slice(*ib)]) and torch.equal(
        batch.pixel_values[slice(*pa)], batch.pixel_values[slice(*pb)]
    )


def _replayable(batch: ReplayBatch, row: int, image_token_ids: tuple[int, ...], images: bool,
                image_ranges: list) -> bool:  # fmt: skip
    """Can this row be replayed exactly? (See the module docstring for the plain-path cases.)"""
    mask = batch.prompt_mask[row]
    valid = int(mask.sum())
    if valid < 2 or not bool(mask[-valid:].all()):  # one token, or padding that is not on the left
        return False
    done = batch.completion_mask[row]
    if bool((done[1:] > done[:-1]).any()):  # a hole: the completion mask is not ones-then-zeros
        return False
    has_images = image_ranges[row][1] > image_ranges[row][0]
    if batch.mm_token_type_ids is not None:
        types = batch.mm_token_type_ids[row]
        has_images = has_images or bool(types[: batch.prompt_ids.size(1)].any())
        if bool(types[-batch.completion_ids.size(1) :].any()) or int(types[batch.prompt_ids.size(1) - 1]):
            return False  # an image inside the completion, or the prompt ends in an image token
    elif image_token_ids:
        if int(batch.prompt_ids[row, -1]) in image_token_ids:
            return False
        has_images = has_images or bool(
            torch.isin(batch.prompt_ids[row], torch.tensor(image_token_ids, device=batch.prompt_ids.device)).any()
        )
    return images or not has_images


def find_groups(
    batch: ReplayBatch, image_token_ids: tuple[int, ...] = (), min_group: int = 2, images: bool = True
) -> tuple[list[list[int]], list[int]]:
    """Rows that share a prompt (ids, mask and images), and the rows left to the plain forward.

    Groups smaller than `min_group` go to the plain rows: one completion gains nothing from replay.
    `images=False` (a model whose image positions replay does not compute) sends rows with images there too.

    >>> import torch
    >>> p = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6]])
    >>> b = ReplayBatch(p, (p > 0).long(), torch.ones(4, 2, dtype=torch.long), torch.ones(4, 2, dtype=torch.long))
    >>> find_groups(b)
    ([[0, 2, 3]], [1])
    """
    if batch.unsupported:
        return [], list(range(batch.size))
    image_ranges, patch_ranges = batch._image_ranges()
    groups: list[list[int]] = []
    plain: list[int] = []
    for row in range(batch.size):
        if not _replayable(batch, row, image_token_ids, images, image_ranges):
            plain.append(row)
            continue
        for group in groups:
            if _same_prompt(batch, group[0], row, patch_ranges, image_ranges):
                group.append(row)
                break
        else:
            groups.append([row])
    keep = [g for g in groups if len(g) >= min_group]
    plain += [r for g in groups if len(g) < min_group for r in g]
    return keep, sorted(plain)


# -- the model ---------------------------------------------------------------------------------------------


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


# -- the prompt state --------------------------------------------------------------------------------------


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

    def leaves(self) -> _PromptState:
        """Detached copies that require grad: branches accumulate dL/dstate on them."""
        tensors = [[None if t is None else t.detach().requires_grad_() for t in layer] for layer in self.tensors]
        return _PromptState(self.kinds, tensors, self.kernels, self.length, self.last_token, self.next_position)

    def cache(self, policy: _Policy, batch: int) -> Any:
        """A fresh cache over these tensors, expanded to `batch` rows (a reused cache would grow in place)."""
        cache = _new_cache(policy)
        for i, (kind, states) in enumerate(zip(self.kinds, self.tensors)):
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


# -- log-probabilities -------------------------------------------------------------------------------------


def _token_logps(
    policy: _Policy,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor,
    temperature: float,
    entropy: bool,
    head_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of `targets` under `hidden` (b, L, H), 0 where not `valid`: TRL's own kernel."""
    from trl.kernels import ChunkedLogProbFunction

    weight, bias = policy.head.weight, getattr(policy.head, "bias", None)
    rows = hidden[valid]
    context: Any = torch.autocast(hidden.device.type, enabled=False) if head_fp32 else nullcontext()
    if head_fp32:
        rows = rows.float()
    with context:
        logps, ent, *_ = ChunkedLogProbFunction.apply(
            rows,
            weight,
            bias,
            targets[valid],
            temperature,
            32768,  # TRL's vocabulary chunk
            policy.softcap,
            policy.logit_scale,
            ("log_probs", "entropy") if entropy else ("log_probs",),
        )
    logps = logps.new_zeros(valid.shape).masked_scatter(valid, logps)
    ent = ent.new_zeros(valid.shape).masked_scatter(valid, ent) if entropy else None
    return logps, ent


def _branch_logps(
    policy: _Policy,
    state: _PromptState,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
    entropy: bool,
    head_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(b, R) log-probs of completions replayed against `state`; trailing padding is not computed."""
    b, width = completion_ids.shape
    length = max(int(completion_mask.sum(-1).max()), 1)
    tokens = torch.cat([state.last_token.expand(b, 1), completion_ids[:, : length - 1]], dim=1)
    out = policy.backbone(
        input_ids=tokens, position_ids=state.positions(b, length), cache=state.cache(policy, b), use_cache=True
    )
    valid = completion_mask[:, :length].bool()
    logps, ent = _token_logps(
        policy, out.last_hidden_state, completion_ids[:, :length], valid, temperature, entropy, head_fp32
    )
    pad = (0, width - length)
    return nn.functional.pad(logps, pad), None if ent is None else nn.functional.pad(ent, pad)


def _plain_logps(
    policy: _Policy,
    batch: ReplayBatch,
    rows: Sequence[int],
    temperature: float,
    entropy: bool,
    head_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The full-sequence forward of `rows`, as TRL's batched loss runs it."""
    index = torch.tensor(list(rows), device=batch.prompt_ids.device)
    ids = torch.cat([batch.prompt_ids[index], batch.completion_ids[index]], dim=1)
    mask = torch.cat([batch.prompt_mask[index], batch.completion_mask[index]], dim=1)
    kwargs = {k: v for k, v in batch.images_of(rows).items() if k != "num_images"}
    if batch.mm_token_type_ids is not None:
        kwargs["mm_token_type_ids"] = batch.mm_token_type_ids[index]
    out = policy.backbone(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs)
    width = batch.completion_ids.size(1)
    hidden = out.last_hidden_state[:, -width - 1 : -1]
    valid = batch.completion_mask[index].bool()
    return _token_logps(policy, hidden, batch.completion_ids[index], valid, temperature, entropy, head_fp32)


# -- the probe ---------------------------------------------------------------------------------------------

_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_replay_exact(
    model: nn.Module, *, prompt_length: int = 24, completion_length: int = 9, prompt_chunk: int = 0
) -> float:
    """Replay a short random sequence and compare hidden states with a plain forward; raise if they differ.

    Returns the relative L2 error of the replayed hidden states. Catches what a cache API change would make
    silent: a linear-attention layer that restarts from zero on a multi-token chunk, positions restarting
    at 0, a state the continuation does not read. With `prompt_chunk` the prompt state is built chunk by chunk
    (the chunked backward's step (a)), so a chunk that does not continue from the one before is caught too.
    """
    policy = _resolve(model)
    _new_cache(policy)  # refuses unsupported layer types before anything runs
    device = policy.head.weight.device
    generator = torch.Generator().manual_seed(0)
    top = max(min(int(policy.text_config.vocab_size) // 2, 30000), 2)  # low ids: plain text, no image tokens
    ids = torch.randint(0, top, (2, prompt_length + completion_length), generator=generator).to(device)
    ids[1, :prompt_length] = ids[0, :prompt_length]
    batch = ReplayBatch(
        ids[:, :prompt_length],
        torch.ones_like(ids[:, :prompt_length]),
        ids[:, prompt_length:],
        torch.ones_like(ids[:, prompt_length:]),
    )
    with torch.no_grad(), _eval_mode(policy.model), _no_checkpointing(policy.model):
        full = policy.backbone(input_ids=ids, use_cache=False).last_hidden_state[:, prompt_length - 1 : -1]
        prompt = _prompt_inputs(policy, batch, 0)
        if prompt_chunk:
            from training.replay.chunked import chunked_prompt_state

            state = chunked_prompt_state(policy, prompt, prompt_chunk).prompt_state(prompt, device)
        else:
            state = _prompt_state(policy, prompt)
        replayed = policy.backbone(
            input_ids=torch.cat([state.last_token.expand(2, 1), batch.completion_ids[:, :-1]], dim=1),
            position_ids=state.positions(2, completion_length),
            cache=state.cache(policy, 2),
            use_cache=True,
        ).last_hidden_state
    error = float((replayed.float() - full.float()).norm() / full.float().norm().clamp_min(1e-12))
    tolerance = _PROBE_RTOL.get(full.dtype, 5e-2)
    if not math.isfinite(error) or error > tolerance:
        raise ReplayUnsupportedError(
            f"{type(policy.model).__name__}: a prompt replayed from its cache gives hidden states {error:.2e} away "
            f"(relative L2, tolerance {tolerance:.0e}) from the full forward, so this transformers version does not "
            "continue a multi-token chunk from a cached state for this model; replay would return wrong "
            "gradients. Set replay_shared_prompt=false (or upgrade transformers)."
        )
    return error


def _ensure_checked(policy: _Policy, prompt_chunk: int = 0) -> None:
    """The probe once per model (and once more for the chunked state, with chunks that do not divide it)."""
    done = _CHECKED.setdefault(policy.model, {})
    key = 7 if prompt_chunk else 0
    if key not in done:
        done[key] = check_replay_exact(policy.model, prompt_chunk=key)


# -- the engine --------------------------------------------------------------------------------------------


@dataclass
class ReplayResult:
    """Detached per-token log-probs/entropies of every row, the loss value, and how rows were processed."""

    logps: torch.Tensor
    entropy: torch.Tensor | None
    loss: torch.Tensor
    groups: list[list[int]] = field(default_factory=list)
    plain_rows: list[int] = field(default_factory=list)


def _chunks(rows: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(rows), max(size, 1)):
        yield list(rows[start : start + max(size, 1)])


def _backward_rows(
    logps: torch.Tensor, ent: torch.Tensor | None, rows: list[int], loss_fn: LossFn, result: ReplayResult
) -> None:
    index = torch.tensor(rows, device=logps.device)
    loss = loss_fn(index, logps, ent)
    if loss.requires_grad:
        loss.backward()
    result.loss += loss.detach().to(result.loss.dtype)
    result.logps[index] = logps.detach().to(result.logps.dtype)
    if ent is not None and result.entropy is not None:
        result.entropy[index] = ent.detach().to(result.entropy.dtype)


def replay_backward(
    model: nn.Module,
    batch: ReplayBatch,
    loss_fn: LossFn,
    *,
    temperature: float = 1.0,
    branch_batch: int = 1,
    entropy: bool = True,
    head_fp32: bool = False,
    min_group: int = 2,
    checkpoint_prompt: bool | None = None,
    prompt_chunk: int = 0,
    offload_prompt_state: bool = False,
) -> ReplayResult:
    """Backward of the loss `loss_fn` defines over `batch`, replaying each shared prompt; gradients accumulate.

    Args:
        model: the policy (a causal LM or a Qwen2.5-VL; DDP and PEFT wrappers are looked through).
        batch: the micro-batch; rows sharing a prompt are found by content.
        loss_fn: `(rows, logps, entropy) -> scalar`, the rows' share of the loss (see `GRPOLoss.loss_fn`).
        temperature: the sampling temperature the logits are divided by.
        branch_batch: completions replayed together; each costs a copy of the prompt's keys and values.
        entropy: also compute per-token entropies (TRL logs them).
        head_fp32: project through the LM head in float32 (TRL's `cast_lm_head_to_fp32`).
        min_group: smaller groups take the plain path.
        checkpoint_prompt: checkpoint each layer in the prompt's recomputation (c), holding layer inputs
            instead of all activations; default: whether the model has gradient checkpointing on.
        prompt_chunk: > 0 runs the prompt in chunks of this many tokens and back-propagates chunk by chunk
            (`training.replay.chunked`): the same gradient, one chunk's activations; 0 runs it in one piece.
        offload_prompt_state: with `prompt_chunk`, keep the per-chunk linear-attention states in (pinned) CPU
            memory between uses.

    Returns:
        A `ReplayResult`; the gradients are in the parameters' `.grad`.
    """
    policy = _resolve(model)
    if checkpoint_prompt is None:
        checkpoint_prompt = any(getattr(m, "gradient_checkpointing", False) is True for m in policy.model.modules())
    if prompt_chunk < 0:
        raise ValueError(f"prompt_chunk must be >= 0 (0: the prompt in one piece), got {prompt_chunk}")
    _ensure_checked(policy, prompt_chunk)
    groups, plain_rows = find_groups(batch, policy.image_token_ids, min_group, images=policy.mrope)
    dtype = policy.head.weight.dtype
    width = batch.completion_ids.size(1)
    device = batch.completion_ids.device
    result = ReplayResult(
        logps=torch.zeros(batch.size, width, device=device, dtype=torch.float32 if dtype != torch.float64 else dtype),
        entropy=torch.zeros(batch.size, width, device=device, dtype=torch.float32 if dtype != torch.float64 else dtype)
        if entropy
        else None,
        loss=torch.zeros((), device=device, dtype=torch.float64),
        groups=groups,
        plain_rows=plain_rows,
    )
    for rows in _chunks(plain_rows, branch_batch):  # full sequences: the model's own checkpointing applies
        with torch.enable_grad():
            logps, ent = _plain_logps(policy, batch, rows, temperature, entropy, head_fp32)
            _backward_rows(logps, ent, rows, loss_fn, result)
    with _no_checkpointing(policy.model):
        for group in groups:
            prompt = _prompt_inputs(policy, batch, group[0])
            chunked = None
            if 0 < prompt_chunk < prompt["ids"].size(1) - 1:
                from training.replay.chunked import chunked_prompt_state

                with torch.no_grad():  # (a), chunk by chunk
                    chunked = chunked_prompt_state(policy, prompt, prompt_chunk, offload=offload_prompt_state)
                state = chunked.prompt_state(prompt, device)
            else:
                rng = _RngReplay(device)
                with torch.no_grad():
                    state = _prompt_state(policy, prompt)  # (a)
            leaves = state.leaves()
            del state
            for rows in _chunks(group, branch_batch):  # (b)
                index = torch.tensor(rows, device=device)
                with torch.enable_grad():
                    logps, ent = _branch_logps(
                        policy,
                        leaves,
                        batch.completion_ids[index],
                        batch.completion_mask[index],
                        temperature,
                        entropy,
                        head_fp32,
                    )
                    _backward_rows(logps, ent, rows, loss_fn, result)
            grads = [t.grad for t in leaves.flat()]
            del leaves
            if all(g is None for g in grads):
                continue
            if chunked is not None:
                from training.replay.chunked import chunked_prompt_backward

                chunked_prompt_backward(policy, chunked, grads, checkpoint_prompt)  # (c), last chunk to first
                del chunked, grads
                continue
            with torch.enable_grad(), rng.replay():
                recomputed = _prompt_state(policy, prompt, checkpoint_prompt).flat()  # (c)
            pairs = [(t, g) for t, g in zip(recomputed, grads) if g is not None and t.requires_grad]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
    return result


def replay_token_logps(
    model: nn.Module,
    batch: ReplayBatch,
    *,
    temperature: float = 1.0,
    branch_batch: int = 1,
    entropy: bool = False,
    head_fp32: bool = False,
    min_group: int = 2,
    prompt_chunk: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, R) log-probs (and entropies) without autograd: each shared prompt runs once (TRL's old/ref log-probs).

    `prompt_chunk` > 0 runs each prompt in chunks of that many tokens (activations of one chunk at a time).
    """
    policy = _resolve(model)
    _ensure_checked(policy, prompt_chunk)
    groups, plain_rows = find_groups(batch, policy.image_token_ids, min_group, images=policy.mrope)
    width = batch.completion_ids.size(1)
    logps_out: torch.Tensor | None = None
    ent_out: torch.Tensor | None = None

    def put(index: torch.Tensor, logps: torch.Tensor, ent: torch.Tensor | None) -> None:
        nonlocal logps_out, ent_out
        if logps_out is None:
            logps_out = logps.new_zeros(batch.size, width)
            ent_out = logps.new_zeros(batch.size, width) if entropy else None
        logps_out[index] = logps
        if ent is not None and ent_out is not None:
            ent_out[index] = ent

    device = batch.completion_ids.device
    with torch.no_grad(), _no_checkpointing(policy.model):
        for rows in _chunks(plain_rows, branch_batch):
            put(torch.tensor(rows, device=device), *_plain_logps(policy, batch, rows, temperature, entropy, head_fp32))
        for group in groups:
            prompt = _prompt_inputs(policy, batch, group[0])
            if 0 < prompt_chunk < prompt["ids"].size(1) - 1:
                from training.replay.chunked import chunked_prompt_state

                state = chunked_prompt_state(policy, prompt, prompt_chunk).prompt_state(prompt, device)
            else:
                state = _prompt_state(policy, prompt)
            for rows in _chunks(group, branch_batch):
                index = torch.tensor(rows, device=device)
                put(
                    index,
                    *_branch_logps(
                        policy,
                        state,
                        batch.completion_ids[index],
                        batch.completion_mask[index],
                        temperature,
                        entropy,
                        head_fp32,
                    ),
                )
    assert logps_out is not None, "an empty batch has no log-probs"
    return logps_out, ent_out


def plain_backward(
    model: nn.Module,
    batch: ReplayBatch,
    loss_fn: LossFn,
    *,
    temperature: float = 1.0,
    entropy: bool = True,
    head_fp32: bool = False,
) -> ReplayResult:
    """The reference: one full-sequence forward of the whole batch and one backward (what replay must equal)."""
    policy = _resolve(model)
    rows = list(range(batch.size))
    width = batch.completion_ids.size(1)
    result = ReplayResult(
        logps=torch.zeros(batch.size, width, device=batch.completion_ids.device, dtype=torch.float64),
        entropy=torch.zeros(batch.size, width, device=batch.completion_ids.device, dtype=torch.float64)
        if entropy
        else None,
        loss=torch.zeros((), device=batch.completion_ids.device, dtype=torch.float64),
        plain_rows=rows,
    )
    with torch.enable_grad():
        logps, ent = _plain_logps(policy, batch, rows, temperature, entropy, head_fp32)
        _backward_rows(logps, ent, rows, loss_fn, result)
    return result


# -- the GRPO loss -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOLoss:
    """TRL `GRPOTrainer`'s loss, written as a per-token loss times a per-row weight so rows can go one by one.

    Fields mirror `GRPOConfig`'s (`epsilon_low`/`epsilon_high` are `epsilon`/`epsilon_high` there). The
    aggregation over a micro-batch of B rows with masks m and per-token losses l, as TRL computes it:
    grpo/sapo: mean_i(sum_t m l / n_i); bnpo: sum m l / N; dr_grpo: sum m l / (B · max_completion_length);
    dapo/cispo: sum m l / normalizer (from num_items_in_batch); luspo: mean_i(sum_t m l) — each divided by
    the gradient-accumulation steps where TRL divides.
    """

    loss_type: str = "dapo"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: float | None = None
    beta: float = 0.0
    importance_sampling_level: str = "token"
    use_bias_correction_kl: bool = False
    off_policy_mask_threshold: float | None = None
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    max_completion_length: int | None = None

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ReplayUnsupportedError(
                f"replay reproduces loss_type in {', '.join(LOSS_TYPES)}; got {self.loss_type!r} "
                "(set replay_shared_prompt=false for it)"
            )
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(
                f"importance_sampling_level must be token or sequence, got {self.importance_sampling_level!r}"
            )

    def per_token(
        self,
        logps: torch.Tensor,
        old_logps: torch.Tensor | None,
        ref_logps: torch.Tensor | None,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        importance_ratio: torch.Tensor | None = None,
        sampling_logps: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(per-token loss, coef_1 after the delta clamp, per-token KL or None), exactly as TRL's `_compute_loss`."""
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old_logps = logps.detach() if old_logps is None else old_logps
        log_ratio = logps - old_logps
        if self.importance_sampling_level == "token":
            log_weights = log_ratio
        else:
            log_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        coef_1 = torch.exp(log_weights)
        kl = None
        if self.beta != 0.0:
            assert ref_logps is not None, "beta != 0 needs reference log-probs"
            kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
            if self.use_bias_correction_kl:
                kl = kl * coef_1
        if self.loss_type == "cispo":
            clamped = torch.clamp(coef_1, max=self.epsilon_high).detach()
            loss = -clamped * advantages * logps
        elif self.loss_type == "sapo":
            temps = torch.where(advantages > 0, self.sapo_temperature_pos, self.sapo_temperature_neg)
            loss = -(torch.sigmoid(temps * (coef_1 - 1)) * 4 / temps) * advantages
        else:
            coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
            if self.delta is not None:
                coef_1 = torch.clamp(coef_1, max=self.delta)
            loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
        if self.off_policy_mask_threshold is not None:
            from trl import GRPOTrainer

            loss = loss * GRPOTrainer.get_off_policy_mask(
                advantages=advantages,
                per_token_logps=logps,
                sampling_per_token_logps=old_logps if sampling_logps is None else sampling_logps,
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )
        if importance_ratio is not None:
            loss = loss * importance_ratio
        if kl is not None:
            loss = loss + self.beta * kl
        return loss, coef_1, kl

    def row_weights(
        self,
        mask: torch.Tensor,
        *,
        accumulation_steps: int = 1,
        num_items_in_batch: torch.Tensor | float | None = None,
        num_processes: int = 1,
        steps_per_generation: int = 1,
        training: bool = True,
    ) -> torch.Tensor:
        """(B,) weights c_i with loss = sum_i c_i · sum_t m_it · l_it, for a micro-batch's mask (B, R)."""
        rows = mask.size(0)
        accumulation = accumulation_steps if training else 1
        ones = mask.new_ones(rows, dtype=torch.float64)
        if self.loss_type in ("grpo", "sapo"):
            return 1.0 / (rows * mask.sum(-1).clamp(min=1.0).double() * accumulation)
        if self.loss_type == "bnpo":
            return ones / (float(mask.sum().clamp(min=1.0)) * accumulation)
        if self.loss_type == "dr_grpo":
            assert self.max_completion_length, "dr_grpo normalises by max_completion_length"
            return ones / (rows * self.max_completion_length * accumulation)
        if self.loss_type == "luspo":
            return ones / (rows * accumulation)
        assert num_items_in_batch is not None, f"{self.loss_type} normalises by num_items_in_batch"
        items = torch.as_tensor(num_items_in_batch, dtype=torch.float64).clamp(min=1.0) / num_processes
        if training:
            items = items * accumulation_steps / steps_per_generation
        return ones / float(items)

    def loss_fn(
        self,
        weights: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        old_logps: torch.Tensor | None = None,
        ref_logps: torch.Tensor | None = None,
        importance_ratio: torch.Tensor | None = None,
        sampling_logps: torch.Tensor | None = None,
    ) -> LossFn:
        """The `loss_fn` for `replay_backward`: these rows' weighted per-token loss (tensors are (B, …))."""

        def pick(x: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
            return None if x is None else x[rows]

        def rows_loss(rows: torch.Tensor, logps: torch.Tensor, entropy: torch.Tensor | None) -> torch.Tensor:
            m = mask[rows].to(logps.dtype)
            loss, _, _ = self.per_token(
                logps,
                pick(old_logps, rows),
                pick(ref_logps, rows),
                advantages[rows],
                m,
                pick(importance_ratio, rows),
                pick(sampling_logps, rows),
            )
            return ((loss * m).sum(-1) * weights[rows].to(logps.dtype)).sum()

        return rows_loss
