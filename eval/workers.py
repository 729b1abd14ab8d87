"""Benchmark work that builds its model where it runs: in this process, or once per Ray actor.

A benchmark run names its judge (`JudgeSpec`: a `ModelSpec` plus a `JudgeConfig`) instead of handing over
a loaded one, so the same run can go to `--engine ray`, where every actor loads its own copy. With the
local engine the spec is built once, in this process, exactly as a loaded judge would be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from jobs.executor import BatchFn
from jobs.judge_file import JudgeSpec, select_work
from judge.backends.spec import ModelSpec

__all__ = ["JudgeSpec", "mc_work", "official_work", "select_work"]


def _mc_predictor(spec: JudgeSpec) -> Callable[[Sequence[Any]], list[dict[str, Any]]]:
    from eval.pairwise import mc_predict

    return partial(mc_predict, spec.build())


def mc_work(spec: JudgeSpec) -> BatchFn:
    """Pairwise items → `mc_predict` rows, with the MC judge built where the batches run."""
    return BatchFn.on_models(partial(_mc_predictor, spec), spec.model, name="mc")


def _official_predictor(predict: Callable[..., Any], spec: ModelSpec, config: Any) -> Callable[[Sequence[Any]], Any]:
    return partial(predict, spec.build(), config=config)


def official_work(predict: Callable[..., Any], spec: ModelSpec, config: Any) -> BatchFn:
    """A benchmark's official protocol (`predict(backend, items, config=…)`) on a backend built where it runs."""
    return BatchFn.on_models(partial(_official_predictor, predict, spec, config), spec, name="official")
