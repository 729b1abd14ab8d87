"""Ordinary SFT data (JSONL, Parquet, LLaVA JSON, `datasets` folders, hub ids) → `SFTRecord`s.

Synthesis starts from plain supervised examples; this module is the one way in, so every later stage sees a
single shape and every bad row is reported here, with its line and the fix. A LLaVA-style input row

    {"id": "000000033471", "image": "coco/train2017/000000033471.jpg",
     "conversations": [{"from": "human", "value": "<image>\\nWhat are the colors of the bus in the image?"},
                       {"from": "gpt", "value": "The bus in the image is white and red."},
                       {"from": "human", "value": "What feature can be seen on the back of the bus?"},
                       {"from": "gpt", "value": "The back of the bus features an advertisement."}]}

becomes one record per (human, gpt) turn, sharing the conversation's group (`records.group_of`) and image:

    {"id": "000000033471#t0", "image": "/data/llava/coco/train2017/000000033471.jpg",
     "question": "What are the colors of the bus in the image?", "answer": "The bus in the image is white and red.",
     "source": "llava_v1_5_mix665k"}
    {"id": "000000033471#t1", "image": "/data/llava/coco/train2017/000000033471.jpg",
     "question": "What feature can be seen on the back of the bus?", ...}

Flat rows (JSONL, Parquet, `datasets`) are read through a `FieldMap`. In-memory images (a `datasets` Image
feature, PIL, bytes, `{"bytes", "path"}`) are written once as PNG under `out_dir/images/`; image paths are
checked and referenced where they lie, so big image folders are never copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from data_synthesis.records import SFTRecord
from judge.images import ImageLoadError, load_image
from judge.jsonl import InputError, read_jsonl, write_jsonl_atomic
from judge.types import DataError

__all__ = ["FieldMap", "load_sft_records", "write_records"]

DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("id",),  # when absent, ids are derived as "<source-name>-<row index>"
    "image": ("image", "images", "image_path", "img"),
    "question": ("question", "query", "prompt", "instruction"),
    "answer": ("answer", "response", "output", "gt_answer"),
}
_WHAT = {"id": "a unique id", "image": "the image", "question": "the question", "answer": "the reference answer"}
MAX_ERRORS = 20  # write_records reports this many bad rows at once, so a file is fixed in one pass
_IMAGE_TOKEN = re.compile(r"\n?<image>\n?")
_HUMAN, _GPT = {"human", "user"}, {"gpt", "assistant"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # "owner/name", or a bare canonical name


@dataclass
class FieldMap:
    """Column names in the source; `None` takes the first of `DEFAULT_COLUMNS[field]` present in the row."""

    id: str | None = None
    """`None` → the row's `id` if it has one, else `"<source-name>-<row index>"`."""
    image: str | None = None
    """`None` → first of image/images/image_path/img; a row with none of them is text-only."""
    question: str | None = None
    answer: str | None = None

    def column(self, field: str, row: Mapping[str, Any]) -> str | None:
        explicit = getattr(self, field)
        return explicit if explicit is not None else next((c for c in DEFAULT_COLUMNS[field] if c in row), None)


@dataclass
class _Source:
    """An opened source: its default name, where its relative image paths start, and `(where, index, row)`s."""

    name: str
    base_dir: Path
    rows: Iterator[tuple[str, int, Any]]


def _open(source: str | Path, split: str) -> _Source:
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if path.is_file():
        if suffix == ".jsonl":
            rows = ((f"{source} line {n}", i, row) for i, (n, row) in enumerate(read_jsonl(path)))
        elif suffix in (".json", ".parquet"):
            data = _json_list(path, str(source)) if suffix == ".json" else _parquet_rows(path)
            kind = "item" if suffix == ".json" else "row"
            rows = ((f"{source} {kind} {i}", i, row) for i, row in enumerate(data))
        else:
            raise InputError(
                f"{source}: unsupported file type {suffix!r} — use .jsonl, .json (LLaVA) or .parquet, "
                "or pass a folder of data files (read with datasets.load_dataset)"
            )
        return _Source(path.stem, path.parent, rows)
    import datasets  # heavy; only the folder and hub paths need it

    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            if split not in dataset:
                raise DataError(
                    "split", f"{split!r} not in this DatasetDict", f"pick one of {list(dataset)}", str(source)
                )
            dataset = dataset[split]
    elif path.exists() or (_HUB_ID.match(str(source)) and suffix not in (".jsonl", ".json", ".parquet", ".csv")):
        try:
            dataset = datasets.load_dataset(str(source), split=split)
        except (FileNotFoundError, ConnectionError) as exc:
            raise InputError(f"{source}: cannot load split {split!r} ({exc}) — check the hub id or local path") from exc
    else:
        raise InputError(
            f"{source}: no such file or folder, and not a hub dataset id (owner/name) — check the path; "
            "sources are .jsonl, .json, .parquet, a save_to_disk folder, a data folder or a hub id"
        )
    name = path.name if path.exists() else str(source)
    rows = ((f"{name}[{split}] row {i}", i, row) for i, row in enumerate(dataset))
    return _Source(name, path if path.is_dir() else Path.cwd(), rows)


