"""Run a per-row synthesis stage as a sharded, resumable job with a progress bar and a JSON summary.

Every model-free or model-backed stage (negatives, describe, distill) is a function from a batch of input
rows to a batch of output rows. `run_stage` does the rest, the same way for all of them, through the
toolkit's one job loop (`jobs.resumable.run_resumable`):

- `--shard i/N` takes the rows whose id hashes to shard i, so N machines split a source with no
  coordination, and a shard's output does not depend on how the others ran;
- output goes through `ResumableJsonlWriter`: a job killed at any moment (even SIGKILL) and started again
  skips the ids it finished and ends with the same file an uninterrupted run writes;
- a row whose model request still fails after the client's retries is set aside, not fatal: it goes to
  `OUT/<stage>.failed.jsonl` with its reason, is counted in the summary, and the next run of the same
  command retries it (with the missing rows), ending with the file an uninterrupted run writes;
- `concurrency` > 1 sends each row as its own call, that many in flight (an HTTP endpoint stays busy
  instead of waiting for the slowest reply of each batch);
- the settings that shape the stage's rows (generator, model, decoding, …) are recorded next to the output
  (`OUT/<stage>.settings.json`); a rerun with others over rows already written is refused, naming what
  changed, unless `overwrite` (start the stage over) — a stage file never mixes rows made two ways;
- a summary (counts plus whatever the stage adds) is written atomically as JSON next to the output;
- the batches run on an executor (`jobs.executor`, picked by `--engine`): this process, or a Ray Data
  pipeline across a cluster. The driver cuts the batches and writes what comes back, so the output is the
  same on either.

File names: `OUT/<stage>.jsonl`, or `OUT/<stage>-<i>-of-<N>.jsonl` for shards; `read_stage` reads either.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jobs.executor import BatchFn, Executor, LocalExecutor
from jobs.jsonl import read_jsonl, write_json_atomic
from jobs.resumable import FAILED, run_resumable

__all__ = [
    "WHOLE",
    "Shard",
    "TooManyFailures",
    "check_failures",
    "read_stage",
    "run_stage",
    "stage_path",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0-based), parsed from `"i/N"`."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str | None) -> Shard:
        if not text:
            return cls()
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise ValueError(f"--shard must look like i/N (e.g. 0/4), got {text!r}") from None
        if not 0 <= index < count:
            raise ValueError(f"--shard {text}: need 0 <= i < N")
        return cls(index, count)

    def owns(self, row_id: object) -> bool:
        return self.count == 1 or zlib.crc32(str(row_id).encode()) % self.count == self.index

    def suffix(self) -> str:
        return "" if self.count == 1 else f"-{self.index}-of-{self.count}"


WHOLE = Shard()
"""The default: one job owns every row."""


def stage_path(out_dir: str | Path, stage: str, shard: Shard = WHOLE) -> Path:
    return Path(out_dir) / f"{stage}{shard.suffix()}.jsonl"


def read_stage(folder: str | Path, stage: str) -> list[Row]:
    """All rows of a stage in `folder`: the unsharded file, or every shard's file (ordered by id)."""
    folder = Path(folder)
    whole = folder / f"{stage}.jsonl"
    if whole.exists():
        return [row for _, row in read_jsonl(whole)]
    shards = sorted(p for p in folder.glob(f"{stage}-*-of-*.jsonl") if not p.name.endswith(".failed.jsonl"))
    if not shards:
        raise FileNotFoundError(f"no {stage}.jsonl (or shards of it) in {folder}: run `mrjudge synth {stage}` first")
    rows = [row for path in shards for _, row in read_jsonl(path)]
    return sorted(rows, key=lambda row: str(row["id"]))


class TooManyFailures(RuntimeError):
    """More rows failed than `--max-failed-fraction` allows; the summary is attached."""

    def __init__(self, summary: dict[str, Any], limit: float) -> None:
        stage, n, failed = summary["stage"], summary["n_in"], summary["failed"]
        super().__init__(
            f"{stage}: {failed} of {n} rows failed ({summary['failed_by_reason']}), above --max-failed-fraction "
            f"{limit}; see {summary['failed_file']} — fix the endpoint and run the same command again to retry them"
        )
        self.summary = summary


def valid_fraction(max_failed_fraction: float) -> float:
    if not 0.0 <= max_failed_fraction <= 1.0:
        raise ValueError(f"--max-failed-fraction must be in [0, 1], got {max_failed_fraction}")
    return max_failed_fraction


