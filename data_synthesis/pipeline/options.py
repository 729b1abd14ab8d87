"""How every per-row stage runs: the options negatives, describe and distill all take, and the one call that
runs such a stage (the stage runner, then its failures checked against the tolerated share)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from data_synthesis.pipeline.inputs import Row
from data_synthesis.pipeline.models import rows_in_flight
from data_synthesis.stage_runner import WHOLE, Shard, check_failures, run_stage, valid_fraction
from jobs.executor import Executor
from judge.backends.spec import ModelSpec

__all__ = ["DEFAULT_MAX_FAILED_FRACTION", "STAGE_DEFAULTS", "StageOptions", "run_rows", "stage_options"]

DEFAULT_MAX_FAILED_FRACTION = 0.05
"""A stage whose failed rows stay at or under this share of its input still succeeds (exit status 0)."""


class StageOptions(TypedDict, total=False):
    """How a per-row stage runs: the keywords `run_negatives`, `run_describe` and `run_distill` all take
    (defaults in `STAGE_DEFAULTS`)."""

    shard: Shard
    """This job's part of the rows (`--shard i/n`)."""
    batch_size: int
    """Rows per batch (model stages batch their requests by it)."""
    concurrency: int
    """Rows in flight when every model of the stage is behind HTTP (else 1)."""
    max_failed_fraction: float
    """Failed rows above this share of the input make the stage fail (`TooManyFailures`)."""
    show_progress: bool
    engine: Executor | None
    """Where batches run: this process (None) or Ray (`engine_of`)."""
    overwrite: bool
    """Start the stage's output over instead of resuming it (`--overwrite`)."""


STAGE_DEFAULTS: StageOptions = {
    "shard": WHOLE,
    "batch_size": 16,
    "concurrency": 1,
    "max_failed_fraction": DEFAULT_MAX_FAILED_FRACTION,
    "show_progress": True,
    "engine": None,
    "overwrite": False,
}


def stage_options(options: dict[str, Any]) -> StageOptions:
    """`options` over `STAGE_DEFAULTS`, checked before any work (an unknown keyword is a `TypeError`, as a
    plain signature would raise)."""
    unknown = sorted(set(options) - set(STAGE_DEFAULTS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; a stage takes {list(STAGE_DEFAULTS)}")
    merged: StageOptions = {**STAGE_DEFAULTS, **options}  # type: ignore[typeddict-item]
    valid_fraction(merged["max_failed_fraction"])
    return merged


def run_rows(
    stage: str,
    rows: list[Row],
    process: Any,
    out_dir: str | Path,
    options: StageOptions,
    *models: ModelSpec | None,
    finish: Callable[[list[Row], dict[str, Any]], None] | None = None,
    **more: Any,
) -> tuple[list[Row], dict[str, Any]]:
    """`run_stage` with the models' concurrency limit; then `finish(rows, summary)`, then a stage with too many
    failed rows is refused."""
    run = {k: v for k, v in options.items() if k != "max_failed_fraction"}
    run["concurrency"] = rows_in_flight(options["concurrency"], *models)
    rows, summary = run_stage(stage, rows, process, out_dir, **run, **more)
    if finish is not None:
        finish(rows, summary)
    check_failures(summary, options["max_failed_fraction"])
    return rows, summary
