"""The one per-row job loop: resume, batch, run on an executor, append, publish atomically.

Judging a file (`jobs.judge_file.judge_file`), a benchmark's predictions (`eval.common.resumable_predictions`)
and every synthesis stage (`data_synthesis.stage_runner.run_stage`) are this loop with different work:

- output goes through `ResumableJsonlWriter`: ids already in `OUT` or `OUT.partial` are skipped, finished
  rows are appended and flushed per batch (a killed run loses at most the batches in flight), and the
  whole file is published by an atomic rename at the end, in the items' order;
- the driver cuts the rows still to do into batches and an executor (`jobs.executor`) maps them, here
  or on Ray; with `concurrency` > 1 on the local executor each row is its own call, that many in flight;
- a row the work marks failed (`{"id", FAILED: reason, "error": ...}`) is set aside, not written: it goes
  to `OUT_STEM.failed.jsonl` (removed when a run has none), and the next run retries it like any missing row;
- the settings that shape the rows (model, decoding, image size, …; the caller names them) are recorded in
  `OUT_STEM.settings.json`, and a run with other settings over rows already written is refused
  (`SettingsChanged`, naming what differs) instead of resuming: a file never mixes rows made two ways;
  `overwrite` discards the old rows and starts over;
- one progress bar (`jobs.progress`) counts the items done out of all, with tokens/s and failures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.executor import BatchFn, Executor, LocalExecutor
from jobs.jsonl import ResumableJsonlWriter, read_jsonl, write_json_atomic, write_jsonl_atomic
from jobs.progress import progress_bar

__all__ = [
    "FAILED",
    "ResumableRun",
    "SettingsChanged",
    "check_settings",
    "discard_output",
    "failed_path_for",
    "run_resumable",
    "settings_path_for",
]

Row = dict[str, Any]

FAILED = "__failed__"
"""Key of the marker a batch function returns for a row whose request failed: `{"id", FAILED: reason}`."""


@dataclass
class ResumableRun:
    """What `run_resumable` did."""

    path: Path
    """The published output."""
    rows: list[Row]
    """Every row of the output as read back from it (earlier runs' included), in file order."""
    n_todo: int
    """Items this run worked on (not done before it)."""
    failures: list[Row]
    """Rows set aside this run, `{"id", "reason", "error"}`, in the items' order."""
    failed_path: Path
    """Where the failures were written (the file exists only when there were any)."""
    tokens: int
    """Completion tokens the rows written this run cost (0 without a `tokens` function)."""
    wall_s: float
    """Seconds from the start of the call to the published output."""

    def rows_for(self, ids: Iterable[Any]) -> list[Row]:
        """The output rows whose id is in `ids`, in file order (a file can hold rows of earlier inputs)."""
        wanted = set(ids)
        return [row for row in self.rows if row["id"] in wanted]


def failed_path_for(path: str | Path) -> Path:
    """`OUT/stage.jsonl` → `OUT/stage.failed.jsonl`: where a job's failed rows go."""
    path = Path(path)
    return path.with_name(f"{path.name.removesuffix('.jsonl')}.failed.jsonl")


def settings_path_for(path: str | Path) -> Path:
    """`OUT/stage.jsonl` → `OUT/stage.settings.json`: where the settings that shaped a job's rows are kept."""
    path = Path(path)
    return path.with_name(f"{path.name.removesuffix('.jsonl')}.settings.json")


class SettingsChanged(ValueError):
    """Rows already in an output were made with other settings than this run's: resuming would mix them."""


def _partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def discard_output(path: str | Path) -> None:
    """Remove a job's output and everything beside it that a resume would read (`--overwrite`)."""
    path = Path(path)
    for leftover in (path, _partial_path(path), failed_path_for(path), settings_path_for(path)):
        leftover.unlink(missing_ok=True)


def _plain(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as their JSON reads back (paths and other objects as strings), so a record compares equal."""
    return json.loads(json.dumps(dict(settings), sort_keys=True, default=str))


def _flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`name: old → new` for every setting that differs (nested ones by their dotted path)."""
    before, after = _flat(old), _flat(new)
    unset = object()

    def shown(value: Any) -> str:
        return "(unset)" if value is unset else json.dumps(value)

    return [
        f"{key}: {shown(before.get(key, unset))} → {shown(after.get(key, unset))}"
        for key in sorted(set(before) | set(after))
        if before.get(key, unset) != after.get(key, unset)
    ]


def _has_rows(path: Path) -> bool:
    return any(p.is_file() and p.stat().st_size > 0 for p in (path, _partial_path(path)))


def check_settings(path: str | Path, settings: Mapping[str, Any] | None, *, overwrite: bool = False) -> None:
    """Refuse to resume `path` when its rows were made with other settings; record this run's settings.

    Args:
        path: the job's output JSONL.
        settings: what shapes the rows (JSON-able; nested mappings allowed). None: nothing is recorded or
            checked (a job whose rows depend on nothing but the inputs).
        overwrite: discard the output, its partial, failed and settings files first, and start over.

    Raises:
        SettingsChanged: naming each setting that differs, and the two ways out (a new output, `--overwrite`).

    An output written before settings were recorded (rows, no record) takes this run's settings as its record.
    """
    path = Path(path)
    if overwrite:
        discard_output(path)
    if settings is None:
        return
    record = settings_path_for(path)
    wanted = _plain(settings)
    if _has_rows(path) and record.is_file():
        try:
            recorded = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SettingsChanged(
                f"{record} (the settings {path.name} was made with) is unreadable ({exc}): write to a new output, "
                "or add --overwrite to discard its rows and start over"
            ) from exc
        changed = _differences(recorded, wanted)
        if changed:
            raise SettingsChanged(
                f"{path} holds rows made with other settings than this run's ({'; '.join(changed)}), and resuming "
                "would mix the two. Write to a new output (another --output / --out), or add --overwrite to "
                f"discard its rows and make them all again with the new settings (recorded in {record.name})"
            )
        return
    write_json_atomic(record, wanted)


def _item_id(item: Any) -> Any:
    return item["id"] if isinstance(item, dict) else item.id


def _one_at_a_time(run: Callable[[list[Any]], Any], todo: list[Any], concurrency: int) -> Iterator[tuple[int, Any]]:
    """Each item its own call, `concurrency` calls in flight (threads: the calls wait on HTTP)."""
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rows")
    futures = {pool.submit(run, [item]): index for index, item in enumerate(todo)}
    try:
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # a real error: do not wait for the requests in flight
        raise
    pool.shutdown(wait=True)


def run_resumable(
    path: str | Path,
    items: Sequence[Any],
    work: BatchFn | Callable[[list[Any]], Iterable[Any]],
    *,
    batch_size: int,
    item_id: Callable[[Any], Any] = _item_id,
    engine: Executor | None = None,
    finish: Callable[[Sequence[Any], list[Any]], Iterable[Row]] | None = None,
    concurrency: int = 1,
    tokens: Callable[[Row], int] | None = None,
    label: str = "batch",
    show_progress: bool = True,
    settings: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> ResumableRun:
    """Run `work` over the items whose ids are not yet in `path`, a batch at a time, and publish `path`.

    Args:
        path: the output JSONL; finished ids in it (or in its `.partial` file) are skipped.
        items: the inputs, each with a unique id (`item_id`; default: `item["id"]` or `item.id`).
        work: a batch of items → one output row (a dict with `id`) per item, in any order; a `BatchFn`
            when it should be built where it runs (one model per Ray actor).
        batch_size: items per `work` call.
        engine: the executor the batches run on (`--engine`; default: this process).
        finish: `finish(batch, outputs)` turns a batch's outputs into its rows in the driver (e.g. grading
            through a cache the driver owns).
        concurrency: above 1 (local executor only), each item is its own `work` call, this many in flight.
        tokens: completion tokens an output row cost, for the bar's tokens/s and `ResumableRun.tokens`.
        label: the bar's label (and the work's name when `work` is a plain function).
        show_progress: draw the bar.
        settings: what shapes the rows (model, decoding, image size, …): recorded beside the output, and a
            run with other settings over rows already written raises `SettingsChanged` (`check_settings`).
        overwrite: discard what an earlier run left in `path` and start over.
    """
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    check_settings(path, settings, overwrite=overwrite)
    engine = engine or LocalExecutor()
    work = BatchFn.of(work, label)
    ids = [item_id(item) for item in items]
    failed_path = failed_path_for(path)
    failures: list[Row] = []
    spent = 0
    start = time.perf_counter()
    with ResumableJsonlWriter(path) as writer:
        finished = writer.done_ids  # a fresh set per access: take it once
        todo = [item for item, i in zip(items, ids) if i not in finished]
        with progress_bar(label, total=len(items), completed=len(items) - len(todo), enabled=show_progress) as bar:
            if concurrency > 1 and engine.name == "local":
                batches = [[item] for item in todo]
                results = _one_at_a_time(work.build(), todo, concurrency)
            else:
                batches = [todo[offset : offset + batch_size] for offset in range(0, len(todo), batch_size)]
                results = engine.map_batches(batches, work)
            for index, outputs in results:
                done = list(finish(batches[index], outputs) if finish else outputs)
                ok = [row for row in done if FAILED not in row]
                failures += [row for row in done if FAILED in row]
                writer.write(ok)
                spent += sum(tokens(row) for row in ok) if tokens else 0
                note = f"{spent / max(time.perf_counter() - start, 1e-9):,.0f} tok/s" if spent else ""
                bar.advance(len(batches[index]), note=note + (f" · {len(failures)} failed" if failures else ""))
        final = writer.finish(order=ids)
    position = {i: n for n, i in enumerate(ids)}
    failures.sort(key=lambda row: position[row["id"]])
    failures = [{"id": f["id"], "reason": f[FAILED], "error": f.get("error", "")} for f in failures]
    if failures:
        write_jsonl_atomic(failed_path, failures)
    else:
        failed_path.unlink(missing_ok=True)
    rows = [row for _, row in read_jsonl(final)]
    return ResumableRun(final, rows, len(todo), failures, failed_path, spent, time.perf_counter() - start)
