"""JSONL in and out, with line-numbered validation and resumable, atomic output.

`ResumableJsonlWriter` is how every long job in mr-judge writes: finished records go to `OUT.partial`
(one complete line per record, flushed per batch), so a crash loses at most the batch in flight; on
re-run the ids already in `OUT` or `OUT.partial` are skipped; at the end the whole file is written to a
temporary file and renamed onto `OUT`, so `OUT` is either absent or complete, never half-written.

Reading a file of rows follows one rule everywhere (`parse_records`): every bad row is reported with its
place, field and fix; with `max_bad_fraction` > 0 (the commands' `--max-bad-fraction`) bad rows up to that
share of the rows are skipped and listed (`Records.skipped`), above it nothing is read and the error lists them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from judge.types import DataError

__all__ = [
    "DEFAULT_MAX_BAD_FRACTION",
    "TEXT_ENCODING",
    "InputError",
    "UnparsableLine",
    "Records",
    "ResumableJsonlWriter",
    "atomic_writer",
    "check_bad_fraction",
    "numbered_jsonl",
    "parse_records",
    "raise_problems",
    "read_complete_rows",
    "read_json_list",
    "read_jsonl",
    "read_jsonl_rows",
    "read_records",
    "write_json_atomic",
    "write_jsonl_atomic",
    "write_text_atomic",
]

T = TypeVar("T")

DEFAULT_MAX_BAD_FRACTION = 0.05
"""The commands that read rows (`judge`, `eval`, `synth records`) skip bad ones up to this share by default."""

TEXT_ENCODING = "utf-8-sig"
"""How a user's JSON and JSONL files are read: UTF-8, with or without the byte-order mark some editors write."""


def _new_file_mode() -> int:
    """The mode `open` gives a new file under this process's umask (0644 under the usual 022)."""
    try:  # Linux says it without changing it
        with open("/proc/self/status", encoding="ascii") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)  # elsewhere reading the umask means setting it: put it straight back
        os.umask(umask)
    return 0o666 & ~umask


class InputError(ValueError):
    """One or more bad input lines; the message lists each with its line number, field and fix."""


class Records(list):
    """The records parsed from a file (a list), with the rows skipped as bad: `skipped` holds each one's
    problem (`FILE line N: field 'x': problem — fix`), `rows` counts the rows read, good and bad."""

    def __init__(self, records: Iterable[Any] = (), skipped: Sequence[str] = (), rows: int | None = None) -> None:
        super().__init__(records)
        self.skipped = list(skipped)
        self.rows = len(self) + len(self.skipped) if rows is None else rows


def check_bad_fraction(max_bad_fraction: float) -> float:
    """`max_bad_fraction`, or a `ValueError` naming the flag when it is not a share in [0, 1]."""
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise ValueError(f"--max-bad-fraction must be in [0, 1], got {max_bad_fraction}")
    return max_bad_fraction


@dataclass(frozen=True)
class UnparsableLine:
    """A line that is not JSON, as a row: readers that skip bad rows count it as one (`parse_records`,
    `data_synthesis.sources`) instead of stopping at it."""

    problem: str
    """What is wrong with it: `not valid JSON (… at column N)`."""