def check_failures(summary: dict[str, Any], max_failed_fraction: float) -> dict[str, Any]:
    """`summary` unchanged, or `TooManyFailures` when the failed share is above `max_failed_fraction`."""
    valid_fraction(max_failed_fraction)
    n, failed = summary.get("n_in", 0), summary.get("failed", 0)
    if failed and failed > max_failed_fraction * n:
        raise TooManyFailures(summary, max_failed_fraction)
    return summary


class _Guarded:
    """Builds a batch function whose failed requests become per-row failure markers instead of errors.

    A batch that fails is tried again row by row, so one bad row does not take its batch-mates with it.
    Only `RequestFailed` (a request that failed after the client's retries) is caught; anything else is a
    real error and stops the stage.
    """

    def __init__(self, build: Callable[[], Callable[[list[Row]], list[Row]]]) -> None:
        self.build = build

    def __call__(self) -> Callable[[list[Row]], list[Row]]:
        from data_synthesis.sampling import RequestFailed

        run = self.build()

        def failed(row: Row, exc: RequestFailed) -> Row:
            return {"id": row["id"], FAILED: exc.reason, "error": str(exc)}

        def guarded(batch: list[Row]) -> list[Row]:
            try:
                return list(run(batch))
            except RequestFailed as exc:
                if len(batch) == 1:
                    return [failed(batch[0], exc)]
            out: list[Row] = []
            for row in batch:
                try:
                    out.extend(run([row]))
                except RequestFailed as exc:
                    out.append(failed(row, exc))
            return out

        return guarded


def _guard(work: BatchFn) -> BatchFn:
    return replace(work, build=_Guarded(work.build))


def run_stage(
    stage: str,
    rows: Sequence[Row],
    process: BatchFn | Callable[[list[Row]], list[Row]],
    out_dir: str | Path,
    *,
    shard: Shard = WHOLE,
    batch_size: int = 16,
    summarize: Callable[[list[Row]], dict[str, Any]] | None = None,
    show_progress: bool = True,
    engine: Executor | None = None,
    concurrency: int = 1,
    tokens: Callable[[Row], int] | None = None,
    settings: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> tuple[list[Row], dict[str, Any]]:
    """Process this shard's rows in batches, resumably; return all its output rows and the summary.

    A row whose model request still fails after the client's retries is not written to the output: it goes
    to `<stage>.failed.jsonl` with its reason, is counted in the summary (`failed`, `failed_by_reason`),
    and is tried again by the next run of the same command, like any row missing from the output.

    Args:
        stage: the stage name (output file stem).
        rows: the input rows (each with a unique `id`).
        process: a batch of input rows → the output rows for them (same ids; any order); a `BatchFn`
            when the function should be built where it runs (a model per Ray actor).
        out_dir: where the output and the summary go.
        shard: which part of `rows` this job owns.
        batch_size: rows per `process` call (model stages batch their backend requests by it).
        summarize: extra summary figures from all output rows of the shard.
        engine: where the batches run (default: this process).
        concurrency: above 1 (local engine), each row is its own `process` call, this many in flight at
            once: the way to keep an HTTP endpoint busy without waiting for the slowest row of a batch.
        tokens: completion tokens an output row cost, for the progress bar's tokens/s.
        settings: what shapes the output rows; recorded, and a rerun with others raises `SettingsChanged`.
        overwrite: discard this shard's earlier output (rows, failures, settings) and start over.
    """
    engine = engine or LocalExecutor()
    mine = [row for row in rows if shard.owns(row["id"])]
    run = run_resumable(
        stage_path(out_dir, stage, shard),
        mine,
        _guard(BatchFn.of(process, stage)),
        batch_size=batch_size,
        engine=engine,
        concurrency=concurrency,
        tokens=tokens,
        label=f"{stage}{shard.suffix()}",
        show_progress=show_progress,
        settings=settings,
        overwrite=overwrite,
    )
    failures = run.failures
    summary: dict[str, Any] = {
        "stage": stage,
        "shard": f"{shard.index}/{shard.count}",
        "n_in": len(mine),
        "n_out": len(run.rows),
        "n_processed_now": run.n_todo,
        "failed": len(failures),
        "failed_by_reason": dict(sorted(Counter(f["reason"] for f in failures).items())),
        "failed_file": str(run.failed_path) if failures else None,
        "engine": engine.name,
        "concurrency": concurrency if concurrency > 1 and engine.name == "local" else None,
        "wall_s": round(run.wall_s, 3),
    }
    if tokens:
        summary["completion_tokens_now"] = run.tokens
        summary["tokens_per_s"] = round(run.tokens / run.wall_s, 1) if run.wall_s > 0 else None
    if summarize:
        summary.update(summarize(run.rows))
    write_json_atomic(Path(out_dir) / f"{stage}{shard.suffix()}.summary.json", summary)
    return run.rows, summary
