"""VL-RewardBench readings: how per-call outcomes become item decisions, and decisions become metrics.

Three readings of one run:

- `cal.py` (the default for official-mode runs): exactly what VL-RewardBench's `cal.py` does with an
  inference file. The calls of every item, in inference order (item by item, k calls each), form one list;
  a `random.Random` seeded with 1234 shuffles that whole list with `cal.py`'s own swap loop
  (`j = randint(0, len - 1)` for each `i`) once per k in 1, 3, 5, 7, 9, in that order, the generator
  running on from one k to the next. For each k, an item (keyed on id + query + sorted responses, as
  `cal.py` keys it) takes the first k of its calls in shuffled order and is `agree`/`reject`/`doesntMatch`
  by strict majority of them, else `other`.
- `all-calls`: every call of the item, majority-voted (5-5 splits are `other`).
- `decisions`: one decision per item (MC mode, or a user's `{"id", "pred"}` file).
- `lmms-eval`: lmms-eval 0.7.3's `vl_rewardbench` task on one reply per item (`eval.vl_rewardbench`'s
  `lmms_eval_score`): its answer-number rule, its categories and its macro average; every item is in its
  denominator (a number other than the preferred one, e.g. 3, is wrong; an unreadable reply is a coin flip).

Whatever the reading, group accuracy = agree / (agree + reject) over the group's items, overall = the sum
of agree over the sum of decided items of the three groups, macro = the mean of the group accuracies;
items that are `doesntMatch` or `other` leave the denominators, as in `cal.py`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from eval.bootstrap import BOOTSTRAP_RESAMPLES, RatioSet, bootstrap_intervals, interval_keys

__all__ = [
    "CALPY_KS",
    "CALPY_SEED",
    "READINGS",
    "Unit",
    "calpy_units",
    "default_headline_k",
    "majority",
    "unit_metrics",
]

CALPY_SEED = 1234
CALPY_KS = (1, 3, 5, 7, 9)
READINGS = ("cal.py", "all-calls", "lmms-eval")
GROUPS = ("general", "hallucination", "reasoning")


@dataclass
class Unit:
    """One scored item: its group and source, and its outcome (`agree`, `reject`, `doesntMatch`, `other`)."""

    group: str
    source: str
    outcome: str


def majority(outcomes: Sequence[str]) -> str:
    """`cal.py`'s classification: the outcome with more than half of the calls, else `other`.

    >>> majority(["agree", "agree", "reject"]), majority(["agree", "reject"])
    ('agree', 'other')
    """
    half = len(outcomes) / 2
    for outcome in ("agree", "reject", "doesntMatch"):
        if outcomes.count(outcome) > half:
            return outcome
    return "other"


def default_headline_k(calls_per_item: int) -> int:
    """The largest k of `cal.py`'s list that the run's calls cover (9 for the official 10 calls).

    >>> default_headline_k(10), default_headline_k(3), default_headline_k(1)
    (9, 3, 1)
    """
    fitting = [k for k in CALPY_KS if k <= calls_per_item]
    if not fitting:
        raise ValueError("the cal.py reading needs at least one call per item")
    return fitting[-1]


def _calpy_shuffle(lines: list, rng: random.Random) -> list:
    # cal.py's `shuffle_data`: a swap with a uniformly drawn position for every index, in place.
    for i in range(len(lines)):
        j = rng.randint(0, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
    return lines


def calpy_units(calls: Sequence[tuple[str, str, str, str]], ks: Sequence[int] = CALPY_KS) -> dict[int, list[Unit]]:
    """`{k: units}` for each k of `cal.py`'s list, from `(key, group, source, outcome)` per call in
    inference order. The shuffles run for every k in `CALPY_KS` (each draws from the generator), so k = 9
    gets the same calls it gets in `cal.py` whichever ks are asked for."""
    rng = random.Random(CALPY_SEED)
    out: dict[int, list[Unit]] = {}
    for k in CALPY_KS:
        lines = _calpy_shuffle(list(calls), rng)
        taken: dict[str, list[str]] = {}
        meta: dict[str, tuple[str, str]] = {}
        for key, group, source, outcome in lines:
            chosen = taken.setdefault(key, [])
            meta.setdefault(key, (group, source))
            if len(chosen) < k:
                chosen.append(outcome)
        if k in ks:
            out[k] = [Unit(*meta[key], majority(chosen)) for key, chosen in taken.items()]
    return out


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
