"""From scored items to `metrics.json`'s accuracies, the same whatever the reading.

Group accuracy = agree / (agree + reject) over the group's items, overall = the sum of agree over the sum of
decided items of the three groups, macro = the mean of the group accuracies; items that are `doesntMatch` or
`other` leave the denominators, as in `cal.py`. Beside the official figures: seeded bootstrap intervals, and
the accuracy with the undecided items counted wrong or as half a point, for those who want every item in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eval.bootstrap import BOOTSTRAP_RESAMPLES, RatioSet, bootstrap_intervals, interval_keys
from eval.vl_rewardbench.data import GROUPS

__all__ = ["Unit", "unit_metrics"]


@dataclass
class Unit:
    """One scored item: its group and source, and its outcome (`agree`, `reject`, `doesntMatch`, `other`)."""

    group: str
    source: str
    outcome: str


def _ratio(agree: int, decided: int) -> float | None:
    return agree / decided if decided else None


def unit_metrics(
    units: Sequence[Unit], sources: Sequence[str], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES
) -> dict[str, object]:
    """Accuracies from scored items, with seeded 95 % bootstrap intervals and the two "unparsed" readings.

    `*_unparsed_wrong` counts every undecided item (doesntMatch or no majority) as wrong, `*_unparsed_coin`
    gives it half a point (a fair coin's expected value); both over all items, where the official figure
    leaves such items out of the denominator.
    """
    ratios = RatioSet()
    metrics: dict[str, object] = {}
    agree_all = decided_all = 0
    group_acc: dict[str, float] = {}
    wrong_acc: dict[str, float] = {}
    coin_acc: dict[str, float] = {}
    for group in GROUPS:
        members = [u for u in units if u.group == group]
        agree = sum(u.outcome == "agree" for u in members)
        decided = agree + sum(u.outcome == "reject" for u in members)
        metrics[f"accuracy_{group}"] = _ratio(agree, decided)
        metrics[f"n_{group}"] = len(members)
        agree_all, decided_all = agree_all + agree, decided_all + decided
        if decided:
            group_acc[group] = agree / decided
        if members:
            wrong_acc[group] = agree / len(members)
            coin_acc[group] = (agree + 0.5 * (len(members) - decided)) / len(members)
        ratios.add(
            f"accuracy_{group}",
            [float(u.group == group and u.outcome == "agree") for u in units],
            [float(u.group == group and u.outcome in ("agree", "reject")) for u in units],
        )
    ratios.add(
        "overall_accuracy",
        [float(u.outcome == "agree" and u.group in GROUPS) for u in units],
        [float(u.outcome in ("agree", "reject") and u.group in GROUPS) for u in units],
    )
    ratios.means["macro_accuracy"] = [f"accuracy_{g}" for g in GROUPS if g in group_acc]
    scored = [u for u in units if u.group in GROUPS]
    undecided = len(scored) - decided_all
    metrics["overall_accuracy"] = _ratio(agree_all, decided_all)
    metrics["macro_accuracy"] = sum(group_acc.values()) / len(group_acc) if group_acc else None
    metrics["decided"] = decided_all
    metrics["unparsed"] = undecided
    metrics["no_majority"] = sum(u.outcome == "other" for u in scored)
    metrics["overall_accuracy_unparsed_wrong"] = agree_all / len(scored) if scored else None
    metrics["overall_accuracy_unparsed_coin"] = (agree_all + 0.5 * undecided) / len(scored) if scored else None
    metrics["macro_accuracy_unparsed_wrong"] = sum(wrong_acc.values()) / len(wrong_acc) if wrong_acc else None
    metrics["macro_accuracy_unparsed_coin"] = sum(coin_acc.values()) / len(coin_acc) if coin_acc else None
    for source in sources:
        members = [u for u in units if u.source == source]
        if members:
            agree = sum(u.outcome == "agree" for u in members)
            metrics[f"accuracy_{source}"] = _ratio(agree, agree + sum(u.outcome == "reject" for u in members))
    metrics.update(interval_keys(bootstrap_intervals(ratios, n=resamples, seed=seed)))
    metrics["bootstrap_resamples"] = resamples
    metrics["bootstrap_seed"] = seed
    return metrics
