"""How close does a seeded share of the reward audit come to auditing everything? Choosing `audit_rate`.

The audit scores a seeded share of the judged groups (`RewardAudit.selected`). Its overpay at the start and at
the end of a run is then a figure from a few groups, and the completions of one group share a prompt, so they
are not independent: the share's spread is wider than the count of answers suggests. This reads an
`audit.jsonl` written at `audit_rate: 1.0` (every group audited) and draws the share again under `--draws`
audit seeds with the audit's own rule, so each draw is a run the audit could have had:

    python -m benchmarks.audit_sampling runs/policy/audit.jsonl --rates 0.05,0.25,1 --windows 3

Per rate, for the first and the last `--windows` audit windows pooled (as `benchmarks/reward_audit.py` pools
them): the mean count of audited wrong answers, the spread (sd) of the share's overpay over the draws, and
`within`: the share of draws whose overpay lies within `--tolerance` (0.05) of the whole audit's. Beside them,
`groups_for_tolerance`: about how many groups the pooled windows would need for the 5 % share to be within
the tolerance in 95 % of runs (the spread shrinks as one over the root of the audited groups).

A group is the rows with one `group` number (older files: a run of consecutive rows with one step and one
prompt, as the audit's single worker writes them; two groups of one prompt in one step then read as one).
Overpay, as `judge.reward.audit.figures` defines it: the share of wrong answers (gold below one half) the
judge paid above the group's even share. `benchmarks/reward_audit.py` reads its pooled overpay with the same
functions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.kit import emit
from judge.reward.audit.config import AuditConfig
from judge.reward.audit.figures import Scored, overpaid_counts
from judge.reward.audit.runner import RewardAudit

Group = list[dict[str, Any]]


def group_rows(rows: Iterable[dict[str, Any]], where: str = "audit rows") -> list[Group]:
    """Audit rows as the groups the audit judged, in the order it saw them: by each row's `group` number, or
    (rows from before they carried it) runs of consecutive rows with one step and one prompt."""
    groups: dict[Any, Group] = {}
    previous = None
    for number, row in enumerate(rows, 1):
        try:
            run = (row["step"], row["prompt"], row["window"], float(row["even"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SystemExit(f"{where}: line {number} is not an audit row ({exc!r}); is it an audit.jsonl?") from None
        if "group" in row:
            key = row["group"]
        else:
            key = previous if previous is not None and previous[1:] == run else (number, *run)
        previous = key if "group" not in row else None
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def read_groups(path: Path) -> list[Group]:
    """The audited groups of the audit.jsonl at `path` (`group_rows`)."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(
                    f"{path}: line {number} is not an audit row ({exc!r}); is it an audit.jsonl?"
                ) from None
    groups = group_rows(rows, str(path))
    if not groups:
        raise SystemExit(f"{path}: no audit rows")
    return groups


def overpaid_by_group(groups: Sequence[Group], windows: set[int]) -> list[tuple[int, int]]:
    """Per group with a wrong answer in `windows`: (its wrong answers the judge paid, its wrong answers), by the
    audit's own rule (`judge.reward.audit.figures.overpaid_counts`)."""
    counts = [
        overpaid_counts([Scored(row["reward"], row["gold"], row["even"]) for row in group if row["window"] in windows])
        for group in groups
    ]
    return [(paid, wrong) for paid, wrong in counts if wrong]


def paid_share(counts: Sequence[tuple[int, int]]) -> tuple[float | None, int]:
    """The share paid over all of `overpaid_by_group`'s counts, and how many wrong answers it is read from."""
    wrong = sum(n for _, n in counts)
    return (sum(paid for paid, _ in counts) / wrong if wrong else None), wrong


def overpay(groups: Sequence[Group], windows: set[int]) -> tuple[float | None, int]:
    """The overpay of the completions of `groups` in `windows`, and how many wrong answers it is read from."""
    return paid_share(overpaid_by_group(groups, windows))


def drawn(groups: Sequence[Group], rate: float, seed: int) -> list[Group]:
    """The groups an audit with `rate` and `seed` would have scored (the audit's own seeded rule)."""
    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=rate, seed=seed))
    return [group for k, group in enumerate(groups) if audit.selected(group[0].get("group", k))]


def spread(
    groups: Sequence[Group], spans: dict[str, set[int]], rate: float, draws: int, tolerance: float
) -> dict[str, dict[str, Any]]:
    """For each span of windows: the share's overpay over `draws` seeds against the whole audit's."""
    figures: dict[str, list[float]] = {span: [] for span in spans}
    counts: dict[str, list[int]] = {span: [] for span in spans}
    for seed in range(draws):
        share = drawn(groups, rate, seed)
        for span, windows in spans.items():
            value, wrong = overpay(share, windows)
            if value is not None:
                figures[span].append(value)
                counts[span].append(wrong)
    out = {}
    for span, windows in spans.items():
        whole, values = overpay(groups, windows)[0], figures[span]
        sd = statistics.pstdev(values) if len(values) > 1 else 0.0
        in_windows = sum(any(row["window"] in windows for row in group) for group in groups)
        out[span] = {
            "whole": whole,
            "wrong_mean": statistics.fmean(counts[span]) if values else 0.0,
            "sd": sd,
            "within": (
                sum(abs(v - whole) <= tolerance for v in values) / len(values) if values and whole is not None else None
            ),
            "no_wrong_answer": 1 - len(values) / draws,
            # the spread shrinks as one over the root of the audited groups
            "groups_for_tolerance": round(in_windows * (1.96 * sd / tolerance) ** 2) if sd > 0 else None,
        }
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audit", type=Path, help="an audit.jsonl written at audit_rate 1.0")
    parser.add_argument("--rates", default="0.05,0.25", help="audit rates to draw, comma-separated")
    parser.add_argument("--windows", type=int, default=3, help="first and last audit windows pooled")
    parser.add_argument("--draws", type=int, default=2000, help="audit seeds drawn per rate")
    parser.add_argument("--tolerance", type=float, default=0.05, help="how close to the whole audit counts")
    args = parser.parse_args(argv)
    try:
        rates = [float(rate) for rate in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: comma-separated numbers in (0, 1], not {args.rates!r}")
    if not all(0 < rate <= 1 for rate in rates):
        parser.error(f"--rates: each in (0, 1], not {args.rates!r}")
    groups = read_groups(args.audit)
    numbers = [group[0]["group"] for group in groups if "group" in group[0]]
    if numbers and numbers != list(range(len(groups))):
        missing = sorted(set(range(max(numbers) + 1)) - set(numbers))[:5]
        raise SystemExit(
            f"{args.audit}: groups {missing} … are missing: it was not written at audit_rate 1.0, and a share can "
            "only be drawn again from a whole audit (run with `audit_rate: 1.0`)"
        )
    windows = sorted({row["window"] for group in groups for row in group})
    spans = {"start": set(windows[: args.windows]), "end": set(windows[-args.windows :])}
    result = {
        "benchmark": "audit_sampling",
        "audit": str(args.audit),
        "groups": len(groups),
        "completions": sum(len(group) for group in groups),
        "windows": len(windows),
        "pooled_windows": args.windows,
        "tolerance": args.tolerance,
        "draws": args.draws,
        "by_rate": {str(rate): spread(groups, spans, rate, args.draws, args.tolerance) for rate in rates},
    }
    emit(result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
