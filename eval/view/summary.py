"""The figures above a section's rows: accuracy by category with intervals, where the judge's picks fall, the
audit's pay, the counts of a comparison.

Intervals are the item bootstrap every report of the toolkit uses (`eval.bootstrap`, seed 0), so the page
and `metrics.json` agree on what "±" means. An undecided item counts as wrong, as in the benchmarks' reports.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from eval.bootstrap import RatioSet, bootstrap_intervals

__all__ = ["audit_header", "compare_header", "judge_header"]


def _accuracy_by(rows: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """`[{name, n, accuracy, low, high}]`: overall first, then each value of `key` with labelled rows."""
    labelled = [r for r in rows if r["status"] != "unlabelled"]
    if not labelled:
        return []
    groups = sorted({str(r[key]) for r in labelled if r[key]})
    ratios = RatioSet()
    right = [1.0 if r["correct"] else 0.0 for r in labelled]
    ratios.add("all", right, [1.0] * len(labelled))
    for name in groups:
        member = [1.0 if str(r[key]) == name else 0.0 for r in labelled]
        ratios.add(name, [c * m for c, m in zip(right, member)], member)
    intervals = bootstrap_intervals(ratios, n=1000, seed=0)
    table = []
    for name in ["all", *groups]:
        n = int(sum(ratios.denominators[name]))
        bounds = intervals.get(name) or (None, None)
        table.append(
            {
                "name": name,
                "n": n,
                "accuracy": sum(ratios.numerators[name]) / n if n else None,
                "low": bounds[0],
                "high": bounds[1],
            }
        )
    return table


def _position_bias(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where the calls' answers fall by shown letter, and how often the orders agree."""
    slots: Counter[str] = Counter()
    calls = 0
    for row in rows:
        for call in row.get("calls") or ():
            calls += 1
            if call["letter"] is not None:
                slots[call["letter"]] += 1
    checked = [r["consistent"] for r in rows if r.get("consistent") is not None]
    return {
        "calls": calls,
        "picks_per_slot": dict(sorted(slots.items())),
        "unparsed_calls": calls - sum(slots.values()),
        "consistency": sum(checked) / len(checked) if checked else None,
        "consistency_n": len(checked),
    }


def _tokens(rows: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    usages = [r["usage"] for r in rows if r.get("usage")]
    if not usages:
        return None
    return {
        name: sum(float(u.get(name) or 0) for u in usages) / len(usages)
        for name in ("prompt_tokens", "completion_tokens")
    }


def judge_header(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A judged run's figures: statuses, accuracy by category and by subset, position bias, mean tokens."""
    return {
        "n": len(rows),
        "statuses": dict(Counter(r["status"] for r in rows)),
        "accuracy": _accuracy_by(rows, "category"),
        "accuracy_by_subset": _accuracy_by(rows, "subset") if any(r["subset"] for r in rows) else [],
        "accuracy_by_flaw": _accuracy_by(rows, "flaw") if any(r["flaw"] for r in rows) else [],
        "position": _position_bias(rows),
        "mean_tokens": _tokens(rows),
    }


def audit_header(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An audit's figures, overall and per window: what the judge paid against what the gold says."""

    def figures(members: Sequence[dict[str, Any]]) -> dict[str, Any]:
        both = [r for r in members if r["gold"] is not None and r["reward"] is not None]
        wrong = [r for r in both if r["gold"] < 0.5]
        right = [r for r in both if r["gold"] >= 0.5]
        return {
            "n": len(members),
            "judge_mean": sum(r["reward"] for r in both) / len(both) if both else None,
            "gold_mean": sum(r["gold"] for r in both) / len(both) if both else None,
            "overpay": sum(r["status"] == "overpaid" for r in wrong) / len(wrong) if wrong else None,
            "underpay": sum(r["status"] == "underpaid" for r in right) / len(right) if right else None,
        }

    windows: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        windows[row["window"]].append(row)
    return {
        "n": len(rows),
        "statuses": dict(Counter(r["status"] for r in rows)),
        "overall": figures(rows),
        "windows": [
            {"window": w, **figures(members)}
            for w, members in sorted(windows.items(), key=lambda kv: (kv[0] is None, kv[0]))
        ],
    }


def compare_header(rows: Sequence[dict[str, Any]], only_a: int, only_b: int) -> dict[str, Any]:
    """How two runs differ, item by item."""
    return {"n": len(rows), "changes": dict(Counter(r["status"] for r in rows)), "only_a": only_a, "only_b": only_b}
