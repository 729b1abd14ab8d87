"""The evaluation stages: the trained judge on the held-out set beside the untrained and SFT judges, and
MM-Vet-style best-of-N, the judge picking one of N answers, scored by the real MM-Vet runner on a set in
its official format made from the synthetic world (`tiny_world.synthetic_eval`)."""

from __future__ import annotations

from typing import Any

from tiny_world.demo.stages.context import Stage, StageContext
from tiny_world.demo.stages.heldout_eval import JUDGE_NAME, heldout_eval, heldout_line

__all__ = ["BEST_OF_N", "EVALUATE"]


def evaluate(ctx: StageContext) -> dict[str, Any]:
    from eval.plots import bar_chart

    figures = heldout_eval(ctx, ctx.out / ctx.figures("grpo")["model"], ctx.folder / "vlrb", JUDGE_NAME["evaluate"])
    stages = {"untrained": ctx.figures("untrained"), "after SFT": ctx.figures("sft"), "after GRPO": figures}
    chart = bar_chart(
        ctx.folder / "heldout_by_stage.png",
        {
            "accuracy": {k: 100 * f["accuracy"] for k, f in stages.items()},
            "order consistency": {k: 100 * f["consistency"] for k, f in stages.items()},
        },
        title="Held-out pairs (VL-RewardBench format, mc mode; undecided counted 0.5)",
        ylabel="%",
    )
    # Image flaws need the picture; a judge that does not look at it is at chance (50 %) on them.
    by_flaw = bar_chart(
        ctx.folder / "heldout_by_flaw.png",
        {name: {k: 100 * v for k, v in f["per_flaw"].items()} for name, f in stages.items() if name != "untrained"},
        title="Held-out accuracy by flaw (hallucinated_*: only the picture shows it)",
        ylabel="accuracy (%)",
    )
    charts = [chart, by_flaw, *sorted((ctx.folder / "vlrb").glob("*.png"))]
    return {**figures, "plots": [ctx.rel(path) for path in charts]}


EVALUATE = Stage(
    name="evaluate",
    title="the trained judge on the held-out set (VL-RewardBench scorer, mc mode: both display orders)",
    fields=("judge_max_new_tokens", "eval_batch_size"),
    after=("grpo", "heldout", "untrained", "sft"),
    run=evaluate,
    line=lambda f: "; ".join([heldout_line(f), *(f"{k} {v:.2f}" for k, v in f["per_kind"].items())]),
    budget=lambda c: f"{c.heldout_n} pairs × 2 orders",
)


def best_of_n(ctx: StageContext) -> dict[str, Any]:
    from eval.mmvet import load_candidates, load_mmvet, run_mmvet, save_candidates
    from tiny_world.policy_data import world_questions
    from tiny_world.synthetic_eval import ExactGrader, KnockoutSelector, best_of_n_candidates, write_mmvet_set

    config = ctx.config
    rows = world_questions(ctx.path("negatives"), ctx.path("distill"), "val")[: config.bon_questions]
    mmvet = write_mmvet_set(rows, ctx.path("negatives"), ctx.folder / "mm-vet")
    questions = load_mmvet(mmvet.resolve())
    candidates = best_of_n_candidates(rows, config.bon_n, gold_share=config.bon_gold_share, seed=config.seed)
    files = save_candidates(candidates, ctx.folder, prefix="candidates")
    judge = config.recipe().judge(
        ctx.out / ctx.figures("grpo")["model"], image_root=None, batch_size=config.eval_batch_size
    )
    metrics = run_mmvet(
        KnockoutSelector(judge, max_options=config.max_options),
        questions,
        load_candidates(files, questions),
        ExactGrader(),
        ctx.folder / "run",
        seed=config.seed,
        batch_size=config.eval_batch_size,
        show_progress=ctx.console is not None,
    )
    return {
        "questions": metrics["n"],
        "n": config.bon_n,
        **{selector: metrics[f"{selector}_total"] for selector in ("first", "random", "judge", "oracle")},
        "judge_consistency": metrics["judge_consistency"],
        "report": ctx.rel(ctx.folder / "run" / "report.md"),
        "plots": [ctx.rel(ctx.folder / "run" / "mmvet_by_capability.png")],
    }


BEST_OF_N = Stage(
    name="best_of_n",
    title="MM-Vet-style best-of-N: the judge picks one of N answers (pairwise knock-out), graded exactly",
    fields=(
        "seed",
        "bon_questions",
        "bon_n",
        "bon_gold_share",
        "max_options",
        "judge_max_new_tokens",
        "eval_batch_size",
    ),
    after=("grpo", "negatives", "distill"),
    run=best_of_n,
    line=lambda f: (
        f"best-of-{f['n']} on {f['questions']} questions: first {f['first']:.2f}, random "
        f"{f['random']:.2f}, judge {f['judge']:.2f}, oracle {f['oracle']:.2f}"
    ),
    budget=lambda c: f"{c.bon_questions} questions × {c.bon_n} candidates",
)
