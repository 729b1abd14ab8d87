"""A window's audit figures, and their trend.

For each audited completion the judge's reward is read against an even share of the group's reward (one half
for a pairwise reward, which is the probability of beating the reference; 1/G for a listwise or tournament
reward over G completions): *paid* means above it. The gold says right (≥ 0.5) or wrong. Then, as
`benchmarks/judge_as_reward.py` measures it on whole evaluations:

- `overpay`: the share of wrong completions the judge paid (rewarded above the reference);
- `underpay`: the share of right completions the judge paid less than half an even share (it clearly preferred
  something else to an answer the gold calls right);
- `agreement`: the share where paid and right agree;
- `judge_mean`, `gold_mean`: the mean judge reward and mean gold of the audited completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["Scored", "WindowFigures", "moving_mean", "overpaid_counts", "slope", "window_figures"]


@dataclass(frozen=True)
class Scored:
    """One audited completion: the judge's reward, the gold, and the even share its reward is read against."""

    judge: float | None
    gold: float | None
    even: float


@dataclass
class WindowFigures:
    """The figures of one window of steps (or requests)."""

    window: int
    first_step: int
    last_step: int
    n: int
    """Completions with both a judge reward and a gold."""
    agreement: float | None
    overpay: float | None
    underpay: float | None
    judge_mean: float | None
    gold_mean: float | None
    kl: float | None = None
    """The policy's mean KL to its start over the window's steps, where the trainer logs it."""

    def to_dict(self) -> dict:
        return asdict(self)


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def overpaid_counts(samples: Sequence[Scored]) -> tuple[int, int]:
    """(the wrong completions the judge paid, the wrong completions) of `samples`: overpay is their ratio.
    Completions without a judge reward or a gold are left out."""
    wrong = [s for s in samples if s.judge is not None and s.gold is not None and s.gold < 0.5]
    return sum(s.judge > s.even for s in wrong), len(wrong)  # type: ignore[operator]


def window_figures(
    window: int, steps: Sequence[int], samples: Sequence[Scored], kl: float | None = None
) -> WindowFigures:
    """The figures of `samples` (completions without a judge reward or a gold are left out)."""
    both = [s for s in samples if s.judge is not None and s.gold is not None]
    right = [s for s in both if s.gold >= 0.5]  # type: ignore[operator]
    return WindowFigures(
        window=window,
        first_step=min(steps) if steps else 0,
        last_step=max(steps) if steps else 0,
        n=len(both),
        agreement=_share([(s.judge > s.even) == (s.gold >= 0.5) for s in both]),  # type: ignore[operator]
        overpay=_ratio(*overpaid_counts(both)),
        underpay=_share([s.judge < s.even / 2 for s in right]),  # type: ignore[operator]
        judge_mean=_mean([s.judge for s in both]),  # type: ignore[misc]
        gold_mean=_mean([s.gold for s in both]),  # type: ignore[misc]
        kl=kl,
    )


def slope(values: Sequence[float]) -> float:
    """The least-squares slope of `values` against their positions (0 for fewer than two)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


def moving_mean(values: Sequence[float], k: int) -> list[float]:
    """Each value averaged with up to `k - 1` before it: a 5 % sample's noise, smoothed over `k` windows."""
    return [sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]
