"""Group-relative advantages of a policy's step, as TRL 1.16's `GRPOTrainer` forms them.

The loss itself is TRL's, from `training.grpo_loss` (shared with shared-prompt replay): its per-row weights
let a policy's rows be spread over any number of mixed-adapter forward chunks and still add up to exactly
the policy's loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from trl.trainer.utils import nanstd

__all__ = ["advantages"]


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
