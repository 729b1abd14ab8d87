"""The readings of a VL-RewardBench run: named functions that turn prediction rows into metrics.

One run can be read more than one way, and the published numbers differ by reading, so each reading is a
function of one signature (`Reading`), registered under the name `--reading` takes (`@reading("cal.py")`),
and `score` looks it up by that name. The readings:

- `cal.py` (the default for official-mode runs): exactly what VL-RewardBench's `cal.py` does with an
  inference file. The calls of every item, in inference order (item by item, k calls each), form one list;
  a `random.Random` seeded with 1234 shuffles that whole list with `cal.py`'s own swap loop
  (`j = randint(0, len - 1)` for each `i`) once per k in 1, 3, 5, 7, 9, in that order, the generator
  running on from one k to the next. For each k, an item (keyed on id + query + sorted responses, as
  `cal.py` keys it) takes the first k of its calls in shuffled order and is `agree`/`reject`/`doesntMatch`
  by strict majority of them, else `other` (`eval.vl_rewardbench.calpy`).
- `all-calls`: every call of the item, majority-voted (5-5 splits are `other`).
- `decisions`: one decision per item (MC mode, or a user's `{"id", "pred"}` file). Not a name to choose: the
  two readings of calls fall back on it, and report it, when the rows carry no calls.
- `lmms-eval`: lmms-eval 0.7.3's `vl_rewardbench` task on one reply per item
  (`eval.vl_rewardbench.lmms_eval_reading`): its answer-number rule, its categories and its macro average;
  every item is in its denominator (a number other than the preferred one, e.g. 3, is wrong; an unreadable
  reply is a coin flip).

Whatever the reading, the accuracies are `eval.vl_rewardbench.accuracy`'s; undecided items leave the
denominators, as in `cal.py`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eval.bootstrap import BOOTSTRAP_RESAMPLES
from eval.pairwise import PairItem, consistency_metrics
from eval.vl_rewardbench.accuracy import Unit, unit_metrics
from eval.vl_rewardbench.calpy import CALPY_KS, calpy_units, default_headline_k
from eval.vl_rewardbench.data import SOURCES, match_predictions
from eval.vl_rewardbench.official import item_outcome
from jobs.jsonl import InputError

__all__ = [
    "READINGS",
    "Reading",
    "ReadingOptions",
    "Rows",
    "all_calls_reading",
    "calpy_reading",
    "decisions_reading",
    "reading",
    "reading_metrics",
    "reading_named",
]

Rows = Sequence[Mapping[str, Any]]
"""A run's prediction rows, as `predictions.jsonl` holds them."""
Pairs = Sequence[tuple[PairItem, Mapping[str, Any]]]


@dataclass(frozen=True)
class ReadingOptions:
    """What a reading is told besides the rows; a reading reads what concerns it."""

    headline_k: int | None = None
    """The cal.py reading's k (None: the largest of 1, 3, 5, 7, 9 that the calls cover)."""
    seed: int = 0
    """Seeds the bootstrap intervals, and any draw the reading makes (lmms-eval's coin)."""
    resamples: int = BOOTSTRAP_RESAMPLES
    """Bootstrap resamples (0: no intervals)."""


Reading = Callable[[Sequence[PairItem], Rows, ReadingOptions], dict[str, Any]]
"""A reading: the run's prediction rows, paired with the data's items, read into metrics."""


READINGS: dict[str, Reading] = {}
"""Every reading by the name `--reading` and `score(reading=…)` take, in the order they registered."""


def reading(name: str) -> Callable[[Reading], Reading]:
    """Register the decorated function as the reading called `name`."""

    def register(read: Reading) -> Reading:
        READINGS[name] = read
        return read

    return register


def reading_named(name: str) -> Reading:
    """The reading called `name`; an unknown name is the user's error, answered with the names there are."""
    if name not in READINGS:
        raise InputError(f"reading {name!r}: choose one of {', '.join(READINGS)}")
    return READINGS[name]


def reading_metrics(
    name: str,
    n: int,
    units: Sequence[Unit],
    keys: Mapping[str, Any],
    options: ReadingOptions,
    *,
    flags: Mapping[str, Sequence[bool | None]] | None = None,
) -> dict[str, Any]:
    """A reading's metrics in `metrics.json`'s order: the reading's `name` and the rows read (`n`), the
    accuracies of its `units` over every source, the reading's own `keys`, then order consistency where
    `flags` (per group, each row's `consistent`) hold any."""
    metrics: dict[str, Any] = {"reading": name, "n": n}
    metrics.update(unit_metrics(units, tuple(SOURCES), seed=options.seed, resamples=options.resamples))
    metrics.update(keys)
    metrics.update(consistency_metrics(flags or {}))
    return metrics


# -- official-mode calls -----------------------------------------------------------------------------------


