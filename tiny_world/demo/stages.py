"""The stages of `mrjudge demo`, in order: each is a small function from the config and the earlier stages'
folders to its own folder `OUT/<stage>/` and a dict of key figures (what `stage.json` records).

    world → negatives → distill → heldout → untrained → warmup → sft → pool → grpo → evaluate → best_of_n → policy

The judge is trained by the recipe of `benchmarks/learning_curve.py`, taken from one place
(`tiny_world.recipe.TinyJudgeRecipe`, built by `DemoConfig.recipe()`): shaded world, perception warm-up,
`checks` traces. Evaluation is the real VL-RewardBench scorer (mc mode) and MM-Vet best-of-N runner on sets
in their official formats made from the synthetic world (`tiny_world.synthetic_eval`), scored by flaw with the one
rule for undecided items (`tiny_world.heldout`); the policy's data and judged samples are `tiny_world.policy_data`'s
and it is rewarded by the real reward server (`reward_server`) on a loopback port. Paths in the figures are
relative to OUT, so a finished demo folder can be moved.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reward_server.background import serve_in_thread
from tiny_world.demo.config import DemoConfig

__all__ = ["STAGES", "Stage", "StageContext"]

JUDGE_NAME = {"untrained": "untrained judge", "sft": "judge after SFT", "evaluate": "judge after SFT + GRPO"}


@dataclass
class StageContext:
    """What a stage gets: the config, the demo folder, its own folder, and the earlier stages' figures."""

    config: DemoConfig
    out: Path
    folder: Path
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """stage name → its `stage.json` record (for the stages before this one)."""
    console: Any = None

    def path(self, stage: str, *parts: str) -> Path:
        return self.out.joinpath(stage, *parts)

    def figures(self, stage: str) -> dict[str, Any]:
        return self.done[stage]["figures"]

    def rel(self, path: Path) -> str:
        return os.path.relpath(path, self.out)

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.console is not None:
            self.console.print(*args, **kwargs)


