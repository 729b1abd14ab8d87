"""The replay engine: each shared prompt once, its completions as branches, then the prompt's share of the gradient.

(a) prompt[:-1] forward without autograd            -> the prompt state S
(b) per completion (or `branch_batch` of them): forward against leaf copies of S, loss, backward
(c) prompt[:-1] forward with autograd, backward(S, dL/dS)   (or chunk by chunk: `training.replay.chunked`)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from training.grpo_loss import LossFn
from training.replay.attention import grouped_attention
from training.replay.batch import ReplayBatch, find_groups
from training.replay.logps import _branch_logps, _plain_logps
from training.replay.model import _no_checkpointing, _resolve, _RngReplay
from training.replay.probe import _ensure_checked
from training.replay.state import _prompt_inputs, _prompt_state


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
    room = width if branch_batch == 1 else 0  # one-row branches append into the prompt's buffers
    with _no_checkpointing(policy.model), grouped_attention(policy.text_config):
        for group in groups:
            prompt = _prompt_inputs(policy, batch, group[0])
            chunked = None
            if 0 < prompt_chunk < prompt["ids"].size(1) - 1:
                from training.replay.chunked import chunked_prompt_state

                with torch.no_grad():  # (a), chunk by chunk
                    chunked = chunked_prompt_state(
                        policy, prompt, prompt_chunk, offload=offload_prompt_state, room=room
                    )
                state = chunked.prompt_state(prompt, device, grad=True)
            else:
                rng = _RngReplay(device)
                with torch.no_grad():
                    state = _prompt_state(policy, prompt)  # (a)
                    state = state.with_room(room, grad=True) if room else state
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
            grads = leaves.grads()
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
    room = width if branch_batch == 1 else 0
    with torch.no_grad(), _no_checkpointing(policy.model):
        for rows in _chunks(plain_rows, branch_batch):
            put(torch.tensor(rows, device=device), *_plain_logps(policy, batch, rows, temperature, entropy, head_fp32))
    with torch.no_grad(), _no_checkpointing(policy.model), grouped_attention(policy.text_config):
        for group in groups:
            prompt = _prompt_inputs(policy, batch, group[0])
            if 0 < prompt_chunk < prompt["ids"].size(1) - 1:
                from training.replay.chunked import chunked_prompt_state

                state = chunked_prompt_state(policy, prompt, prompt_chunk, room=room).prompt_state(prompt, device)
            else:
                state = _prompt_state(policy, prompt)
                state = state.with_room(room, grad=False) if room else state
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