def _json_list(path: Path, label: str) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}) — fix the file") from exc
    if not isinstance(data, list):
        raise InputError(f"{label}: expected a JSON list of objects, got {type(data).__name__} — use LLaVA style")
    return data


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):  # streamed: big files never load whole
        yield from batch.to_pylist()


def _safe_name(record_id: str) -> str:
    """A file name for an id (which may hold `/` or `#`): readable, deterministic, collision-free."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", record_id).strip("._")[:80] or "record"
    return slug if slug == record_id else f"{slug}-{hashlib.sha1(record_id.encode()).hexdigest()[:8]}"


class _ImageStore:
    """Turns a row's image into a reference that `out_dir/records.jsonl` can resolve."""

    def __init__(self, out_dir: str | Path, base_dir: Path) -> None:
        self.out_dir = Path(out_dir).resolve()
        self.base_dir = base_dir

    def store(self, value: Any, record_id: str) -> str:
        if isinstance(value, Mapping) and not value.get("bytes") and value.get("path"):
            value = value["path"]
        if isinstance(value, (str, os.PathLike)) and not str(value).startswith("data:"):
            path = Path(value).expanduser()
            path = (path if path.is_absolute() else self.base_dir / path).resolve()
            load_image(str(path))  # raises ImageLoadError naming the path
            return path.relative_to(self.out_dir).as_posix() if path.is_relative_to(self.out_dir) else str(path)
        image = load_image(value)
        target = self.out_dir / "images" / f"{_safe_name(record_id)}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".tmp")  # a crash never leaves a torn PNG behind
        image.save(partial, format="PNG")
        os.replace(partial, target)
        return target.relative_to(self.out_dir).as_posix()


def _missing(field: str, fields: FieldMap, row: Mapping[str, Any], where: str) -> DataError:
    column = getattr(fields, field)
    problem = "missing" if column is None else f"column {column!r} not in the row"
    fix = f"set --{field}-field to the column that holds {_WHAT[field]} (columns here: {list(row)})"
    return DataError(field, problem, fix, where)


