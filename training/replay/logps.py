"""Per-token log-probabilities (and entropies) of completions: replayed against a prompt state, or plain.

Both go through TRL's own chunked log-prob kernel, so the numbers are the ones TRL's loss would see.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from training.replay.batch import ReplayBatch
from training.replay.model import _Policy
from training.replay.state import _PromptState


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
