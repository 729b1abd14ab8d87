"""What the two pairwise preference benchmarks share: items, the MC-judge mode, and scoring by group.

VL-RewardBench and Multimodal RewardBench both ask "which of these two responses is better?". Their
official protocols differ (prompt, parse, vote, what an unparsed answer counts as) and live in their own
modules; this one holds the parts that are the same: the item, our MC judge over both display orders,
and accuracy per group from one decision per item.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.jsonl import InputError
from judge.images import ImageLoadError, check_decodes
from judge.judging import Judge
from judge.types import DataError, MCItem

__all__ = [
    "GroupCounts",
    "PairItem",
    "PairItems",
    "consistency_metrics",
    "group_accuracies",
    "image_checked",
    "mc_predict",
    "prediction_row",
    "resolve_image_paths",
]


@dataclass
class PairItem:
    """One pairwise question: an image, a query, two responses and the index of the preferred one."""

    id: str
    query: str
    responses: list[str]
    image: Any
    preferred: int
    group: str
    """The benchmark's reporting category (e.g. `hallucination`, `safety/bias`)."""
    source: str = ""
    """A finer origin where the benchmark has one (e.g. `povid`)."""
    extra: dict[str, Any] = field(default_factory=dict)


class PairItems(list):
    """The items of a benchmark file, plus `provenance`: the `metrics.json` keys saying which data it was
    (`data_sha256`, `data_rows`, `data_source`, `data_revision`, `data_skipped_rows`; see `eval.provenance`),
    and `skipped`: the problem of each bad row left out (under `--max-bad-fraction`)."""

    provenance: dict[str, Any]

    def __init__(
        self,
        items: Iterable[PairItem] = (),
        provenance: dict[str, Any] | None = None,
        skipped: Sequence[str] = (),
    ) -> None:
        super().__init__(items)
        self.provenance = provenance or {}
        self.skipped = list(skipped)


@dataclass
class GroupCounts:
    """Decided items per group; `accuracy` is None when nothing in the group was decided."""

    agree: int = 0
    reject: int = 0
    undecided: int = 0

    @property
    def accuracy(self) -> float | None:
        decided = self.agree + self.reject
        return self.agree / decided if decided else None


def group_accuracies(decisions: Iterable[tuple[str, bool | None]]) -> dict[str, GroupCounts]:
    """Count `(group, correct)` pairs; `correct=None` marks an item the judge did not decide.

    >>> counts = group_accuracies([("a", True), ("a", False), ("a", None), ("b", True)])
    >>> counts["a"].accuracy, counts["a"].undecided, counts["b"].accuracy
    (0.5, 1, 1.0)
    """
    counts: dict[str, GroupCounts] = defaultdict(GroupCounts)
    for group, correct in decisions:
        entry = counts[group]
        if correct is None:
            entry.undecided += 1
        elif correct:
            entry.agree += 1
        else:
            entry.reject += 1
    return dict(counts)


_VERDICT_FIELDS = ("votes", "consistent", "probs", "raw", "usage")
"""The verdict's fields an MC-mode prediction row keeps, after `pred`, in this order."""


def mc_predict(judge: Judge, items: Sequence[PairItem]) -> list[dict[str, Any]]:
    """Our MC judge on pairwise items: the two responses as candidates A/B, in both display orders.

    `pred` is the judge's aggregated choice (majority of the orders, ties broken by option probabilities
    and then a seeded coin), an index into the item's `responses`, or None when no order parsed.
    """
    mc_items = [
        MCItem(id=item.id, image=item.image, question=item.query, candidates=list(item.responses)) for item in items
    ]
    return [
        prediction_row(item, pred=verdict.choice, **{name: getattr(verdict, name) for name in _VERDICT_FIELDS})
        for item, verdict in zip(items, judge.select(mc_items))
    ]


def prediction_row(item: PairItem, **fields: Any) -> dict[str, Any]:
    """A `predictions.jsonl` row of either benchmark and mode: the item's keys first, then the mode's `fields`."""
    return {"id": item.id, "group": item.group, "source": item.source, "preferred": item.preferred, **fields}


def image_checked(
    parse: Callable[..., PairItem], data_file: str | Path, image_folder: str | Path | None = None
) -> Callable[..., PairItem]:
    """`parse(row, where=…)` that also makes the item's relative image path absolute (against `image_folder`,
    default the data file's folder) and decodes the file through to its end: a missing or broken image is that
    row's problem, so it counts as a bad row (`jobs.jsonl.parse_records`), and a wrong folder fails before any
    model loads."""
    base = Path(image_folder) if image_folder is not None else Path(data_file).parent
    decoded: set[str] = set()  # a file several rows share is decoded once

    def parse_and_check(row: Any, where: str) -> PairItem:
        item = parse(row, where=where)
        is_path = isinstance(item.image, str) and not item.image.startswith("data:")
        if is_path:
            item.image = str(base / item.image)
        elif not (isinstance(item.image, str) or (isinstance(item.image, Mapping) and item.image.get("bytes"))):
            return item  # a reference `load_image` resolves later (a bare `{"path"}`): nothing to decode here
        key = item.image if isinstance(item.image, str) else None  # a file or data URL several rows share: once
        if key is not None and key in decoded:
            return item
        try:
            check_decodes(item.image)  # to its last byte: a truncated image is this row's problem, found now
        except ImageLoadError as exc:
            fix = (
                f"relative paths are resolved against {base}: give the folder that holds the images as "
                "--image-folder, or fix the path or the file"
                if is_path
                else "replace the row's image"
            )
            raise DataError("image", str(exc), fix, where) from None
        if key is not None:
            decoded.add(key)
        return item

    return parse_and_check


def resolve_image_paths(
    items: Sequence[PairItem], data_file: str | Path, image_folder: str | Path | None = None
) -> None:
    """Make relative image paths absolute (against `image_folder`, default the data file's folder) and
    check that every file exists, so a wrong folder fails before any model loads."""
    base = Path(image_folder) if image_folder is not None else Path(data_file).parent
    missing = []
    for item in items:
        if isinstance(item.image, str) and not item.image.startswith("data:"):
            item.image = str(base / item.image)
            if not Path(item.image).is_file():
                missing.append(f"{item.id}: {item.image}")
    if missing:
        raise InputError(
            f"{len(missing)} image file(s) not found, e.g. {missing[:3]} — field 'image' is resolved against "
            f"{base}; point the image folder option there or fix the paths"
        )


def consistency_metrics(flags: Mapping[str, Sequence[bool | None]]) -> dict[str, object]:
    """Order consistency by one rule: the share of all items whose parsed display orders all agreed; an item
    with fewer than two parsed orders (`None`) counts as not consistent and is counted in
    `consistency_undetermined`."""
    every = [f for values in flags.values() for f in values]
    if not every:
        return {}
    out: dict[str, object] = {
        "consistency": sum(f is True for f in every) / len(every),
        "consistency_undetermined": sum(f is None for f in every),
    }
    out.update({f"consistency_{g}": sum(f is True for f in v) / len(v) for g, v in flags.items() if v})
    return out
