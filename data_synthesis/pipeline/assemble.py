"""The assemble stage: described rows → `items.jsonl` and `rl/{train,val}.jsonl`, the judge's MC items."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from data_synthesis.assemble import AssembleConfig, assemble_items, build_items, plan_labels, summarize_items
from data_synthesis.image_paths import rebase_row
from data_synthesis.pipeline.inputs import Row, load_rows
from jobs.executor import BatchFn, Executor
from jobs.jsonl import write_json_atomic, write_jsonl_atomic

__all__ = ["run_assemble"]


def run_assemble(
    input_dir: str | Path,
    out_dir: str | Path,
    config: AssembleConfig | None = None,
    *,
    engine: Executor | None = None,
    batch_size: int = 256,
) -> tuple[list[Row], dict[str, Any]]:
    """Writes items.jsonl and rl/{train,val}.jsonl; not sharded: letter balancing needs every item.

    The balancing plan (options and label position per row) is made here, over every row's id; the items
    themselves are built per row, in batches on `engine` (this process, or Ray tasks).
    """
    config = config or AssembleConfig()
    out_dir = Path(out_dir)
    rows = load_rows(input_dir, "described", out_dir)
    if engine is None or engine.name == "local":
        items, summary = assemble_items(rows, config)
    else:
        plan, skipped = plan_labels(rows, config)
        planned = [(row, p) for row, p in zip(rows, plan) if p is not None]
        batches = [planned[i : i + batch_size] for i in range(0, len(planned), batch_size)]
        built = dict(engine.map_batches(batches, BatchFn.of(partial(build_items, config=config), "assemble")))
        items = [item for index in range(len(batches)) for item in built[index]]
        summary = summarize_items(items, skipped)
    write_jsonl_atomic(out_dir / "items.jsonl", items)
    for split in ("train", "val"):
        write_jsonl_atomic(
            out_dir / "rl" / f"{split}.jsonl",
            [rebase_row(i, out_dir, out_dir / "rl") for i in items if i["meta"]["split"] == split],
        )
    write_json_atomic(out_dir / "items.summary.json", {"stage": "assemble", **summary})
    return items, summary