def numbered_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """`(line_number, row)` per non-blank line; a line that is not JSON comes as an `UnparsableLine`."""
    with open(path, encoding=TEXT_ENCODING) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, UnparsableLine(f"not valid JSON ({exc.msg} at column {exc.colno})")


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield `(line_number, parsed_object)` for each non-blank line; bad JSON raises `InputError`."""
    for number, row in numbered_jsonl(path):
        if isinstance(row, UnparsableLine):
            raise InputError(f"{path} line {number}: {row.problem}")
        yield number, row


def read_records(
    path: str | Path, parse: Callable[..., T], *, max_errors: int = 20, max_bad_fraction: float = 0.0
) -> Records:
    """Parse every line with `parse(row, where=...)`, collecting all errors before failing.

    Ids must be unique. All problems are counted and reported together (the first `max_errors` listed,
    then "... and N more"), each as `FILE line N: field 'x': problem — fix`, so a user fixes a file in one pass.
    A line that is not JSON is one such problem. With `max_bad_fraction` > 0, bad lines up to that share are
    skipped instead (`Records.skipped`); see `parse_records`.
    """
    return parse_records(read_jsonl_rows(path), parse, path, max_errors=max_errors, max_bad_fraction=max_bad_fraction)


def read_jsonl_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """`(label, row)` per non-blank line, for `parse_records`: a line that is not JSON comes as a row it counts
    as bad (where `read_jsonl` stops at it)."""
    for number, row in numbered_jsonl(path):
        yield f"line {number}", row


def parse_records(
    rows: Iterable[tuple[str, Any]],
    parse: Callable[..., T],
    source: str | Path,
    *,
    max_errors: int = 20,
    max_bad_fraction: float = 0.0,
    unique_ids: bool = True,
) -> Records:
    """`read_records` for rows already in memory (a JSON list, a Parquet file, MM-Vet's `{id: entry}` object):
    `(label, row)` pairs, the label saying where the row is (`"row 3"`), parsed with `parse(row, where="SOURCE label")`.

    A row is bad when `parse` raises `DataError` (or, with `unique_ids`, repeats an earlier record's id). With
    `max_bad_fraction` 0 (the default) any bad row raises `InputError` listing them all. Above 0, bad rows up to
    that share of the rows read are skipped and listed in the result's `skipped`; more than that raises
    `InputError` naming the share, the flag and the first problems.
    """
    check_bad_fraction(max_bad_fraction)
    records: list[T] = []
    problems: list[str] = []
    n_rows = 0
    seen: dict[Any, str] = {}
    for label, row in rows:
        n_rows += 1
        where = f"{source} {label}"
        if isinstance(row, UnparsableLine):
            problems.append(f"{where}: {row.problem}")
            continue
        try:
            record = parse(row, where=where)
        except DataError as exc:
            problems.append(str(exc))
            continue
        record_id = getattr(record, "id", None)
        if unique_ids and record_id in seen:
            problems.append(
                f"{where}: field 'id': duplicate id {record_id!r} (first on {seen[record_id]}) — give each record a unique id"
            )
            continue
        seen.setdefault(record_id, label)
        records.append(record)
    if problems and len(problems) > max_bad_fraction * n_rows:
        if not max_bad_fraction:
            raise_problems(source, problems, max_listed=max_errors)
        shown = problems[:max_errors] + (
            [f"... and {len(problems) - max_errors} more"] if len(problems) > max_errors else []
        )
        raise InputError(
            f"{source}: {len(problems)} of {n_rows} rows are bad ({len(problems) / n_rows:.1%}), above "
            f"--max-bad-fraction {max_bad_fraction:g}: nothing was run. Fix the rows, or raise --max-bad-fraction "
            "to skip them:\n" + "\n".join(shown)
        )
    return Records(records, problems, n_rows)


def raise_problems(
    source: str | Path, problems: Sequence[str], *, total: int | None = None, max_listed: int = 20
) -> None:
    """One `InputError` for all the problems found in `source`, or nothing when there are none.

    It gives the count (`total`, default `len(problems)`), the first `max_listed` problems one per line,
    then "... and N more", so a user sees the whole size of the fix at once.
    """
    total = len(problems) if total is None else total
    if not total:
        return
    shown = list(problems[:max_listed])
    if total > len(shown):
        shown.append(f"... and {total - len(shown)} more")
    raise InputError(f"{total} problem(s) in {source}:\n" + "\n".join(shown))


def read_json_list(
    path: str | Path, label: str, expected: str, *, bad_json_hint: str = "", not_list_hint: str = ""
) -> list[Any]:
    """A JSON file whose top level is a list (`expected` words it in the error); other files raise `InputError`."""
    try:
        data = json.loads(Path(path).read_text(encoding=TEXT_ENCODING))
    except json.JSONDecodeError as exc:
        raise InputError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}){bad_json_hint}") from exc
    if not isinstance(data, list):
        raise InputError(f"{label}: expected {expected}, got {type(data).__name__}{not_list_hint}")
    return data


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[TextIO]:
    """A text handle on a temporary file beside `path`, fsynced and renamed onto `path` when the block ends
    (deleted when it raises), so readers see the whole file or none of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _new_file_mode())  # mkstemp makes it 0600; the published file gets what `open` would give
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any]) -> None:
    """Write rows to `path` through a temporary file in the same folder and an atomic rename."""
    with atomic_writer(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` through a temporary file, an fsync and a rename, so readers never see half a file."""
    with atomic_writer(path) as handle:
        handle.write(text)


def write_json_atomic(path: str | Path, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_complete_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file, dropping a torn last line (a crash mid-write) and anything unparsable."""
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "id" in row:
                rows.append(row)
    return rows


class ResumableJsonlWriter:
    """Append finished records, skip ids done in an earlier run, and publish the output atomically.

    with ResumableJsonlWriter("out.jsonl") as writer:
        todo = [item for item in items if item.id not in writer.done_ids]
        writer.write([{"id": ..., ...}])
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        previous = read_complete_rows(self.path) + read_complete_rows(self.partial)
        self._rows: dict[Any, dict[str, Any]] = {}
        for row in previous:
            self._rows.setdefault(row["id"], row)
        # Rewrite the partial file without a torn tail, so new lines start on a clean line.
        write_jsonl_atomic(self.partial, self._rows.values())
        self._handle = open(self.partial, "a", encoding="utf-8")

    @property
    def done_ids(self) -> set[Any]:
        return set(self._rows)

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows (ids already written are ignored, so nothing is ever duplicated) and flush."""
        for row in rows:
            if row["id"] in self._rows:
                continue
            self._rows[row["id"]] = row
            self._handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def finish(self, order: Iterable[Any] | None = None) -> Path:
        """Publish every row to the output atomically, in `order` of ids if given, and drop the partial file."""
        self._handle.close()
        rows = self._rows
        ordered = [rows[i] for i in order if i in rows] if order is not None else list(rows.values())
        if order is not None:
            placed = {row["id"] for row in ordered}
            ordered += [row for row_id, row in rows.items() if row_id not in placed]
        write_jsonl_atomic(self.path, ordered)
        self.partial.unlink(missing_ok=True)
        return self.path

    def close(self) -> None:
        """Stop without publishing; the partial file stays for the next run to resume from."""
        if not self._handle.closed:
            self._handle.close()

    def __enter__(self) -> ResumableJsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
