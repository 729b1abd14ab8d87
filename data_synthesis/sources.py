"""Ordinary SFT data (JSONL, Parquet, LLaVA JSON, TRL VLM sets, `datasets` folders, hub ids) → `SFTRecord`s.

Synthesis starts from plain supervised examples; this module is the one way in, so every later stage sees a
single shape. A LLaVA-style input row

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

A row with several images gets a list (`"image": ["…/a.jpg", "…/b.jpg"]`). Row shapes are read in
`source_rows`, images checked and kept as they came in `source_images`.

Real sets have bad rows (a missing file, a truncated JPEG, an empty answer). `write_records` skips them and
lists each in `records.summary.json` under `"skipped"` while they stay at or under `max_bad_fraction` of
the rows read; above it nothing is written and an `InputError` names the fraction and the first
problems (the CLI exits 2). `load_sft_records` is the strict reader: the first bad row raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from data_synthesis.records import SFTRecord
from data_synthesis.source_images import ImageStore
from data_synthesis.source_rows import FieldMap, ParsedRow, parse_row, row_id
from jobs.jsonl import (
    DEFAULT_MAX_BAD_FRACTION,  # the one default of every command that skips bad rows
    InputError,
    UnparsableLine,
    atomic_writer,
    numbered_jsonl,
    read_json_list,
    write_json_atomic,
)
from judge.images import ImageLoadError, default_image_workers
from judge.types import DataError

__all__ = ["DEFAULT_MAX_BAD_FRACTION", "FieldMap", "Skipped", "load_sft_records", "read_source", "write_records"]

SHOWN_PROBLEMS = 10  # how many problems the "too many bad rows" error quotes
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # "owner/name", or a bare canonical name
_FILE_TYPES = (".jsonl", ".json", ".parquet", ".csv")

RECORD_OPTIONS = ("split", "dataset_config", "revision", "limit", "image_root", "source_name", "max_bad_fraction")
"""`write_records`' settings that shape its output, under these names in `SynthConfig`, the flags and the summary."""


def record_options(settings: Any) -> dict[str, Any]:
    """`RECORD_OPTIONS` read from `settings` (a `SynthConfig` or parsed flags)."""
    return {name: getattr(settings, name) for name in RECORD_OPTIONS}


@dataclass
class Skipped:
    """A source row left out, as listed in `records.summary.json`."""

    line: int
    """The JSONL line number; for JSON, Parquet and `datasets` sources the 1-based row number."""
    id: str | None
    """The row's own id when it has a usable one."""
    reason: str
    """The problem and its fix (`field 'image': … — …`)."""
    error: DataError = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "reason": self.reason}


@dataclass
class _Source:
    """An opened source: its default name, where its relative image paths start, and `(where, line, index, row)`s."""

    name: str
    base_dir: Path
    rows: Iterator[tuple[str, int, int, Any]]


def _open(source: str | Path, split: str, dataset_config: str | None, revision: str | None) -> _Source:
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if path.is_file():
        if dataset_config or revision:
            raise ValueError(
                f"{source}: --dataset-config / --revision choose a hub dataset's subset and version; "
                "drop them for a local file"
            )
        if suffix == ".jsonl":
            rows = ((f"{source} line {n}", n, i, row) for i, (n, row) in enumerate(numbered_jsonl(path)))
        elif suffix in (".json", ".parquet"):
            data = _json_list(path, str(source)) if suffix == ".json" else _parquet_rows(path)
            kind = "item" if suffix == ".json" else "row"
            rows = ((f"{source} {kind} {i}", i + 1, i, row) for i, row in enumerate(data))
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
    elif path.exists() or (_HUB_ID.match(str(source)) and suffix not in _FILE_TYPES):
        try:
            dataset = datasets.load_dataset(str(source), name=dataset_config, split=split, revision=revision)
        except (FileNotFoundError, ConnectionError) as exc:
            raise InputError(f"{source}: cannot load split {split!r} ({exc}) — check the hub id or local path") from exc
        except ValueError as exc:  # e.g. an unknown config name: datasets lists the available ones
            raise InputError(f"{source}: {exc}") from exc
    else:
        raise InputError(
            f"{source}: no such file or folder, and not a hub dataset id (owner/name) — check the path; "
            "sources are .jsonl, .json, .parquet, a save_to_disk folder, a data folder or a hub id"
        )
    name = path.name if path.exists() else str(source)
    rows = ((f"{name}[{split}] row {i}", i + 1, i, row) for i, row in enumerate(_undecoded_rows(dataset)))
    return _Source(name, path if path.is_dir() else Path.cwd(), rows)


