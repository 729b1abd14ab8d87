"""TRL GRPOTrainer's loss, as a per-token loss times a per-row weight, so rows can be replayed one by one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from training.replay.errors import ReplayUnsupportedError

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
"""TRL loss types the replay loss reproduces (each is a per-token loss times a per-row weight)."""

LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
"""`loss_fn(rows, logps, entropy)`: rows (b,) index the batch, logps/entropy are (b, R) with autograd; returns
the rows' share of the loss as a scalar. The full loss must be the sum over disjoint row sets."""


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
