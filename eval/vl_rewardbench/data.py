"""VL-RewardBench's rows as items: either published form of the data, each row's group, and predictions paired
back with their rows.

The hub Parquet and the GitHub `data.jsonl` differ in how they carry the image, and the GitHub copy repeats 18
ids with other responses: every row is kept, under an id of its own, so the scorers never merge two rows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from eval.common import require_every_row
from eval.pairwise import PairItem, PairItems, image_checked
from eval.provenance import provenance_of, row_sha256, with_image_file
from jobs.jsonl import InputError, parse_records, read_jsonl_rows
from judge.types import DataError, require_object

__all__ = [
    "GROUPS",
    "HUB_ID",
    "IMAGE_TAG",
    "SOURCES",
    "calpy_key",
    "group_of_source",
    "item_from_row",
    "load_vl_rewardbench",
    "match_predictions",
    "source_of_id",
    "unique_ids",
]

HUB_ID = "MMInstruction/VL-RewardBench"
GROUPS = ("general", "hallucination", "reasoning")
SOURCES = {
    "povid": "hallucination",
    "rlaif_v": "hallucination",
    "rlhf_v": "hallucination",
    "mathverse": "reasoning",
    "mmmu": "reasoning",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""Each source (dataset of origin) and the group it is reported under."""

IMAGE_TAG = "<image>\n"
"""`inference_hf.py` removes this from the prompt before sending it (448 POVID queries carry it)."""


# -- groups ------------------------------------------------------------------------------------------------


def source_of_id(item_id: str) -> str:
    """The source an id belongs to, from its prefix up to the first `_` or `-`.

    >>> [source_of_id(i) for i in ("hallucination_pair-12", "RLAIF-V-3", "mmmu_9", "wildvision-battle_1", "x1")]
    ['povid', 'rlaif_v', 'mmmu', 'wildvision', 'vlfeedback']
    """
    prefix = re.split(r"[_-]", item_id, maxsplit=1)[0]
    return {
        "hallucination": "povid",
        "povid": "povid",
        "RLAIF": "rlaif_v",
        "RLHF": "rlhf_v",
        "mathverse": "mathverse",
        "mmmu": "mmmu",
        "wildvision": "wildvision",
    }.get(prefix, "vlfeedback")


def group_of_source(source: str) -> str:
    return SOURCES[source]


# -- rows --------------------------------------------------------------------------------------------------


def calpy_key(item_id: str, query: str, responses: Sequence[str]) -> str:
    """The key `cal.py` groups calls by: id + query (as in the data) + the responses sorted, tab-joined."""
    return item_id + query + "\t".join(sorted(responses))


def item_from_row(row: Any, where: str) -> PairItem:
    """One row as an item, or `DataError` naming the field; the image is not opened here (`image_checked` does
    that for a run, the viewer shows a missing one as a placeholder)."""
    require_object(row, "write one JSON object per line", where, field_name="row")
    for name in ("id", "query", "response", "human_ranking"):
        if row.get(name) is None:
            raise DataError(name, "missing", f"every VL-RewardBench row needs '{name}'", where)
    image = row.get("image") if row.get("image") is not None else row.get("image_path")
    if image is None:
        raise DataError(
            "image",
            "missing",
            "give 'image' (the hub/Parquet form: bytes or a path) or 'image_path' (the GitHub data.jsonl form)",
            where,
        )
    responses, ranking = list(row["response"]), [int(r) for r in row["human_ranking"]]
    if len(responses) != 2 or not all(isinstance(r, str) for r in responses):
        raise DataError("response", f"expected 2 strings, got {len(responses)} items", "give two responses", where)
    if sorted(ranking) != [0, 1]:
        raise DataError(
            "human_ranking", f"expected ranks [0, 1] in some order, got {ranking}", "rank 0 marks the preferred", where
        )
    item_id, query = str(row["id"]), str(row["query"])
    source = source_of_id(item_id)
    return PairItem(
        id=item_id,
        query=query.replace(IMAGE_TAG, ""),
        responses=responses,
        image=image,
        preferred=ranking.index(0),
        group=group_of_source(source),
        source=source,
        extra={
            "human_ranking": ranking,
            "id": item_id,
            "calpy_key": calpy_key(item_id, query, responses),
            "row_sha256": row_sha256(row),
        },
    )


def unique_ids(items: Sequence[PairItem]) -> None:
    """Give each row its own id for predictions and resume: a repeated id's later rows become `id#2`, `id#3`…"""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.id] = seen.get(item.id, 0) + 1
        if seen[item.id] > 1:
            item.id = f"{item.id}#{seen[item.id]}"