def _text(value: Any, field: str, where: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # numeric answers (counts, years) are common in VQA data
    if not isinstance(value, str) or not _IMAGE_TOKEN.sub("", value).strip():
        raise DataError(field, f"expected non-empty text, got {value!r:.80}", f"put {_WHAT[field]} here", where)
    return _IMAGE_TOKEN.sub("", value).strip() if field == "question" else value


def _field_text(row: Mapping[str, Any], field: str, fields: FieldMap, where: str) -> str:
    column = fields.column(field, row)
    if column is None or column not in row:
        raise _missing(field, fields, row, where)
    return _text(row[column], field, where)


def _turns(conversation: Any, where: str) -> list[tuple[str, str]]:
    """(human, gpt) pairs of a LLaVA conversation; system turns are skipped."""
    if not isinstance(conversation, list):
        raise DataError("conversations", "expected a list of turns", 'use [{"from": "human", "value": ...}]', where)
    pairs: list[tuple[str, str]] = []
    pending: str | None = None
    for number, turn in enumerate(conversation):
        speaker = turn.get("from") if isinstance(turn, Mapping) else None
        turn_where = f"{where} turn {number}"
        if speaker in _HUMAN and pending is None:
            pending = _text(turn.get("value"), "question", turn_where)
        elif speaker in _GPT and pending is not None:
            pairs.append((pending, _text(turn.get("value"), "answer", turn_where)))
            pending = None
        elif speaker != "system":
            problem = f"expected a {'human' if pending is None else 'gpt'} turn, got {speaker!r}"
            raise DataError("conversations", problem, "alternate human and gpt turns", turn_where)
    if pending is not None or not pairs:
        raise DataError("conversations", "the last human turn has no answer", "end with a gpt turn", where)
    return pairs


def _row_records(
    row: Any, index: int, where: str, fields: FieldMap, name: str, store: _ImageStore, seen: set[str]
) -> list[SFTRecord]:
    if not isinstance(row, Mapping):
        raise DataError("<row>", f"expected an object, got {type(row).__name__}", "write one object per row", where)
    id_column = fields.column("id", row)
    if id_column is None:
        record_id = f"{name}-{index}"
    elif id_column not in row:
        raise _missing("id", fields, row, where)
    else:
        record_id = row[id_column]
        if isinstance(record_id, bool) or not isinstance(record_id, (str, int)) or record_id == "":
            raise DataError("id", f"expected a string or integer, got {record_id!r:.80}", "give each row an id", where)
        record_id = str(record_id)
    if record_id in seen:
        raise DataError("id", f"duplicate id {record_id!r}", "give each row a unique id, or set --id-field", where)
    seen.add(record_id)

    if "conversations" in row and fields.question is None:
        pairs = _turns(row["conversations"], where)
    else:
        question, answer = (_field_text(row, field, fields, where) for field in ("question", "answer"))
        pairs = [(question, answer)]
    ids = [record_id] if len(pairs) == 1 else [f"{record_id}#t{turn}" for turn in range(len(pairs))]
    image = _image(row, fields, record_id, where, store)
    return [SFTRecord(id=i, image=image, question=q, answer=a, source=name) for i, (q, a) in zip(ids, pairs)]


def _image(row: Mapping[str, Any], fields: FieldMap, record_id: str, where: str, store: _ImageStore) -> str | None:
    column = fields.column("image", row)
    if column is None:
        return None  # no image column at all: a text-only record
    if column not in row:
        raise _missing("image", fields, row, where)
    value = row[column]
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise DataError("image", f"record {record_id!r} has {len(value)} images", "keep one per record", where)
        value = value[0]
    if value is None or value == "":
        # A present-but-empty image is more likely lost than intended, so it is never silently text-only.
        fix = "give the row its image, or drop the image column for text-only data"
        raise DataError("image", f"record {record_id!r}: column {column!r} is empty", fix, where)
    try:
        return store.store(value, record_id)
    except ImageLoadError as exc:
        fix = f"fix the path (relative paths are resolved against {store.base_dir}; or pass image_root=...)"
        raise DataError("image", f"record {record_id!r}: {exc}", fix, where) from exc


def _records(
    source: str | Path,
    out_dir: str | Path,
    *,
    split: str = "train",
    fields: FieldMap | None = None,
    limit: int | None = None,
    source_name: str | None = None,
    image_root: str | Path | None = None,
    errors: list[str] | None = None,
) -> Iterator[SFTRecord]:
    """The records of `source`; a bad row raises, or is appended to `errors` (up to `MAX_ERRORS`) when given."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    opened = _open(source, split)
    name = source_name or opened.name
    store = _ImageStore(out_dir, Path(image_root).expanduser() if image_root else opened.base_dir)
    seen: set[str] = set()
    for where, index, row in islice(opened.rows, limit):
        try:
            records = _row_records(row, index, where, fields or FieldMap(), name, store, seen)
        except DataError as exc:
            if errors is None:
                raise
            errors.append(str(exc))
            if len(errors) >= MAX_ERRORS:
                errors.append(f"... stopped after {MAX_ERRORS} errors")
                return
            continue
        yield from records


def load_sft_records(
    source: str | Path,
    *,
    out_dir: str | Path,
    split: str = "train",
    fields: FieldMap | None = None,
    limit: int | None = None,
    source_name: str | None = None,
    image_root: str | Path | None = None,
) -> Iterator[SFTRecord]:
    """Yield SFT records from any supported source, raising `DataError` at the first bad row.

    Args:
        source: a `.jsonl`/`.parquet`/`.json` (LLaVA) file, a `save_to_disk` folder, a folder of data
            files, or a hub id (the last two go through `datasets.load_dataset`).
        out_dir: where `records.jsonl` will live; in-memory images are written to `out_dir/images/` and
            image paths are made relative to it when inside it.
        split: the split of a DatasetDict or of `load_dataset`.
        fields: the source's column names (defaults cover the common spellings).
        limit: read at most this many source rows (a LLaVA conversation is one row; its turns stay together).
        source_name: the records' `source` and the prefix of derived ids (default: file or dataset name).
        image_root: where relative image paths are resolved (default: the source's folder).
    """
    yield from _records(
        source, out_dir, split=split, fields=fields, limit=limit, source_name=source_name, image_root=image_root
    )


def write_records(source: str | Path, out_dir: str | Path, **kwargs: Any) -> tuple[Path, int]:
    """Normalise `source` into `out_dir/records.jsonl` (atomically); return `(path, record count)`.

    Takes `load_sft_records`' keyword arguments. Every bad row (up to `MAX_ERRORS`) is reported in one
    `InputError`, and then nothing is written.
    """
    errors: list[str] = []
    rows = [record.to_dict() for record in _records(source, out_dir, errors=errors, **kwargs)]
    if errors:
        raise InputError(f"{len(errors)} problem(s) in {source}:\n" + "\n".join(errors))
    path = Path(out_dir) / "records.jsonl"
    write_jsonl_atomic(path, rows)
    return path, len(rows)
