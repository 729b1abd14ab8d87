"""Held-out pairs with a known kind and flaw, and how a judge's choices on them are scored.

One rule for every figure made from such pairs (the demo, `benchmarks/learning_curve.py`,
`benchmarks/policy_reward_curve.py`): an item the judge leaves undecided (no parsable answer in any display
order) counts as a coin flip, `UNDECIDED_CREDIT` = 0.5, so a judge that never answers scores pairwise chance
rather than 0 or a figure over the decided few. `accuracy_strict` counts it wrong; `decided` says how many.
The breakdown by flaw splits image flaws (only the picture reveals them, `data_synthesis.records.IMAGE_FLAWS`)
from text flaws: a judge that does not look at the picture is at chance on the first and right on the second.

The official scorers (`eval.vl_rewardbench`) keep their own protocol (undecided items leave the denominators).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_synthesis.records import IMAGE_FLAWS
from judge.types import MCItem

__all__ = [
    "UNDECIDED_CREDIT",
    "evidence_of",
    "heldout_pairs",
    "mean_reward",
    "reward_choice",
    "score_choices",
    "score_verdicts",
]

UNDECIDED_CREDIT = 0.5
"""What an undecided pairwise item is worth: the chance of a coin flip between two answers."""


def heldout_pairs(items_dir: str | Path, n: int, seed: int) -> list[MCItem]:
    """Pairwise items (reference vs one negative) from the validation split of `items_dir/items.jsonl`.

    Each item's `meta` carries the question kind and the negative's flaw; the reference's display position
    is a seeded coin, so `label` is 0 or 1 about equally often. The first `n` in file order.
    """
    from jobs.jsonl import read_jsonl

    rng = random.Random(seed)
    items = []
    for _, item in read_jsonl(Path(items_dir) / "items.jsonl"):
        if item["meta"]["split"] != "val":
            continue
        label = item["label"]
        wrong = rng.choice([i for i in range(len(item["candidates"])) if i != label])
        pair = [item["candidates"][label], item["candidates"][wrong]]
        first = rng.randrange(2)
        candidates = pair if first == 0 else pair[::-1]
        items.append(
            MCItem(
                id=item["id"],
                image=item["image"],
                question=item["question"],
                candidates=candidates,
                label=0 if first == 0 else 1,
                meta={"kind": item["meta"]["source"].split("/")[1], "flaw": item["meta"]["flaws"][wrong]},
            )
        )
    return items[:n]


def evidence_of(flaw: str | None) -> str:
    """ "image" for a flaw only the picture reveals, "text" for one the answer's text gives away."""
    return "image" if flaw in IMAGE_FLAWS else "text"


def _credit(choice: int | None, label: int) -> float:
    return UNDECIDED_CREDIT if choice is None else float(choice == label)


def _shares(groups: Mapping[str, list[float]]) -> dict[str, float]:
    return {key: round(sum(values) / len(values), 4) for key, values in sorted(groups.items())}


def score_choices(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Accuracy of pairwise choices, overall and by kind, flaw and evidence (image / text flaws).

    Each row: `choice` (int or None: undecided), `label`, and optionally `consistent` (the display orders
    agreed), `kind` and `flaw`. Counts: `n`, `decided`; shares rounded to 4 places in the breakdowns.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("no rows to score: the held-out set is empty")
    credits = [_credit(r["choice"], r["label"]) for r in rows]
    decided = sum(r["choice"] is not None for r in rows)
    groups: dict[str, dict[str, list[float]]] = {"kind": defaultdict(list), "flaw": defaultdict(list)}
    groups["evidence"] = defaultdict(list)
    for row, credit in zip(rows, credits):
        if row.get("kind") is not None:
            groups["kind"][row["kind"]].append(credit)
        if "flaw" in row:
            groups["flaw"][row["flaw"]].append(credit)
            groups["evidence"][evidence_of(row["flaw"])].append(credit)
    n = len(rows)
    return {
        "accuracy": sum(credits) / n,
        "accuracy_strict": sum(r["choice"] is not None and r["choice"] == r["label"] for r in rows) / n,
        "n": n,
        "decided": decided,
        "consistency": sum(bool(r.get("consistent")) for r in rows) / n,
        "per_kind": _shares(groups["kind"]),
        "per_flaw": _shares(groups["flaw"]),
        "per_evidence": _shares(groups["evidence"]),
        "flaw_counts": {flaw: len(values) for flaw, values in sorted(groups["flaw"].items())},
    }


def score_verdicts(items: Sequence[MCItem], verdicts: Sequence[Any]) -> dict[str, Any]:
    """`score_choices` of a judge's verdicts on `heldout_pairs` items, plus the per-call figures: the share
    of single display-order calls that chose right (`call_accuracy`) and the calls with no parsable answer."""
    rows = [
        {"choice": v.choice, "label": i.label, "consistent": v.consistent, **i.meta} for i, v in zip(items, verdicts)
    ]
    votes = [(vote, item.label) for item, verdict in zip(items, verdicts) for vote in verdict.votes]
    return {
        **score_choices(rows),
        "call_accuracy": sum(vote == label for vote, label in votes) / max(1, len(votes)),
        "unparsed_calls": sum(vote is None for vote, _ in votes),
    }


def mean_reward(rewards: Iterable[float | None]) -> float:
    """Mean of pairwise judge rewards; an unscored one (None: the judge could not decide) counts as a coin flip."""
    values = [UNDECIDED_CREDIT if r is None else r for r in rewards]
    return sum(values) / max(1, len(values))


def reward_choice(reward: float | None) -> int | None:
    """A pairwise reward of answer 0 against answer 1 as a choice: 0 above one half, 1 below, None (undecided)
    for exactly one half (the orders split) or no reward."""
    if reward is None or reward == UNDECIDED_CREDIT:
        return None
    return 0 if reward > UNDECIDED_CREDIT else 1
