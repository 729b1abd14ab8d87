"""Run a per-row synthesis stage as a sharded, resumable job with a progress bar and a JSON summary.

Every model-free or model-backed stage (negatives, describe, distill) is a function from a batch of input
rows to a batch of output rows. `run_stage` does the rest, the same way for all of them:

- `--shard i/N` takes the rows whose id hashes to shard i, so N machines split a source with no
  coordination, and a shard's output does not depend on how the others ran;
- output goes through `ResumableJsonlWriter`: a job killed at any moment (even SIGKILL) and started again
  skips the ids it finished and ends with the same file an uninterrupted run writes;
- a summary (counts plus whatever the stage adds) is written atomically as JSON next to the output;
- the batches run on an engine (`judge.engine`): this process, or a Ray Data pipeline across a cluster.
  The driver cuts the batches and writes what comes back, so the output is the same on either engine.

File names: `OUT/<stage>.jsonl`, or `OUT/<stage>-<i>-of-<N>.jsonl` for shards; `read_stage` reads either.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.engine import BatchFn, Engine, LocalEngine
from judge.jsonl import ResumableJsonlWriter, read_jsonl

__all__ = ["WHOLE", "Shard", "read_stage", "run_stage", "stage_path", "write_json_atomic"]

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
    shards = sorted(folder.glob(f"{stage}-*-of-*.jsonl"))
    if not shards:
        raise FileNotFoundError(f"no {stage}.jsonl (or shards of it) in {folder}: run `mrjudge synth {stage}` first")
    rows = [row for path in shards for _, row in read_jsonl(path)]
    return sorted(rows, key=lambda row: str(row["id"]))


def write_json_atomic(path: str | Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


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
    engine: Engine | None = None,
) -> tuple[list[Row], dict[str, Any]]:
    """Process this shard's rows in batches, resumably; return all its output rows and the summary.

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
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    engine = engine or LocalEngine()
    work = BatchFn.of(process, stage)
    mine = [row for row in rows if shard.owns(row["id"])]
    out_path = stage_path(out_dir, stage, shard)
    start = time.perf_counter()
    with ResumableJsonlWriter(out_path) as writer:
        todo = [row for row in mine if row["id"] not in writer.done_ids]
        columns = (TextColumn(f"{stage}{shard.suffix()}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, disable=not show_progress) as progress:
            task = progress.add_task(stage, total=len(mine), completed=len(mine) - len(todo))
            batches = [todo[offset : offset + batch_size] for offset in range(0, len(todo), batch_size)]
            for index, done in engine.map_batches(batches, work):
                writer.write(done)
                progress.advance(task, len(batches[index]))
        writer.finish(order=[row["id"] for row in mine])
    out_rows = [row for _, row in read_jsonl(out_path)]
    wall_s = time.perf_counter() - start
    summary: dict[str, Any] = {
        "stage": stage,
        "shard": f"{shard.index}/{shard.count}",
        "n_in": len(mine),
        "n_out": len(out_rows),
        "n_processed_now": len(todo),
        "engine": engine.name,
        "wall_s": round(wall_s, 3),
    }
    if summarize:
        summary.update(summarize(out_rows))
    write_json_atomic(Path(out_dir) / f"{stage}{shard.suffix()}.summary.json", summary)
    return out_rows, summary