def _undecoded_rows(dataset: Any) -> Iterator[dict[str, Any]]:
    """The dataset's rows with images as stored (`{"bytes", "path"}`), streamed: no decoding, no re-encoding."""
    for batch in dataset.with_format("arrow").iter(batch_size=256):
        yield from batch.to_pylist()


def _json_list(path: Path, label: str) -> list[Any]:
    """A LLaVA-style JSON file's rows."""
    return read_json_list(
        path, label, "a JSON list of objects", bad_json_hint=" — fix the file", not_list_hint=" — use LLaVA style"
    )


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):  # streamed: big files never load whole
        yield from batch.to_pylist()


def _finish(
    parsed: ParsedRow | Skipped, line: int, where: str, store: ImageStore, name: str
) -> list[SFTRecord] | Skipped:
    """A parsed row's records with its images checked and kept (runs in the worker pool)."""
    if isinstance(parsed, Skipped):
        return parsed
    try:
        refs = store.keep(parsed.images, parsed.id)
    except ImageLoadError as exc:
        fix = f"fix or drop the image (relative paths are resolved against {store.base_dir}; or set --image-root)"
        error = DataError("image", f"record {parsed.id!r}: {exc}", fix, where)
        return Skipped(line, parsed.id, _reason(error, where), error)
    image: Any = None if not refs else refs[0] if len(refs) == 1 else refs
    return [
        SFTRecord(id=record_id, image=image, question=q, answer=a, source=name)
        for record_id, (q, a) in zip(parsed.record_ids, parsed.pairs)
    ]


def _reason(error: DataError, where: str) -> str:
    """The error without the row's own location (kept: a turn or message number inside the row)."""
    inside = error.where[len(where) :].strip() if error.where.startswith(where) else ""
    return (f"{inside}: " if inside else "") + f"field '{error.field_name}': {error.problem} — {error.fix}"


def read_source(
    source: str | Path,
    out_dir: str | Path,
    *,
    split: str = "train",
    fields: FieldMap | None = None,
    limit: int | None = None,
    source_name: str | None = None,
    image_root: str | Path | None = None,
    dataset_config: str | None = None,
    revision: str | None = None,
    image_workers: int | None = None,
) -> Iterator[list[SFTRecord] | Skipped]:
    """Per source row, in order: its records, or why it was skipped (`load_sft_records` and `write_records` read
    sources through it). Images are checked `image_workers` at a time.

    Args:
        source: a `.jsonl`/`.parquet`/`.json` (LLaVA or TRL) file, a `save_to_disk` folder, a folder of data
            files, or a hub id (the last two go through `datasets.load_dataset`).
        out_dir: where `records.jsonl` will live; encoded images that are not files are written to
            `out_dir/images/` as they came, and image paths are made relative to it when inside it.
        split: the split of a DatasetDict or of `load_dataset`.
        fields: the source's column names (defaults cover the common spellings).
        limit: read at most this many source rows (a conversation is one row; its turns stay together).
        source_name: the records' `source` and the prefix of derived ids (default: file or dataset name).
        image_root: where relative image paths are resolved (default: the source's folder).
        dataset_config: `load_dataset`'s config name (a hub dataset's subset).
        revision: `load_dataset`'s revision (a branch, tag or commit of a hub dataset): pin it for reruns.
        image_workers: threads decoding images (default: one per core, at most 16).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    workers = image_workers or default_image_workers()
    if workers < 1:
        raise ValueError(f"image_workers must be >= 1, got {workers}")
    opened = _open(source, split, dataset_config, revision)
    name = source_name or opened.name
    store = ImageStore(out_dir, Path(image_root).expanduser() if image_root else opened.base_dir)
    fields = fields or FieldMap()
    seen: set[str] = set()
    rows = islice(opened.rows, limit)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="images") as pool:
        while chunk := list(islice(rows, 32 * workers)):  # bounded: a huge source never sits in memory whole
            jobs = []
            for where, line, index, row in chunk:
                try:
                    if isinstance(row, UnparsableLine):  # counted as a bad row, like any other
                        raise DataError("<line>", row.problem, "write one JSON object per line", where)
                    parsed: ParsedRow | Skipped = parse_row(row, index, where, fields, name, seen)
                except DataError as exc:
                    parsed = Skipped(line, row_id(row, fields), _reason(exc, where), exc)
                jobs.append((parsed, line, where))
            yield from pool.map(lambda job: _finish(*job, store, name), jobs)


def load_sft_records(source: str | Path, *, out_dir: str | Path, **options: Any) -> Iterator[SFTRecord]:
    """Yield SFT records from any supported source, raising `DataError` at the first bad row; takes
    `read_source`'s keyword arguments."""
    for result in read_source(source, out_dir, **options):
        if isinstance(result, Skipped):
            raise result.error
        yield from result


