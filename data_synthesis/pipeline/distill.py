"""The distill stage: items → `distilled.jsonl`, judge traces from a reasoner and a rewriter; when the stage is
complete, the kept traces as judge-SFT examples in `sft/{train,val}.jsonl`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_synthesis.assemble import write_sft_examples
from data_synthesis.pipeline.inputs import Row, load_rows
from data_synthesis.pipeline.models import for_synthesis, model_for, model_settings
from data_synthesis.pipeline.options import StageOptions, run_rows, stage_options
from data_synthesis.sampling import StageSampling, sampling_for
from jobs.executor import BatchFn
from jobs.jsonl import write_json_atomic
from judge.backends.base import SamplingParams
from judge.backends.spec import ModelSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

__all__ = ["Reasoning", "Rewriting", "run_distill"]


@dataclass(frozen=True)
class Reasoning:
    """The stage's reasoner: a text model (with a `spec`), or one of the world's, writing traces in `style`:
    the scene reasoner (`reads` "scene": exact traces) or the description reasoner (`reads` "description":
    the text reasoner's stand-in, which knows the picture only from its description)."""

    style: str
    spec: ModelSpec | None
    params: SamplingParams
    reads: str = "scene"
    hint: str = "lean"

    def settings(self) -> dict[str, Any]:
        if self.spec is None:
            hint = {"hint": self.hint} if self.reads == "description" and self.hint != "lean" else {}
            return {"kind": self.reads, "style": self.style, **hint}
        return {"kind": "model", **model_settings(self.spec, self.params)}

    def build(self) -> Any:
        from data_synthesis.distill import DescriptionReasoner, ModelReasoner, SceneReasoner

        if self.spec is not None:
            return ModelReasoner(self.spec.build(), self.params)
        if self.reads == "description":
            return DescriptionReasoner(self.style, self.hint)
        return SceneReasoner(self.style)


@dataclass(frozen=True)
class Rewriting:
    """The stage's rewriter: the rules, or (with a `spec`) a model."""

    spec: ModelSpec | None
    params: SamplingParams

    def settings(self) -> dict[str, Any]:
        if self.spec is None:
            return {"kind": "rules"}
        return {"kind": "model", **model_settings(self.spec, self.params)}

    def build(self) -> Any:
        from data_synthesis.distill import ModelRewriter, RuleRewriter

        return RuleRewriter() if self.spec is None else ModelRewriter(self.spec.build(), self.params)


def run_distill(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    reasoner: str = "scene",
    reasoner_style: str = "diff",
    reasoner_hint: str = "lean",
    reasoner_model: ModelSpec | None = None,
    rewriter: str = "rules",
    rewriter_model: ModelSpec | None = None,
    reasoner_sampling: StageSampling | dict[str, Any] | None = None,
    rewriter_sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """Distil judge traces for the items; when the stage is complete, write sft/{train,val}.jsonl.

    `reasoner`: "scene" (exact traces from the world's scene), "description" (the world's text reasoner,
    from the describe stage's description only) or "model" (`reasoner_model`, a text reasoning model).
    `reasoner_hint` is the description reasoner's use of the hint where its reading settles nothing ("lean"
    or "ignore", `world.description_reasoner`). The reasoner's and rewriter's settings are recorded beside the
    traces; a rerun with others is refused unless `overwrite`."""
    from data_synthesis.distill import SceneReasoner, distilled_tokens, summarize_distilled
    from data_synthesis.world import check_hint_use

    how = stage_options(run)  # before any work, not after it
    out_dir = Path(out_dir)
    items = load_rows(input_dir, "items", out_dir)
    reads = "description" if reasoner == "description" else "scene"
    reasoner_spec = model_for(
        "--reasoner", "scene" if reasoner == "description" else reasoner, reasoner_model, needs="--reasoner-model"
    )
    if reasoner_spec is None:
        SceneReasoner(reasoner_style)  # a bad style fails here, before any batch runs
    check_hint_use(reasoner_hint)
    if reasoner_hint != "lean" and reasoner != "description":
        raise ValueError(f"reasoner_hint {reasoner_hint!r} applies to --reasoner description only")
    rewriter_spec = model_for(
        "--rewriter",
        rewriter,
        rewriter_model or reasoner_model,
        free="rules",
        needs="--rewriter-model (or --reasoner-model)",
    )
    concurrency = how["concurrency"]
    reasoning = Reasoning(
        reasoner_style,
        for_synthesis(reasoner_spec, concurrency),
        sampling_for("reasoner", reasoner_sampling),
        reads,
        reasoner_hint,
    )
    rewriting = Rewriting(for_synthesis(rewriter_spec, concurrency), sampling_for("rewriter", rewriter_sampling))
    if rewriter_model is None and reasoning.spec is not None and rewriting.spec is not None:
        rewriting = replace(rewriting, spec=reasoning.spec)  # one spec, so one loaded model, for both
    settings = {"reasoner": reasoning.settings(), "rewriter": rewriting.settings()}

    def finish(rows: list[Row], summary: dict[str, Any]) -> None:
        if how["shard"].count == 1:
            summary.update(write_sft_examples(items, rows, out_dir))
            write_json_atomic(out_dir / "distilled.summary.json", summary)

    return run_rows(
        "distilled",
        items,
        _distill_work(reasoning, rewriting),
        out_dir,
        how,
        reasoning.spec,
        rewriting.spec,
        finish=finish,
        summarize=summarize_distilled,
        tokens=distilled_tokens,
        settings=settings,
    )


def _distiller(reasoning: Reasoning, rewriting: Rewriting) -> Any:
    """The distillation step, built where the batches run."""
    from data_synthesis.distill import Distiller

    return Distiller(reasoning.build(), rewriting.build())


def _distill_work(reasoning: Reasoning, rewriting: Rewriting) -> BatchFn:
    build = partial(_distiller, reasoning, rewriting)
    if reasoning.spec is None and rewriting.spec is None:
        return BatchFn(build, name="distilled")
    return BatchFn.on_models(build, reasoning.spec, rewriting.spec, name="distilled")
