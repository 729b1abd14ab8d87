"""Plain lists of decisions (what an `evaluate` metric module gets: ids, predictions, references) made into the
items and prediction rows a benchmark's `score` reads, one rule for both pairwise benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eval.pairwise import PairItem

__all__ = ["decision_item", "decision_rows"]


def decision_item(item_id: str, preferred: int, group: str, source: str, **extra: Any) -> PairItem:
    """An item known only by its id, preferred response, group and source: no query, responses or image."""
    return PairItem(
        id=item_id,
        query="",
        responses=["", ""],
        image=None,
        preferred=preferred,
        group=group,
        source=source,
        extra=extra,
    )


def decision_rows(ids: Sequence[str], predictions: Sequence[int | None]) -> list[dict[str, Any]]:
    """`{"id", "pred"}` rows; a prediction of None or a negative number (`evaluate`'s -1) is unparsed.

    >>> decision_rows(["a", "b", "c"], [1, -1, None])
    [{'id': 'a', 'pred': 1}, {'id': 'b', 'pred': None}, {'id': 'c', 'pred': None}]
    """
    return [{"id": str(i), "pred": None if p is None or p < 0 else int(p)} for i, p in zip(ids, predictions)]
