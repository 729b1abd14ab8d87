"""The describe stage: negatives → `described.jsonl`, a text description of every record's image."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_synthesis.pipeline.inputs import Row, load_rows
from data_synthesis.pipeline.models import for_synthesis, model_for, model_settings, on_model, overrides
from data_synthesis.pipeline.options import StageOptions, run_rows, stage_options
from data_synthesis.sampling import StageSampling, sampling_for
from judge.backends.spec import ModelSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

__all__ = ["run_describe"]


def run_describe(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    describer: str = "scene",
    describe_error_rate: float = 0.0,
    seed: int = 0,
    model: ModelSpec | None = None,
    max_new_tokens: int | None = None,
    sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """A description of every record's image; settings recorded and checked as `run_negatives`' are.

    The scene describer misreads each fact with probability `describe_error_rate` (drawn from `seed` and the
    record's id: `data_synthesis.describe.SceneDescriber`); a model describer makes its own errors."""
    from data_synthesis.describe import ModelDescriber, SceneDescriber, described_tokens, measured_error_rate

    how = stage_options(run)  # before any work, not after it
    rows = load_rows(input_dir, "negatives", out_dir)
    params = sampling_for("describer", overrides("describer", sampling, max_tokens=max_new_tokens))
    settings: dict[str, Any] = {"describer": describer}
    model = model_for("--describer", describer, model)
    if model is None:
        process: Any = SceneDescriber(describe_error_rate, seed)
        if describe_error_rate:
            settings |= {"error_rate": describe_error_rate, "seed": seed}
    else:
        model = for_synthesis(model, how["concurrency"])
        process = on_model(ModelDescriber, model, params=params, image_root=out_dir)
        settings |= model_settings(model, params)
    more: dict[str, Any] = {"tokens": described_tokens, "settings": settings}
    if describe_error_rate:
        more["summarize"] = lambda described: {"measured_error_rate": measured_error_rate(described)}
    return run_rows("described", rows, process, out_dir, how, model, **more)
