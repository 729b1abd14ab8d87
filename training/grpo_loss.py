"""TRL `GRPOTrainer`'s loss (TRL 1.16 `_compute_loss`) as a per-token loss times a per-row weight.

TRL computes the loss of a whole micro-batch at once. Written as `Σ_i w_i · Σ_t m_it · l_it` (per-token loss
l, completion mask m, a weight w per row that folds in TRL's normaliser), the same loss is a sum over rows,
so the rows can go through any number of forward passes and still add up to exactly TRL's value.
Shared-prompt replay (`training.replay`, one completion at a time) and multi-policy GRPO
(`training.multi_policy`, rows of several policies mixed in forward chunks) both rely on that.

    loss = GRPOLoss.from_config(grpo_config)                       # or GRPOLoss(loss_type="dapo", beta=0.04)
    weights = loss.row_weights(mask, num_items_in_batch=inputs["num_items_in_batch"])
    value, kl = loss.rows_loss(logps, mask, advantages, weights, old_logps=old, ref_logps=ref)  # = TRL's loss

`tests/training/test_grpo_loss.py` checks every loss type against `GRPOTrainer._compute_loss` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch

__all__ = ["LOSS_TYPES", "GRPOLoss", "LossFn", "TokenLoss"]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
"""Every `loss_type` TRL 1.16's `GRPOConfig` accepts."""

LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
"""`loss_fn(rows, logps, entropy)`: rows (b,) index the batch, logps/entropy are (b, R) with autograd; returns
the rows' share of the loss as a scalar. The full loss must be the sum over disjoint row sets."""


class TokenLoss(NamedTuple):
    """The per-token terms of TRL's loss, before the mask and the normaliser."""

    loss: torch.Tensor
    """(B, T), or (B, 1) when nothing broadcasts it to the tokens."""
    weight: torch.Tensor
    """The importance weight the loss applies (TRL's metrics read it): coef_1 after the delta clamp,
    (B, T) or (B, 1) at sequence level; vespo's gamma weight φ, (B, 1)."""
    kl: torch.Tensor | None
    """(B, T) k3 estimate of KL to the reference (times coef_1 with the bias correction), or None at beta=0."""


@dataclass(frozen=True)
class GRPOLoss:
    """TRL `GRPOTrainer`'s loss for one `loss_type`, split into per-token terms and per-row weights.

    Fields mirror `GRPOConfig`'s (`epsilon_low`/`epsilon_high` are `epsilon`/`epsilon_high` there, the
    latter resolved as TRL does). The aggregation over a micro-batch of B rows with masks m and per-token
    losses l, as TRL computes it: grpo/sapo: mean_i(Σ_t m l / n_i); bnpo: Σ m l / N; dr_grpo: Σ m l / (B ·
    max_completion_length); dapo/cispo/vespo: Σ m l / normaliser (from num_items_in_batch); luspo:
    mean_i(Σ_t m l); each divided by the gradient-accumulation steps where TRL divides.
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
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    max_completion_length: int | None = None

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)} (TRL's), got {self.loss_type!r}")
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(
                f"importance_sampling_level must be token or sequence, got {self.importance_sampling_level!r}"
            )

    @classmethod
    def from_config(cls, config: Any) -> GRPOLoss:
        """The loss a `GRPOConfig` asks for. Any object with its field names will do (a `PolicySpec`): a field
        it lacks keeps this class's default, and `epsilon_high=None` means `epsilon`, as in TRL.

        >>> from types import SimpleNamespace
        >>> GRPOLoss.from_config(SimpleNamespace(loss_type="grpo", epsilon=0.1, epsilon_high=None)).epsilon_high
        0.1
        """
        values = {f.name: getattr(config, f.name, f.default) for f in fields(cls)}
        values["epsilon_low"] = getattr(config, "epsilon", cls.epsilon_low)
        if getattr(config, "epsilon_high", None) is None:
            values["epsilon_high"] = values["epsilon_low"]
        return cls(**values)

    def per_token(
        self,
        logps: torch.Tensor,
        old_logps: torch.Tensor | None,
        ref_logps: torch.Tensor | None,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        importance_ratio: torch.Tensor | None = None,
        sampling_logps: torch.Tensor | None = None,
    ) -> TokenLoss:
        """TRL's per-token loss, in `_compute_loss`'s order. `old_logps` None: on-policy (`logps` detached);
        `importance_ratio`: vLLM's sampling correction; `sampling_logps`: the off-policy mask's reference."""
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
        elif self.loss_type == "vespo":
            from trl import GRPOTrainer

            coef_1 = GRPOTrainer.get_gamma_weights(
                advantages=advantages,
                log_ratio_per_token=log_ratio,
                mask=mask,
                importance_sampling_ratio=importance_ratio,
                k_pos=self.vespo_k_pos,
                lambda_pos=self.vespo_lambda_pos,
                k_neg=self.vespo_k_neg,
                lambda_neg=self.vespo_lambda_neg,
            )
            loss = -coef_1 * advantages * logps
            importance_ratio = None  # vespo folds vLLM's ratio into its gamma weight instead
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
        return TokenLoss(loss, coef_1, kl)

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
        """(B,) float64 weights w_i with TRL's loss = Σ_i w_i · Σ_t m_it · l_it, for a micro-batch's mask (B, T).

        The keywords are TRL's normalisers: `current_gradient_accumulation_steps`, `num_items_in_batch` (the
        generation batch's completion tokens, all processes: dapo, cispo and vespo), the process count and
        `steps_per_generation`; `training=False` is TRL's eval mode (no accumulation).
        """
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

    def rows_loss(
        self,
        logps: torch.Tensor,
        mask: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor,
        *,
        old_logps: torch.Tensor | None = None,
        ref_logps: torch.Tensor | None = None,
        importance_ratio: torch.Tensor | None = None,
        sampling_logps: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(these rows' share of the loss, Σ_i w_i Σ_t m l, as a scalar; their per-token KL or None).

        All tensors hold the same rows: (b, T) and (b,) slices of the micro-batch's, `weights` from
        `row_weights` of the whole micro-batch.
        """
        m = mask.to(logps.dtype)
        terms = self.per_token(logps, old_logps, ref_logps, advantages, m, importance_ratio, sampling_logps)
        return ((terms.loss * m).sum(-1) * weights.to(logps.dtype)).sum(), terms.kl

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
        """The `loss_fn` for `replay_backward`: `rows_loss` of whichever rows it is handed (tensors are (B, …))."""

        def pick(x: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
            return None if x is None else x[rows]

        def share(rows: torch.Tensor, logps: torch.Tensor, entropy: torch.Tensor | None) -> torch.Tensor:
            loss, _ = self.rows_loss(
                logps,
                mask[rows],
                advantages[rows],
                weights[rows],
                old_logps=pick(old_logps, rows),
                ref_logps=pick(ref_logps, rows),
                importance_ratio=pick(importance_ratio, rows),
                sampling_logps=pick(sampling_logps, rows),
            )
            return loss

        return share
