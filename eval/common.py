"""What every benchmark run shares: resumable predictions, `metrics.json`, `report.md`, PNG charts.

A run directory looks the same for every benchmark:

    OUT/predictions.jsonl   one line per item, with the raw judge text (resumable: finished ids are skipped)
    OUT/metrics.json        flat keys; accuracies in [0, 1], plus `n` and `unparsed`
    OUT/report.md           a table of this run beside the published reference rows
    OUT/*.png               per-category bars (and consistency where it applies)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from eval.plots import bar_chart  # re-exported: the eval reports' charts
from jobs.executor import BatchFn
from jobs.jsonl import InputError, read_jsonl, write_json_atomic, write_text_atomic
from jobs.progress import progress_bar
from jobs.resumable import run_resumable
from judge.judging import item_rng

__all__ = [
    "bar_chart",
    "item_rng",
    "markdown_table",
    "progress_bar",
    "read_decisions",
    "read_predictions",
    "require_every_row",
    "resumable_predictions",
    "write_json_atomic",
    "write_text_atomic",
]


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a predictions JSONL (each must carry an `id`)."""
    return [row for _, row in read_jsonl(path)]


def read_decisions(path: str | Path, *, replies: bool = False) -> list[dict[str, Any]]:
    """A user's predictions JSONL for a pairwise benchmark: `{"id", "pred"}` per line, checked line by line.

    With `replies` (VL-RewardBench's lmms-eval reading) a row needs `id` and the judge's reply instead: `reply`,
    or official-mode `calls` and `raw`; a row of lmms-eval's `--log_samples` file (`doc`, `resps`) also does."""
    rows, errors = [], []
    for number, row in read_jsonl(path):
        if replies:
            ok = isinstance(row, dict) and (
                ("id" in row and ("reply" in row or ("calls" in row and "raw" in row)))
                or (isinstance(row.get("doc"), dict) and "id" in row["doc"] and "resps" in row)
            )
            need = "'id' and 'reply' (or 'calls' and 'raw'), or lmms-eval's 'doc' and 'resps'"
        else:
            ok = isinstance(row, dict) and "id" in row and "pred" in row
            need = "'id' and 'pred' (index of the better response, or null)"
        if not ok:
            errors.append(f"{path} line {number}: needs fields {need}")
        else:
            rows.append(row)
    if errors:
        raise InputError(f"{len(errors)} problem(s) in {path}:\n" + "\n".join(errors[:20]))
    return rows


def resumable_predictions(
    path: str | Path,
    items: Sequence[Any],
    predict: BatchFn | Callable[[Sequence[Any]], Iterable[dict[str, Any]]],
    *,
    description: str = "judging",
    item_id: Callable[[Any], Any] = lambda item: item.id,
    **options: Any,
) -> list[dict[str, Any]]:
    """Predict the items whose ids are not yet in `path`, a batch at a time, and return their rows in order.

    This is the toolkit's one job loop, `jobs.resumable.run_resumable`, with the bar labelled
    `description`; `options` are its (`batch_size`, `engine`, `show_progress`, `finish`). `predict(batch)`
    returns one row (a dict with `id`) per item; a `BatchFn` when it should be built where it runs (one
    model per Ray actor). `finish(batch, outputs)` turns a batch's outputs into its rows in the driver
    (e.g. grading through a cache the driver owns). Rows are flushed per batch to `path.partial`, so a
    killed run loses at most one batch and a re-run picks up where it stopped.
    """
    run = run_resumable(path, items, predict, item_id=item_id, label=description, **options)
    return run.rows_for(item_id(item) for item in items)


def require_every_row(item_ids: Sequence[str], predicted: Iterable[str]) -> None:
    """Refuse predictions that leave rows of the data out, naming a few and the fix.

    A figure over part of a benchmark, written under the provenance (`data_sha256`, `data_rows`) of all of
    it, reads as the benchmark's figure: scoring part of the data is done by reading part of it (`--limit`).
    """
    have = set(predicted)
    missing = [item_id for item_id in item_ids if item_id not in have]
    if missing:
        raise InputError(
            f"the predictions cover {len(item_ids) - len(missing)} of {len(item_ids)} rows; {len(missing)} row(s) "
            f"have none, e.g. {missing[:3]} — predict every row (an undecided one as pred -1), or score the same "
            "part of the data the predictions were made on (--limit N for the first N rows)"
        )


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; floats print with one decimal, `None` as a dash.

    >>> print(markdown_table(["judge", "acc"], [["ours", 71.25], ["ref", None]]))
    | judge | acc |
    | --- | --- |
    | ours | 71.2 |
    | ref | – |
    """

    def cell(value: Any) -> str:
        if value is None:
            return "–"
        if isinstance(value, float):
            return f"{value:.1f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
