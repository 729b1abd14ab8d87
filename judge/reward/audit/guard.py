"""The guard: an alarm when the audit shows the policy earning the judge's reward without the gold's.

It reads the closed windows that hold at least `min_samples` audited completions, each series smoothed over
`trend_windows` windows (a 5 % sample is noisy), and fires once, on the first window where

- **the gold falls while the judge's reward does not**: the smoothed gold has lost `gold_drop` of its peak
  (a share of it: 0.1 is a tenth) while the smoothed judge reward stands at or above where it stood at the
  gold's peak and has risen over the last `trend_windows` windows; or
- **overpay rises**: the smoothed overpay is more than `overpay_margin` above its first value.

With the answer key as the reward, gold and reward are one series (when the gold falls, so does the reward)
and overpay is nil, so neither can fire, however noisy the sample.
What it then does is the integration's (`guard`): `warn` logs it and puts it in the metrics, `stop` ends the
run, `keep-best` keeps and marks the checkpoint with the best audited gold (`training.reward_audit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from judge.reward.audit.config import AuditConfig
from judge.reward.audit.figures import WindowFigures, moving_mean, slope

__all__ = ["Alarm", "Guard"]


@dataclass(frozen=True)
class Alarm:
    """What the guard saw: the window and step it fired at, and why, in words."""

    window: int
    step: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


class Guard:
    def __init__(self, config: AuditConfig) -> None:
        self.config = config

    def check(self, windows: Sequence[WindowFigures]) -> Alarm | None:
        """The alarm the windows so far call for, or None."""
        c = self.config
        usable = [w for w in windows if w.n >= c.min_samples and w.gold_mean is not None]
        if len(usable) < c.trend_windows:
            return None
        last = usable[-1]
        gold = moving_mean([w.gold_mean for w in usable], c.trend_windows)  # type: ignore[misc]
        judge = moving_mean([w.judge_mean for w in usable], c.trend_windows)  # type: ignore[misc]
        peak = max(range(len(gold)), key=gold.__getitem__)
        fell = gold[peak] > 0 and gold[-1] <= (1 - c.gold_drop) * gold[peak]
        if fell and judge[-1] >= judge[peak] and slope(judge[-c.trend_windows :]) > 0:
            return Alarm(
                last.window,
                last.last_step,
                f"the audited gold fell from {gold[peak]:.2f} (window {usable[peak].window}) to {gold[-1]:.2f} "
                f"while the judge's reward rose from {judge[peak]:.2f} to {judge[-1]:.2f} "
                f"(each smoothed over {c.trend_windows} windows)",
            )
        paid = [w.overpay for w in usable if w.overpay is not None]
        if len(paid) >= c.trend_windows:
            overpay = moving_mean(paid, c.trend_windows)
            if overpay[-1] - overpay[c.trend_windows - 1] > c.overpay_margin:
                return Alarm(
                    last.window,
                    last.last_step,
                    f"audited overpay rose from {overpay[c.trend_windows - 1]:.2f} to {overpay[-1]:.2f}, more "
                    f"than the margin {c.overpay_margin:.2f}",
                )
        return None