def load_vl_rewardbench(
    data: str | Path,
    *,
    limit: int | None = None,
    split: str = "test",
    revision: str | None = None,
    image_folder: str | Path | None = None,
    max_bad_fraction: float = 0.0,
) -> PairItems:
    """Items from a local `.jsonl`/`.json`/`.parquet` file, or from the hub id `MMInstruction/VL-RewardBench`.

    Both published forms load: the hub's Parquet (`image` as bytes) and the GitHub `data/data.jsonl`
    (`image_path` relative to the file's folder, or to `image_folder`; 18 ids appear twice there with other
    responses). Every row is kept; a repeated id's later rows get `#2`, `#3`… in `item.id` (the original id
    stays in `extra["id"]`). `"<image>\\n"` is removed from queries, as `inference_hf.py` does. The result's
    `provenance` holds `data_sha256` over the rows used, and the hub commit for hub data. Every bad row (a
    missing field, an image file not there) is reported; with `max_bad_fraction` > 0 those up to that share
    of the (first `limit`) rows are left out instead, listed in the result's `skipped` and counted in
    `data_skipped_rows` (`jobs.jsonl.parse_records`).
    """
    path = Path(data)
    hub_revision = None
    if path.suffix in (".jsonl", ".json") and path.is_file():
        rows: Iterable[tuple[str, Any]] = read_jsonl_rows(path)
    elif path.suffix in (".jsonl", ".json"):
        raise InputError(f"--data {data}: file not found")
    else:
        dataset, hub_revision = _dataset_rows(str(data), split, revision)
        rows = ((f"row {i}", row) for i, row in enumerate(dataset))
    parse = image_checked(item_from_row, path, image_folder) if path.is_file() else item_from_row
    items = parse_records(
        islice(rows, limit),
        parse,
        path if path.is_file() else data,
        max_bad_fraction=max_bad_fraction,
        unique_ids=False,
    )
    unique_ids(items)
    for item in items:
        item.extra["row_sha256"] = with_image_file(item.extra["row_sha256"], item.image)
    provenance = provenance_of(items, source=str(data), revision=hub_revision, skipped=len(items.skipped))
    return PairItems(items, provenance, items.skipped)


def _dataset_rows(data: str, split: str, revision: str | None) -> tuple[Iterable[dict[str, Any]], str | None]:
    """Rows of a Parquet file or hub dataset through `datasets`, images kept as `{"bytes", "path"}`, and the
    hub commit the rows came from (None for a local file)."""
    import datasets

    if data.endswith(".parquet"):
        if not Path(data).is_file():
            raise InputError(f"--data {data}: file not found")
        dataset, commit = datasets.load_dataset("parquet", data_files=data, split="train"), None
    elif Path(data).is_dir():  # a local copy of the hub repository: no commit to record
        dataset, commit = datasets.load_dataset(data, split=split), None
    else:
        # The builder of a hub dataset is keyed on the commit it resolved (`builder.hash`), so the
        # commit recorded is the one the rows came from, also when read back from the cache offline.
        builder = datasets.load_dataset_builder(data, revision=revision)
        builder.download_and_prepare()
        dataset, commit = builder.as_dataset(split=split), builder.hash
    if "image" in dataset.features and isinstance(dataset.features["image"], datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image(decode=False))
    return dataset, commit


# -- predictions -------------------------------------------------------------------------------------------


def match_predictions(
    items: Sequence[PairItem], predictions: Sequence[Mapping[str, Any]]
) -> list[tuple[PairItem, Mapping[str, Any]]]:
    """Pair each prediction with its row: by the row's own id (`id#2` for a repeated id's second row), or
    by a repeated original id taken in file order (the n-th prediction for `mathverse_3489` is its n-th row).

    Every row needs its prediction: a figure over part of the set, under the hash of all of it, would read
    as the benchmark's (an item the judge could not decide is a prediction too: `pred` -1 or null)."""
    by_uid = {item.id: item for item in items}
    by_original: dict[str, list[PairItem]] = defaultdict(list)
    for item in items:
        by_original[str(item.extra.get("id", item.id))].append(item)
    used: set[str] = set()
    pairs, unknown = [], []
    for p in predictions:
        key = str(p.get("id"))
        item = by_uid.get(key)
        if item is None or item.id in used:
            item = next((i for i in by_original.get(key, []) if i.id not in used), None)
        if item is None:
            unknown.append(key)
            continue
        used.add(item.id)
        pairs.append((item, p))
    if unknown:
        raise InputError(
            f"{len(unknown)} prediction(s) match no row of the data, e.g. {unknown[:3]} (an id not in the file, or "
            "more predictions for an id than it has rows) — score against the same VL-RewardBench file the "
            "predictions were made on"
        )
    require_every_row([item.id for item in items], used)
    return pairs