@reading("cal.py")
def calpy_reading(items: Sequence[PairItem], predictions: Rows, options: ReadingOptions) -> dict[str, Any]:
    """`cal.py`'s reading at `options.headline_k` (default: the largest of 1, 3, 5, 7, 9 that the calls
    cover), with `overall|macro_accuracy_k{k}` for every k the calls cover; rows without calls are read as
    `decisions`."""
    pairs = match_predictions(items, predictions)
    if not _with_calls(pairs):
        return decisions_reading(pairs, options)
    calls = _calls_per_item(pairs)
    k = options.headline_k or default_headline_k(calls)
    if k not in CALPY_KS or k > calls:
        raise InputError(f"headline k={k}: cal.py reports k in {CALPY_KS}; this run has {calls} calls per item")
    flat = [
        (item.extra.get("calpy_key", item.id), item.group, item.source, outcome)
        for item, p in pairs
        for outcome in _call_outcomes(p)
    ]
    by_k = calpy_units(flat, [x for x in CALPY_KS if x <= calls])
    keys: dict[str, Any] = {}
    for x, units in by_k.items():
        m = unit_metrics(units, tuple(SOURCES), resamples=0)
        keys[f"overall_accuracy_k{x}"], keys[f"macro_accuracy_k{x}"] = m["overall_accuracy"], m["macro_accuracy"]
    keys["headline_k"] = k
    return _calls_metrics("cal.py", pairs, by_k[k], keys, options)


@reading("all-calls")
def all_calls_reading(items: Sequence[PairItem], predictions: Rows, options: ReadingOptions) -> dict[str, Any]:
    """Each item decided by the majority of all its calls (`headline_k` is the calls per item, whatever was
    asked); rows without calls are read as `decisions`."""
    pairs = match_predictions(items, predictions)
    if not _with_calls(pairs):
        return decisions_reading(pairs, options)
    keys = {"headline_k": _calls_per_item(pairs)}
    return _calls_metrics("all-calls", pairs, _all_calls_units(pairs), keys, options)


def _with_calls(pairs: Pairs) -> bool:
    return bool(pairs) and all(isinstance(p.get("calls"), list) and p["calls"] for _, p in pairs)


def _calls_per_item(pairs: Pairs) -> int:
    return min(len(p["calls"]) for _, p in pairs)


def _call_outcomes(row: Mapping[str, Any]) -> list[str]:
    """A row's per-call outcomes, with a model-based reading (`llm_outcome`) where the regex failed."""
    return [c.get("llm_outcome") or c["outcome"] for c in row["calls"]]


def _all_calls_units(pairs: Pairs) -> list[Unit]:
    return [Unit(item.group, item.source, item_outcome(_call_outcomes(p))) for item, p in pairs]


def _calls_metrics(
    name: str, pairs: Pairs, units: Sequence[Unit], keys: dict[str, Any], options: ReadingOptions
) -> dict[str, Any]:
    """The metrics of a reading of calls: its own keys, then what every reading of calls reports beside them
    (the all-calls figures, `calls_per_item`, the calls a model read: `llm_parsed_calls`)."""
    all_calls = unit_metrics(_all_calls_units(pairs), (), resamples=0)
    keys["all_calls_overall_accuracy"] = all_calls["overall_accuracy"]
    keys["all_calls_macro_accuracy"] = all_calls["macro_accuracy"]
    keys["calls_per_item"] = _calls_per_item(pairs)
    keys["llm_parsed_calls"] = sum(bool(c.get("llm_outcome")) for _, p in pairs for c in p["calls"])
    return reading_metrics(name, len(pairs), units, keys, options, flags=_order_flags(pairs))


# -- one decision per item ---------------------------------------------------------------------------------


def decisions_reading(pairs: Pairs, options: ReadingOptions) -> dict[str, Any]:
    """Rows read by their `pred` (index of the response judged better, or None: undecided; a row whose
    `status` is `other` had no majority)."""
    units = []
    for item, p in pairs:
        pred = p.get("pred")
        if pred is not None and pred not in (0, 1):
            raise InputError(f"prediction for {item.id}: field 'pred' must be 0, 1 or null, got {pred!r}")
        outcome = "doesntMatch" if pred is None else ("agree" if pred == item.preferred else "reject")
        units.append(Unit(item.group, item.source, "other" if p.get("status") == "other" else outcome))
    return reading_metrics("decisions", len(pairs), units, {}, options, flags=_order_flags(pairs))


def _order_flags(pairs: Pairs) -> dict[str, list[bool | None]]:
    """Per group, the `consistent` flag of each row that has one (mc mode judged both display orders)."""
    flags: dict[str, list[bool | None]] = defaultdict(list)
    for item, p in pairs:
        if "consistent" in p:
            flags[item.group].append(p["consistent"])
    return flags
