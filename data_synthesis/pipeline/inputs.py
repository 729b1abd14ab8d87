"""What a stage reads: the previous stage's rows from the input folder, their image paths rewritten to resolve
from the output folder (`data_synthesis.image_paths`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data_synthesis.image_paths import rebase
from data_synthesis.stage_runner import read_stage
from jobs.jsonl import read_jsonl

__all__ = ["Row", "load_rows"]

Row = dict[str, Any]
"""One JSONL row of a stage's output (every stage's rows are this)."""


def load_rows(input_dir: str | Path, stage: str, out_dir: str | Path) -> list[Row]:
    """Rows of `stage` in `input_dir` (for "records": with their world scenes when there are any)."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    if stage == "records":
        path = input_dir / "records.jsonl"
        if not path.exists():
            raise FileNotFoundError(
                f"no records.jsonl in {input_dir}: run `mrjudge synth world` or `mrjudge synth records` first"
            )
        from data_synthesis.records import SFTRecord

        rows = [SFTRecord.from_dict(row, where=f"{path} line {n}").to_dict() for n, row in read_jsonl(path)]
        scenes = input_dir / "scenes.jsonl"
        if scenes.exists():
            worlds = {row["id"]: {"scene": row["scene"], "task": row["task"]} for _, row in read_jsonl(scenes)}
            rows = [{**row, "world": worlds[row["id"]]} if row["id"] in worlds else row for row in rows]
    else:
        rows = read_stage(input_dir, stage)
    return rebase(rows, input_dir, out_dir)
