"""The GRPO objective per policy, with TRL's formulas (TRL 1.16 `GRPOTrainer`), split so that rows can be
spread over any number of forward passes and still add up to exactly the policy's loss.

Each row carries a weight that folds in TRL's token aggregation (`grpo`: mean over the row's tokens, then
over rows; `dapo`/`bnpo`: sum over the policy's tokens ÷ their count; `dr_grpo`: ÷ rows × budget), so the
policy's loss is `Σ_rows weight · Σ_tokens token_loss` whichever forward pass a row lands in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from trl.trainer.utils import nanstd

__all__ = ["advantages", "row_weights", "token_loss"]


def advantages(rewards: Sequence[float | None], group_size: int, scale: str) -> torch.Tensor:
    """Group-relative advantages: reward minus its group's mean, ÷ (std + 1e-4) unless `scale` is `none`.

    A `None` reward (a judge that could not judge the group) counts as missing, as in TRL: its advantage is 0.
    """
    values = torch.tensor([math.nan if r is None else float(r) for r in rewards], dtype=torch.float32)
    grouped = values.view(-1, group_size)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group_size)
    result = values - mean
    if scale == "group":
        result = result / (nanstd(grouped, dim=1).repeat_interleave(group_size) + 1e-4)
    elif scale == "batch":
        result = result / (nanstd(values) + 1e-4)
    return torch.nan_to_num(result, nan=0.0)


def row_weights(lengths: Sequence[int], loss_type: str, max_completion_length: int) -> list[float]:
    """Each row's weight in its policy's loss (see the module docstring)."""
    rows = len(lengths)
    if loss_type == "grpo":
        return [1.0 / (rows * max(n, 1)) for n in lengths]
    if loss_type == "dr_grpo":
        return [1.0 / (rows * max_completion_length)] * rows
    return [1.0 / max(sum(lengths), 1)] * rows  # dapo, bnpo (one process, no accumulation: the same)


def token_loss(
    logps: torch.Tensor,
    advantage: torch.Tensor,
    *,
    epsilon_low: float,
    epsilon_high: float,
    beta: float,
    ref_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """TRL's clipped surrogate per token (one optimisation pass per generation: old log-probs = current,
    detached) plus `beta` × the k3 KL estimate against the reference. Returns `(loss, kl)`, `[rows, tokens]`."""
    ratio = torch.exp(logps - logps.detach())
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    adv = advantage[:, None]
    loss = -torch.min(ratio * adv, clipped * adv)
    kl = None
    if beta and ref_logps is not None:
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        loss = loss + beta * kl
    return loss, kl