@dataclass(frozen=True)
class Stage:
    """One step of the demo: what it reads from the config, which stages it builds on, how it runs."""

    name: str
    title: str
    fields: tuple[str, ...]
    """Config fields whose values the stage's output depends on (hashed into its `stage.json`)."""
    after: tuple[str, ...]
    """Earlier stages whose output it reads (their hashes are part of its hash)."""
    run: Callable[[StageContext], dict[str, Any]]
    line: Callable[[dict[str, Any]], str]
    """The key figures in one line, for the terminal and the summary table."""
    budget: Callable[[DemoConfig], str] = lambda config: ""
    """The budget in steps or items, printed before the stage runs."""


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _with_progress(build: Callable[..., Any], console: Any, label: str) -> Callable[..., Any]:
    """A trainer builder for `training.common.run_recipe` whose trainer shows one rich progress bar (step,
    latest loss or reward) instead of TRL's tqdm bar and its printed log dicts."""
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    class RichProgress(TrainerCallback):
        def __init__(self) -> None:
            self.progress: Any = None
            self.task: Any = None

        def on_train_begin(self, args, state, control, **kwargs):
            from jobs.progress import new_progress

            self.progress = new_progress(console=console, enabled=console is not None)
            self.progress.start()
            self.task = self.progress.add_task(label, total=state.max_steps)

        def on_step_end(self, args, state, control, **kwargs):
            self.progress.update(self.task, completed=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            shown = [f"{k} {logs[k]:.3g}" for k in ("loss", "reward") if isinstance((logs or {}).get(k), (int, float))]
            if shown:
                self.progress.update(self.task, description=f"{label} ({', '.join(shown)})")

        def on_train_end(self, args, state, control, **kwargs):
            self.progress.stop()

    def quiet_build(config: Any, **kwargs: Any) -> Any:
        trainer = build(config, **kwargs)
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(RichProgress())
        return trainer

    return quiet_build


# -- data --------------------------------------------------------------------------------------------------


def world(ctx: StageContext) -> dict[str, Any]:
    from jobs.progress import new_progress
    from tiny_world.recipe import world_size_for

    config = ctx.config
    total = world_size_for(config.world_n, config.kinds)
    with new_progress("world", enabled=ctx.console is not None) as progress:
        task = progress.add_task("world", total=total)
        rows = config.recipe().write_world(
            ctx.folder / "source", ctx.folder, progress=lambda done: progress.update(task, completed=done)
        )
    by_kind = defaultdict(int)
    for row in rows:
        by_kind[row["source"].split("/")[1]] += 1
    return {
        "drawn": total,
        "records": len(rows),
        "by_kind": dict(sorted(by_kind.items())),
        "px": config.image_size,
        "shaded": config.shaded,
    }


def negatives(ctx: StageContext) -> dict[str, Any]:
    summary = ctx.config.recipe().write_negatives(ctx.path("world"), ctx.folder, show_progress=ctx.console is not None)
    return {"records": summary["n_out"], "negatives": summary["negatives"], "per_flaw": summary["negatives_per_flaw"]}


def distill(ctx: StageContext) -> dict[str, Any]:
    data = ctx.config.recipe().distill(ctx.path("negatives"), ctx.folder, show_progress=ctx.console is not None)
    return {
        "items": data["items"],
        "splits": data["assembled"]["splits"],
        "sft_train": data["sft_train"],
        "sft_val": data["sft_val"],
        "kept_fraction": data["kept_fraction"],
        "reasoner_style": ctx.config.reasoner_style,
    }


def heldout(ctx: StageContext) -> dict[str, Any]:
    from tiny_world.heldout import heldout_pairs
    from tiny_world.synthetic_eval import write_vlrb_set

    pairs = heldout_pairs(ctx.path("distill"), ctx.config.heldout_n, ctx.config.seed)
    if not pairs:
        raise RuntimeError("no validation-split items to hold out: raise world_n or val_fraction")
    path = write_vlrb_set(pairs, ctx.path("distill"), ctx.folder / "vlrb_heldout.jsonl")
    from tiny_world.heldout import evidence_of

    kinds, evidence = defaultdict(int), defaultdict(int)
    for pair in pairs:
        kinds[pair.meta["kind"]] += 1
        evidence[evidence_of(pair.meta["flaw"])] += 1
    return {
        "pairs": len(pairs),
        "asked": ctx.config.heldout_n,
        "first_preferred": sum(p.label == 0 for p in pairs),
        "by_kind": dict(sorted(kinds.items())),
        "by_evidence": dict(sorted(evidence.items())),
        "file": ctx.rel(path),
    }


def _heldout_eval(
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


def _heldout_line(figures: dict[str, Any]) -> str:
    return (
        f"held-out accuracy {_fmt(figures['accuracy'])} ({figures['decided']}/{figures['n']} decided, "
        f"undecided counted 0.5), consistency {_fmt(figures['consistency'], 2)}; "
        + _evidence_text(figures["per_evidence"])
    )


def _evidence_text(per_evidence: dict[str, float]) -> str:
    return ", ".join(f"{k} flaws {per_evidence[k]:.2f}" for k in ("image", "text") if k in per_evidence)


# -- judge training ----------------------------------------------------------------------------------------


def untrained(ctx: StageContext) -> dict[str, Any]:
    from tiny_world.model import build_tiny_model

    model = build_tiny_model(ctx.folder / "model", size=ctx.config.judge_size, seed=ctx.config.seed)
    figures = _heldout_eval(
        ctx, model, ctx.folder / "vlrb", JUDGE_NAME["untrained"], limit=ctx.config.untrained_heldout_n
    )
    return {"model": ctx.rel(model), **figures}


def warmup(ctx: StageContext) -> dict[str, Any]:
    """The perception warm-up of the judge's vision tower on training-split pictures (then frozen)."""
    from jobs.progress import new_progress

    config = ctx.config
    untrained_model = ctx.out / ctx.figures("untrained")["model"]
    with new_progress(enabled=ctx.console is not None and bool(config.vision_warmup_steps)) as progress:
        task = progress.add_task("perception warm-up", total=config.vision_warmup_steps)

        def show(step: int, figures: dict[str, float]) -> None:
            progress.update(task, completed=step, description=f"perception warm-up (loss {figures['loss']:.3g})")

        figures = config.recipe().warm_up(
            untrained_model, ctx.path("world"), ctx.path("distill"), ctx.folder / "model", progress=show
        )
    return {
        "model": ctx.rel(Path(figures["model"])),
        "steps": figures["steps"],
        "frozen": figures["frozen"],
        "train_s": round(figures["wall_s"], 1),
        # The heads' token accuracies on the last batch: does the tower tell kind, colour, size and cell apart?
        "accuracy": {k.removesuffix("_accuracy"): v for k, v in figures.items() if k.endswith("_accuracy")},
    }


def _log_stats(logs: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    """Mean of `key` over the first and the last tenth of the logged steps."""
    values = [r[key] for r in logs if key in r]
    if not values:
        return None, None
    tenth = max(1, len(values) // 10)
    return sum(values[:tenth]) / tenth, sum(values[-tenth:]) / tenth


def _train_judge(
    ctx: StageContext, stage: str, build: Any, model: Path, data: Path, curve: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train the judge by the recipe's `stage` (sft or grpo) from `model` on the `data` file into
    `<stage>/model`, with one progress bar; write `history.json`; return the logged history and the stage's
    training figures (model, steps, wall time, and the mean logged `curve` at the start and the end)."""
    from tiny_world.recipe import History
    from training.common import run_recipe

    steps = getattr(ctx.config, f"{stage}_max_steps")
    trainer_config = getattr(ctx.config.recipe(), f"{stage}_config")(
        model,
        data,
        ctx.folder / "model",
        freeze_vision=ctx.figures("warmup")["frozen"],
        logging_steps=min({"sft": 10, "grpo": 2}[stage], steps),
    )
    history = History()
    start = time.perf_counter()
    run_recipe(_with_progress(build, ctx.console, f"judge {stage.upper()}"), trainer_config, [history.callback()])
    train_s = time.perf_counter() - start
    (ctx.folder / "history.json").write_text(json.dumps(history.logs))
    first, last = _log_stats(history.logs, curve)
    figures = {"model": ctx.rel(ctx.folder / "model"), "steps": steps, "train_s": round(train_s, 1)}
    return history.logs, {**figures, f"{curve}_first": first, f"{curve}_last": last}


def sft(ctx: StageContext) -> dict[str, Any]:
    from eval.plots import training_curves
    from training.sft import build_sft_trainer

    warm = ctx.out / ctx.figures("warmup")["model"]
    logs, trained = _train_judge(ctx, "sft", build_sft_trainer, warm, ctx.path("distill", "sft", "train.jsonl"), "loss")
    training_curves(ctx.folder / "loss.png", sft=logs)
    figures = _heldout_eval(ctx, ctx.folder / "model", ctx.folder / "vlrb", JUDGE_NAME["sft"])
    return {**trained, **figures, "loss_plot": ctx.rel(ctx.folder / "loss.png")}


def pool(ctx: StageContext) -> dict[str, Any]:
    """Judge GRPO's own pool (`tiny_world.judge_pool`): fresh world records SFT never saw, every negative,
    the pairs the SFT judge gets wrong or inconsistent plus as many right ones, in both display orders."""
    from jobs.jsonl import read_jsonl
    from jobs.progress import new_progress
    from tiny_world.judge_pool import all_pairs, content_key, filter_pool, write_pool_items, write_pool_world

    config = ctx.config
    if not config.pool_n:  # the SFT items themselves, as before the pool existed
        return {"file": ctx.rel(ctx.path("distill", "rl", "train.jsonl")), "skipped": True}
    seen = [row for _, row in read_jsonl(ctx.path("negatives", "negatives.jsonl"))]
    rows = write_pool_world(config.recipe(), ctx.folder / "world", config.pool_n, exclude=map(content_key, seen))
    pairs = all_pairs(rows)
    judge = config.recipe().judge(
        ctx.out / ctx.figures("sft")["model"], image_root=None, batch_size=config.eval_batch_size
    )
    with new_progress(enabled=ctx.console is not None) as progress:
        task = progress.add_task("the SFT judge on the pool (both orders)", total=len(pairs))
        verdicts = judge.select(pairs, progress=lambda n: progress.advance(task, n))
    kept, figures = filter_pool(pairs, verdicts, config.seed)
    items = write_pool_items(kept, ctx.folder / "rl.jsonl")
    return {"records": len(rows), **figures, "items": items, "file": ctx.rel(ctx.folder / "rl.jsonl")}


def grpo(ctx: StageContext) -> dict[str, Any]:
    from eval.plots import training_curves
    from training.grpo import build_grpo_trainer

    sft_model = ctx.out / ctx.figures("sft")["model"]
    if ctx.config.grpo_max_steps == 0:
        return {"model": ctx.rel(sft_model), "steps": 0, "skipped": True, "plots": [ctx.figures("sft")["loss_plot"]]}
    data = ctx.out / ctx.figures("pool")["file"]
    logs, trained = _train_judge(ctx, "grpo", build_grpo_trainer, sft_model, data, "reward")
    sft_logs = json.loads(ctx.path("sft", "history.json").read_text())
    training_curves(ctx.folder / "curves.png", sft=sft_logs, grpo=logs)
    zero_first, zero_last = _log_stats(logs, "frac_reward_zero_std")
    entropy_first, entropy_last = _log_stats(logs, "entropy")
    return {
        **trained,
        "frac_reward_zero_std_first": zero_first,
        "frac_reward_zero_std_last": zero_last,
        "entropy_first": entropy_first,
        "entropy_last": entropy_last,
        "plots": [ctx.rel(ctx.folder / "curves.png")],
    }


# -- evaluation --------------------------------------------------------------------------------------------


def evaluate(ctx: StageContext) -> dict[str, Any]:
    from eval.plots import bar_chart

    figures = _heldout_eval(ctx, ctx.out / ctx.figures("grpo")["model"], ctx.folder / "vlrb", JUDGE_NAME["evaluate"])
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


# -- the reward server and policy GRPO ---------------------------------------------------------------------


def _served_requests(url: str, endpoint: str = "/v1/reward") -> int:
    """Answered (200) requests to `endpoint`, read from the server's Prometheus `/metrics`."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:  # noqa: S310 - loopback URL we made
        text = response.read().decode()
    prefix = f'mrjudge_requests_total{{endpoint="{endpoint}",status="200"}} '
    return sum(int(float(line[len(prefix) :])) for line in text.splitlines() if line.startswith(prefix))


def _policy_grpo(ctx: StageContext, start: Path, prompts: Path, url: str, arm: str, funcs: Any) -> list[dict]:
    """One policy GRPO run from the seeing policy `start` into `policy/<arm>`: rewarded by the server (`funcs`
    None) or by `funcs` (the answer key), the same prompts, seed and steps; returns the logged history."""
    from tiny_world.recipe import History
    from tiny_world.seeing_policy import policy_grpo_config, policy_grpo_fields
    from training.common import run_recipe
    from training.policy import build_policy_trainer

    config = ctx.config
    history = History()

    def build(trainer_config: Any, **kwargs: Any) -> Any:
        return build_policy_trainer(trainer_config, reward_funcs=funcs, **kwargs)

    run_recipe(
        _with_progress(build, ctx.console, f"policy GRPO ({arm})"),
        policy_grpo_config(
            start,
            prompts,
            ctx.folder / arm,
            url,
            seed=config.seed,
            **policy_grpo_fields(config, "policy_"),
        ),
        [history.callback()],
    )
    return history.logs


def policy(ctx: StageContext) -> dict[str, Any]:
    """Serve the final judge on loopback; build a seeing policy (its own perception warm-up, frozen tower, SFT
    on right answers); GRPO it with the server as its reward and, beside it, with the answer key (the oracle
    arm: what any reward could teach here). Exact answers on validation questions before and after."""
    from eval.plots import bar_chart, curves_by_run
    from reward_server import create_app
    from reward_server.config import ServerConfig
    from tiny_world.policy_data import rebase_images, world_questions
    from tiny_world.seeing_policy import OracleReward, exact_answers, train_seeing_policy

    config = ctx.config
    negatives, distill = ctx.path("negatives"), ctx.path("distill")
    # GRPO prompts from training-split records, the exact-answer questions from the validation split.
    train = rebase_images(world_questions(negatives, distill, "train"), negatives, ctx.folder / "data")
    heldout_rows = world_questions(negatives, distill, "val")[: config.policy_heldout]
    seeing = train_seeing_policy(
        ctx.path("world"),
        distill,
        train,
        ctx.folder,
        size=config.policy_size,
        seed=config.seed + 1,  # its own warm-up: its misreadings are not the judge's
        warmup_steps=config.policy_vision_warmup_steps,
        sft_max_steps=config.policy_sft_max_steps,
        shaded=config.shaded,
        correct_share=config.policy_correct_share,
        wrap_build=lambda build: _with_progress(build, ctx.console, "policy SFT (right answers)"),
    )

    def measure(model: Path) -> dict[str, Any]:
        options = dict(samples=config.policy_samples, max_new_tokens=config.policy_max_completion_length)
        return exact_answers(model, heldout_rows, negatives, seed=config.seed, **options)

    before = measure(seeing["model"])
    swapped = exact_answers(seeing["model"], heldout_rows, negatives, samples=1, swap_images=True)
    judge_batch = 2 * config.policy_per_device_train_batch_size  # one GRPO step's pairwise games in one batch
    judge = config.recipe().judge(ctx.out / ctx.figures("grpo")["model"], image_root=None, batch_size=judge_batch)
    app = create_app(judge, ServerConfig(port=0, max_batch_items=judge_batch, max_candidates=2))
    arms = {"judge": None, **({"oracle": [OracleReward()]} if config.policy_oracle_arm else {})}
    logs, after, train_s = {}, {}, {}
    with serve_in_thread(app) as url:
        ctx.print(f"reward server on {url} (POST /v1/reward, pairwise against the reference answer)")
        for arm, funcs in arms.items():
            started = time.perf_counter()
            logs[arm] = (
                _policy_grpo(ctx, seeing["model"], seeing["prompts"], url, arm, funcs)
                if config.policy_max_steps
                else []
            )
            train_s[arm] = round(time.perf_counter() - started, 1)
            after[arm] = measure(ctx.folder / arm) if config.policy_max_steps else before
        served = _served_requests(url)
    (ctx.folder / "history.json").write_text(json.dumps(logs))
    answers = {"questions": [r["question"] for r in heldout_rows], "references": [r["answer"] for r in heldout_rows]}
    samples = {"before": before["answers"], **{arm: a["answers"] for arm, a in after.items()}}
    (ctx.folder / "samples.json").write_text(json.dumps({**answers, **samples}, indent=1))
    gain = {arm: round(a["sampled"] - before["sampled"], 4) for arm, a in after.items()}
    chart = bar_chart(
        ctx.folder / "exact_answers.png",
        {
            "before GRPO": {"sampled": 100 * before["sampled"], "greedy": 100 * before["greedy"]},
            **{
                f"after GRPO ({arm} reward)": {"sampled": 100 * a["sampled"], "greedy": 100 * a["greedy"]}
                for arm, a in after.items()
            },
        },
        title=f"Policy: exact answers on {len(heldout_rows)} validation questions",
        ylabel="exact answers (%)",
    )
    curves = curves_by_run(
        ctx.folder / "reward_curve.png",
        {f"{arm} reward": rows for arm, rows in logs.items()},
        title="Policy GRPO: mean reward per step (judge: pairwise vs the reference; oracle: exact match)",
    )
    first, last = _log_stats(logs.get("judge", []), "reward")
    return {
        "server": "127.0.0.1 (loopback), POST /v1/reward, pairwise vs the reference",
        "served_requests": served,
        "prompts": len(train),
        "heldout_questions": len(heldout_rows),
        "warmup_steps": config.policy_vision_warmup_steps,
        "sft_steps": config.policy_sft_max_steps,
        "steps": config.policy_max_steps,
        "train_s": train_s,
        "exact_before": before["sampled"],
        "exact_before_greedy": before["greedy"],
        "exact_swapped_greedy": swapped["greedy"],
        "exact_after": after["judge"]["sampled"],
        "exact_after_greedy": after["judge"]["greedy"],
        "gain": gain["judge"],
        "oracle_exact_after": after["oracle"]["sampled"] if "oracle" in after else None,
        "oracle_gain": gain.get("oracle"),
        "judge_gain_ratio": round(gain["judge"] / gain["oracle"], 3) if gain.get("oracle") else None,
        "train_reward_first": first,
        "train_reward_last": last,
        "sample_after": after["judge"]["answers"]["greedy"][0] if heldout_rows else None,
        "plots": [ctx.rel(chart), ctx.rel(curves)],
    }


# -- the table of stages -----------------------------------------------------------------------------------

STAGES: tuple[Stage, ...] = (
    Stage(
        "world",
        "draw the synthetic world (seeded scenes, gold answers known)",
        ("seed", "kinds", "world_n", "image_size", "shaded"),
        (),
        world,
        lambda f: (
            f"{f['records']} records of {', '.join(f['by_kind'])} ({f['drawn']} drawn), {f['px']} px"
            + (", shaded cells" if f.get("shaded") else "")
        ),
        lambda c: f"{c.world_n} records",
    ),
    Stage(
        "negatives",
        "reverse negatives: exact flawed answers by perturbing the scene",
        ("seed", "negatives_n"),
        ("world",),
        negatives,
        lambda f: f"{f['negatives']} negatives for {f['records']} records ({len(f['per_flaw'])} flaw types)",
    ),
    Stage(
        "distill",
        "descriptions → balanced MC items → distilled reasoning traces (SFT data)",
        ("seed", "max_options", "val_fraction", "reasoner_style", "describe_share"),
        ("negatives",),
        distill,
        lambda f: (
            f"{f['items']} MC items (train {f['splits'].get('train', 0)}, val {f['splits'].get('val', 0)}); "
            f"{f['sft_train']} {f.get('reasoner_style', '')} SFT traces (kept {f['kept_fraction']:.0%})"
        ),
    ),
    Stage(
        "heldout",
        "VL-RewardBench-format held-out pairs from validation records",
        ("seed", "heldout_n"),
        ("distill",),
        heldout,
        lambda f: (
            f"{f['pairs']} pairs ({', '.join(f'{k} {n}' for k, n in f['by_kind'].items())}; "
            f"{', '.join(f'{k} flaws {n}' for k, n in f['by_evidence'].items())}) → {f['file']}"
            + (
                f" (fewer than the {f['asked']} asked: raise world_n or val_fraction)"
                if f["pairs"] < f["asked"]
                else ""
            )
        ),
        lambda c: f"{c.heldout_n} pairs",
    ),
    Stage(
        "untrained",
        "a randomly initialised tiny Qwen2.5-VL judge, judged before training",
        ("seed", "judge_size", "judge_max_new_tokens", "eval_batch_size", "untrained_heldout_n"),
        ("heldout",),
        untrained,
        _heldout_line,
        lambda c: f"the first {min(c.untrained_heldout_n, c.heldout_n)} held-out pairs × 2 orders",
    ),
    Stage(
        "warmup",
        "perception warm-up: the vision tower learns to name each token's shape and cell, then is frozen",
        ("seed", "vision_warmup_steps", "train_vision", "shaded"),
        ("untrained", "distill"),
        warmup,
        lambda f: (
            "skipped (vision_warmup_steps=0)"
            if not f["steps"]
            else f"{f['steps']} steps in {f['train_s']:.0f} s; token accuracy "
            + ", ".join(f"{k} {v:.2f}" for k, v in f["accuracy"].items())
            + ("; tower frozen" if f["frozen"] else "")
        ),
        lambda c: f"{c.vision_warmup_steps} warm-up steps",
    ),
    Stage(
        "sft",
        "warm-up SFT on the distilled traces (TRL SFTTrainer)",
        (
            "seed",
            "sft_max_steps",
            "sft_learning_rate",
            "vision_learning_rate",
            "per_device_train_batch_size",
            "judge_max_new_tokens",
            "eval_batch_size",
        ),
        ("distill", "warmup", "heldout"),
        sft,
        lambda f: (
            f"{f['steps']} steps in {f['train_s']:.0f} s, loss {_fmt(f['loss_first'], 2)} → "
            f"{_fmt(f['loss_last'], 2)}; " + _heldout_line(f)
        ),
        lambda c: f"{c.sft_max_steps} SFT steps × batch {c.per_device_train_batch_size}",
    ),
    Stage(
        "pool",
        "judge GRPO's own pool: fresh records, every negative, where the SFT judge is wrong or unsure (+ as many right)",
        ("seed", "pool_n", "judge_max_new_tokens", "eval_batch_size", "negatives_n"),
        ("sft", "negatives"),
        pool,
        lambda f: (
            "skipped (pool_n=0): GRPO trains on the SFT items"
            if f.get("skipped")
            else f"{f['n']} pairs from {f['records']} fresh records; the SFT judge {_fmt(f['sft_accuracy'])} on "
            f"them; kept {f['hard']} wrong or inconsistent + {f['kept'] - f['hard']} right ({f['image_share']:.0%} "
            f"image flaws) → {f['items']} items in both orders"
        ),
        lambda c: f"{c.pool_n} fresh records × {c.negatives_n} negatives, judged in both orders",
    ),
    Stage(
        "grpo",
        "judge GRPO on its pool (TRL GRPOTrainer, loss grpo, reward 0.9 · correct + 0.1 · format)",
        (
            "seed",
            "grpo_max_steps",
            "grpo_learning_rate",
            "grpo_beta",
            "grpo_loss_type",
            "grpo_warmup_steps",
            "grpo_temperature",
            "num_generations",
            "per_device_train_batch_size",
            "judge_max_new_tokens",
        ),
        ("sft", "pool", "warmup"),
        grpo,
        lambda f: (
            "skipped (grpo_max_steps=0)"
            if f.get("skipped")
            else f"{f['steps']} steps in {f['train_s']:.0f} s, mean reward {_fmt(f['reward_first'])} → "
            f"{_fmt(f['reward_last'])}, zero-variance groups {_fmt(f['frac_reward_zero_std_first'], 2)} → "
            f"{_fmt(f['frac_reward_zero_std_last'], 2)}"
        ),
        lambda c: (
            f"{c.grpo_max_steps} GRPO steps × {c.per_device_train_batch_size // c.num_generations} prompts × "
            f"{c.num_generations} completions"
        ),
    ),
    Stage(
        "evaluate",
        "the trained judge on the held-out set (VL-RewardBench scorer, mc mode: both display orders)",
        ("judge_max_new_tokens", "eval_batch_size"),
        ("grpo", "heldout", "untrained", "sft"),
        evaluate,
        lambda f: "; ".join([_heldout_line(f), *(f"{k} {v:.2f}" for k, v in f["per_kind"].items())]),
        lambda c: f"{c.heldout_n} pairs × 2 orders",
    ),
    Stage(
        "best_of_n",
        "MM-Vet-style best-of-N: the judge picks one of N answers (pairwise knock-out), graded exactly",
        ("seed", "bon_questions", "bon_n", "bon_gold_share", "max_options", "judge_max_new_tokens", "eval_batch_size"),
        ("grpo", "negatives", "distill"),
        best_of_n,
        lambda f: (
            f"best-of-{f['n']} on {f['questions']} questions: first {f['first']:.2f}, random "
            f"{f['random']:.2f}, judge {f['judge']:.2f}, oracle {f['oracle']:.2f}"
        ),
        lambda c: f"{c.bon_questions} questions × {c.bon_n} candidates",
    ),
    Stage(
        "policy",
        "a seeing policy, GRPO-trained with the judge behind the reward server as its reward (TRL GRPOTrainer)",
        (
            "seed",
            "policy_size",
            "policy_vision_warmup_steps",
            "policy_sft_max_steps",
            "policy_correct_share",
            "policy_max_steps",
            "policy_per_device_train_batch_size",
            "policy_num_generations",
            "policy_max_completion_length",
            "policy_learning_rate",
            "policy_beta",
            "policy_heldout",
            "policy_samples",
            "policy_oracle_arm",
            "judge_max_new_tokens",
        ),
        ("grpo", "negatives", "distill", "world"),
        policy,
        lambda f: (
            f"{f['steps']} steps, {f['served_requests']} reward requests served; exact answers (sampled) "
            f"{f['exact_before']:.0%} → {f['exact_after']:.0%} with the judge's reward ({f['gain']:+.3f})"
            + (
                f", → {f['oracle_exact_after']:.0%} with the answer key ({f['oracle_gain']:+.3f}; judge/oracle "
                f"{_fmt(f['judge_gain_ratio'], 2)})"
                if f.get("oracle_gain") is not None
                else ""
            )
        ),
        lambda c: (
            f"{c.policy_vision_warmup_steps} warm-up + {c.policy_sft_max_steps} SFT steps, then "
            f"{1 + c.policy_oracle_arm} × {c.policy_max_steps} GRPO steps × "
            f"{c.policy_per_device_train_batch_size // c.policy_num_generations} prompts × {c.policy_num_generations} completions"
        ),
    ),
)
