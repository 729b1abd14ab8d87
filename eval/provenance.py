"""Which data a number came from: a content hash over the rows read, and the hub revision.

Two copies of a benchmark that differ in one row (the hub's VL-RewardBench before and after May 2025, the
GitHub `data/data.jsonl`) give different `data_sha256`, so runs on them can be told apart from
`metrics.json` alone. The hash covers each row as read (every field, in a canonical JSON form; binary
values such as Parquet image bytes by their SHA-256) and, for images given as file paths, the file's bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["data_provenance", "file_sha256", "provenance_of", "row_sha256", "with_image_file"]


def _jsonable(value: Any) -> Any:
    """Bytes by their hash; numpy values as plain Python (what `datasets` may hand back)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot hash a value of type {type(value).__name__}")


def row_sha256(row: Mapping[str, Any]) -> str:
    """SHA-256 of one row in canonical JSON (sorted keys, UTF-8, no whitespace).

    >>> row_sha256({"b": 1, "a": [1, 2]}) == row_sha256({"a": [1, 2], "b": 1})
    True
    """
    text = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_jsonable)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def with_image_file(row_hash: str, image: Any) -> str:
    """A row's hash extended by its image file's bytes when the image is a path on disk."""
    if isinstance(image, str) and not image.startswith("data:") and Path(image).is_file():
        return hashlib.sha256(f"{row_hash}:{file_sha256(image)}".encode()).hexdigest()
    return row_hash


def data_provenance(
    row_hashes: Sequence[str], *, source: str, revision: str | None = None, skipped: int = 0
) -> dict[str, Any]:
    """The `metrics.json` keys that say which data was scored: `data_sha256` over the rows' hashes in file
    order, `data_rows`, `data_source`, `data_revision` (the hub commit, None for local files) and
    `data_skipped_rows` (bad rows left out under `--max-bad-fraction`; they are not in `data_rows`)."""
    digest = hashlib.sha256("\n".join(row_hashes).encode("ascii")).hexdigest()
    return {
        "data_sha256": digest,
        "data_rows": len(row_hashes),
        "data_source": source,
        "data_revision": revision,
        "data_skipped_rows": skipped,
    }


def provenance_of(
    items: Iterable[Any], *, source: str, revision: str | None = None, skipped: int = 0
) -> dict[str, Any]:
    """`data_provenance` from items that carry their `row_sha256` in `extra`."""
    hashes = [item.extra["row_sha256"] for item in items]
    return data_provenance(hashes, source=source, revision=revision, skipped=skipped)
