"""The negatives stage: records → `negatives.jsonl`, flawed answers from the scene or from an MLLM."""

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

__all__ = ["run_negatives"]


def run_negatives(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    generator: str = "scene",
    model: ModelSpec | None = None,
    n: int = 3,
    seed: int = 0,
    max_attempts: int = 3,
    max_new_tokens: int | None = None,
    sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """Negatives for every record; `sampling` is the generator's decoding (its seed defaults to `seed`).

    The settings that shape the negatives are recorded beside them: a rerun with others is refused (naming
    them) unless `overwrite`, which writes them all again."""
    from data_synthesis.negatives import ModelNegatives, SceneNegatives, negatives_tokens, summarize_negatives

    how = stage_options(run)  # before any work, not after it
    rows = load_rows(input_dir, "records", out_dir)
    decoding = overrides("generator", sampling, max_tokens=max_new_tokens)
    params = sampling_for("generator", decoding)
    settings: dict[str, Any] = {"generator": generator, "n": n, "seed": seed}
    model = model_for("--generator", generator, model, needs="--model (a folder, hub id or server URL)")
    if model is None:
        process: Any = SceneNegatives(n=n, seed=seed)
    else:
        model = for_synthesis(model, how["concurrency"])
        gen_seed = seed if decoding.seed is None else decoding.seed
        options = dict(n=n, seed=gen_seed, max_attempts=max_attempts, params=params, image_root=out_dir)
        process = on_model(ModelNegatives, model, **options)
        settings |= model_settings(model, params, seed=gen_seed, max_attempts=max_attempts)
    return run_rows(
        "negatives",
        rows,
        process,
        out_dir,
        how,
        model,
        summarize=summarize_negatives,
        tokens=negatives_tokens,
        settings=settings,
    )