def write_records(
    source: str | Path, out_dir: str | Path, *, max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION, **kwargs: Any
) -> tuple[Path, dict[str, Any]]:
    """Normalise `source` into `out_dir/records.jsonl` and `records.summary.json`; return `(path, summary)`.

    Takes `read_source`'s keyword arguments. Bad rows are skipped and listed in the summary's
    `"skipped"` (`{"line", "id", "reason"}` each) while their share of the rows read is at most
    `max_bad_fraction`; above it an `InputError` names the share and the first problems, and nothing is
    written. Records stream to a temporary file and are renamed into place at the end, so
    `records.jsonl` is complete or absent.
    """
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise ValueError(f"max_bad_fraction must be in [0, 1], got {max_bad_fraction}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "records.jsonl"
    skipped: list[Skipped] = []
    rows = records = multi_image = text_only = 0
    with atomic_writer(path) as handle:  # raising inside leaves no records.jsonl
        for result in read_source(source, out, **kwargs):
            rows += 1
            if isinstance(result, Skipped):
                skipped.append(result)
                continue
            multi_image += isinstance(result[0].image, list)
            text_only += len(result) if result[0].image is None else 0
            for record in result:
                handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
                records += 1
        if not rows:
            raise InputError(f"{source}: no rows to read — check the file, the split or --limit")
        fraction = len(skipped) / rows
        if fraction > max_bad_fraction:
            raise InputError(_too_many(source, skipped, rows, max_bad_fraction))
    summary = {
        "stage": "records",
        "source": str(source),
        "rows": rows,
        "records": records,
        "rows_with_several_images": multi_image,
        "text_only_records": text_only,
        "bad_fraction": round(fraction, 6),
        "max_bad_fraction": max_bad_fraction,
        "skipped": [s.to_dict() for s in skipped],
    }
    write_json_atomic(out / "records.summary.json", summary)
    return path, summary


def _too_many(source: str | Path, skipped: list[Skipped], rows: int, limit: float) -> str:
    head = (
        f"{source}: {len(skipped)} of {rows} rows are bad ({len(skipped) / rows:.1%}), above --max-bad-fraction "
        f"{limit:g} ({limit:.1%}); no records written. Fix the source (or the field flags), or raise "
        "--max-bad-fraction to skip them. First problems:"
    )
    lines = [
        f"  line {s.line}" + (f" (id {s.id!r})" if s.id else "") + f": {s.reason}" for s in skipped[:SHOWN_PROBLEMS]
    ]
    more = [f"  … and {len(skipped) - SHOWN_PROBLEMS} more"] if len(skipped) > SHOWN_PROBLEMS else []
    return "\n".join([head, *lines, *more])
