"""The judge on the held-out set, as `untrained`, `sft` and `evaluate` each score it: the VL-RewardBench scorer
in mc mode (both display orders), then scored by kind and flaw with the one rule for undecided items
(`tiny_world.heldout`); and those figures in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiny_world.demo.stages.context import StageContext, fmt

__all__ = ["JUDGE_NAME", "heldout_eval", "heldout_line"]

JUDGE_NAME = {"untrained": "untrained judge", "sft": "judge after SFT", "evaluate": "judge after SFT + GRPO"}


def heldout_eval(
    ctx: StageContext, model: Path, out: Path, judge_name: str, limit: int | None = None
) -> dict[str, Any]:
    """The judge on the VL-RewardBench-format held-out set (its first `limit` pairs), run by the VL-RewardBench
    scorer in mc mode, then scored by kind and flaw with the one rule for undecided items (`tiny_world.heldout`)."""
    from eval.common import read_predictions
    from eval.pairwise import mc_predict
    from eval.pairwise_run import run_pairwise
    from eval.vl_rewardbench import BENCHMARK, load_vl_rewardbench, protocol
    from jobs.jsonl import read_jsonl
    from tiny_world.heldout import score_choices

    config = ctx.config
    data = ctx.out / ctx.figures("heldout")["file"]
    items = load_vl_rewardbench(data, limit=limit)
    judge = config.recipe().judge(model, image_root=None, batch_size=config.eval_batch_size)
    metrics = run_pairwise(
        BENCHMARK,
        items,
        out,
        lambda batch: mc_predict(judge, batch),
        batch_size=config.eval_batch_size,
        judge_name=judge_name,
        protocol=protocol("mc", orders=2),
        show_progress=ctx.console is not None,
    )
    meta = {row["id"]: {k: row[k] for k in ("kind", "flaw") if k in row} for _, row in read_jsonl(data)}
    scored = score_choices(
        {"choice": row["pred"], "label": row["preferred"], "consistent": row.get("consistent"), **meta[row["id"]]}
        for row in read_predictions(out / "predictions.jsonl")
    )
    return {
        **{k: scored[k] for k in ("accuracy", "accuracy_strict", "n", "decided", "consistency")},
        # The official scorer's figure: undecided items leave its denominators.
        "vlrb_accuracy": metrics["overall_accuracy"],
        **{k: scored[k] for k in ("per_kind", "per_evidence", "per_flaw", "flaw_counts")},
        "report": ctx.rel(out / "report.md"),
        "plots": [],  # the per-run charts are in the report; `evaluate` shows the trained judge's
    }


def heldout_line(figures: dict[str, Any]) -> str:
    """`heldout_eval`'s figures in one line (the lines of `untrained`, `sft` and `evaluate` start with it)."""
    return (
        f"held-out accuracy {fmt(figures['accuracy'])} ({figures['decided']}/{figures['n']} decided, "
        f"undecided counted 0.5), consistency {fmt(figures['consistency'], 2)}; "
        + _evidence_text(figures["per_evidence"])
    )


def _evidence_text(per_evidence: dict[str, float]) -> str:
    return ", ".join(f"{k} flaws {per_evidence[k]:.2f}" for k in ("image", "text") if k in per_evidence)
