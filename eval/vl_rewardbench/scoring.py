"""`score`: a run's metrics by a reading named on the command line, and `score_decisions`, the same from plain
lists (what the `evaluate` metric module gets)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.bootstrap import BOOTSTRAP_RESAMPLES
from eval.decision_lists import decision_item, decision_rows
from eval.pairwise import PairItem
from eval.vl_rewardbench import lmms_eval_reading  # noqa: F401  (imported to register the "lmms-eval" reading)
from eval.vl_rewardbench.data import group_of_source, source_of_id, unique_ids
from eval.vl_rewardbench.readings import ReadingOptions, reading_named

__all__ = ["score", "score_decisions"]


def score(
    items: Sequence[PairItem],
    predictions: Sequence[Mapping[str, Any]],
    *,
    reading: str = "cal.py",
    headline_k: int | None = None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """Metrics of a run: official-mode rows (with `calls`) by `reading` (`cal.py` at `headline_k`, default the
    largest k of 1, 3, 5, 7, 9 the calls cover; or `all-calls`), other rows by their `pred` (index of the
    response judged better, or None); `lmms-eval` reads one reply per item. See `eval.vl_rewardbench.readings`
    for the readings, and the package's docstring for what each key means.
    """
    read = reading_named(reading)
    return read(items, predictions, ReadingOptions(headline_k=headline_k, seed=seed, resamples=resamples))


def score_decisions(ids: Sequence[str], predictions: Sequence[int | None], references: Sequence[int]) -> dict[str, Any]:
    """`score` from plain lists (what the `evaluate` module gets); a prediction of None or -1 is unparsed."""
    items = []
    for i, ref in zip(ids, references):
        source = source_of_id(str(i))
        items.append(decision_item(str(i), int(ref), group_of_source(source), source, id=str(i)))
    unique_ids(items)
    return score(items, decision_rows(ids, predictions))
