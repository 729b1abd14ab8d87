"""Does judge GRPO make a better judge than SFT alone, and than more SFT for the same time?

From one SFT judge (the demo's recipe, `tiny_world.recipe`), on a pool of its own (`tiny_world.judge_pool`:
fresh world records SFT never saw, every negative, both display orders, the SFT judge's wrong or
inconsistent pairs plus as many right ones), three arms are trained and judged on one held-out set:

- `sft`: the SFT judge as it is;
- `grpo`: TRL GRPO on the pool (`loss_type` grpo, a small KL, lr warm-up), once per seed;
- `sft_more`: TRL SFT on the same pool's traces, made as the SFT judge's were (exact, or distilled with
  `--traces distilled`), for the GRPO runs' mean wall-clock time (the honest control: more supervised data
  of the same kind is what RL must beat to be worth it).

The held-out set is every negative of the SFT world's validation records (~960 pairs), judged greedily in
both display orders; an undecided pair counts 0.5 (`tiny_world.heldout`). Choices (learning rate, steps, KL)
are made with `--report dev`: the same figures on the pool world's dev records, which neither arm trains on;
the reported held-out set is never looked at for them. `grpo_gain` is the mean over seeds of GRPO's
held-out accuracy minus SFT's; its 95 % interval is a paired bootstrap over held-out pairs, pooled over
seeds. Prints one JSON line; writes `gain.png` (accuracy by arm and by flaw evidence) and `curves.png`.

    python -m benchmarks.judge_grpo_gain --out runs/judge_grpo_gain                 # trains the SFT judge first
    python -m benchmarks.judge_grpo_gain --demo runs/demo --out runs/judge_grpo_gain  # a demo folder's SFT judge
    python -m benchmarks.judge_grpo_gain --demo runs/demo --report dev --seeds 0      # for choices
    python -m benchmarks.judge_grpo_gain --traces distilled --describe-error-rate 0.2 --reasoner-hint ignore \
        --temperature 1.0 --grpo-max-steps 300 --out runs/distilled   # the paper's distillation, dev's choices

Run time, bare at the defaults (exact traces, 3 seeds; the demo's judge trained up to SFT first, 614 s of it):
1,293 s on 2 quiet cores, peak RSS 1.0 GB. With `--demo`, the pool is filtered once (76 s here) and then reused
from `OUT/pool/pool.json`. Figures and what was tried: docs/learning.md, "RL that teaches".
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.kit import emit, rounded
from benchmarks.workers import paired_bootstrap
from data_synthesis.world import HINT_USES
from jobs.jsonl import read_jsonl
from tiny_world.demo.config import DemoConfig
from tiny_world.demo.runner import demo_figures, demo_judge, demo_recipe, demo_stage_hash, run_stages
from tiny_world.demo.stages.training import log_stats
from tiny_world.heldout import UNDECIDED_CREDIT, evidence_of, score_verdicts
from tiny_world.judge_pool import (
    POOL_SEED_OFFSET,
    all_pairs,
    content_key,
    filter_pool,
    split_dev,
    write_pool_items,
    write_pool_sft,
    write_pool_world,
)
from tiny_world.recipe import TRACES, History, TinyJudgeRecipe


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge_grpo_gain", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/judge_grpo_gain"))
    parser.add_argument(
        "--demo", type=Path, help="a demo folder whose stages up to `sft` are done (default: train one)"
    )
    parser.add_argument("--report", choices=("heldout", "dev"), default="heldout", help="the set figures are on")
    parser.add_argument(
        "--traces",
        choices=TRACES,
        help="SFT traces: exact (the scene's) or distilled (the paper's, from descriptions with errors); "
        "default: the --demo folder's, else exact",
    )
    parser.add_argument(
        "--describe-error-rate",
        type=float,
        help="distilled traces: the describer's per-fact error rate (default: the --demo folder's, else 0.2, the rate dev chose)",
    )
    parser.add_argument(
        "--reasoner-hint",
        choices=HINT_USES,
        help="distilled traces: the text reasoner leans on the hint where its reading settles nothing, or ignores "
        "it (the filter then drops those items); default: the --demo folder's, else lean",
    )
    parser.add_argument("--seeds", default="0,1,2", help="GRPO seeds, comma-separated")
    parser.add_argument("--pool-n", type=int, default=700, help="fresh world records drawn for the pool")
    parser.add_argument("--dev-fraction", type=float, default=0.2, help="share of them set apart for choices")
    parser.add_argument("--heldout-n", type=int, help="held-out pairs (default: all)")
    # GRPO's settings: the demo recipe's (`TinyJudgeRecipe.grpo_*`, `num_generations`) unless given here.
    parser.add_argument("--grpo-max-steps", type=int)
    parser.add_argument("--grpo-learning-rate", type=float)
    parser.add_argument("--beta", type=float, help="KL coefficient (GRPO's beta)")
    parser.add_argument("--loss-type", help="TRL's loss_type (the recipe's: grpo, as the paper describes)")
    parser.add_argument("--warmup-steps", type=float, help="lr warm-up steps, or a share of the steps below 1")
    parser.add_argument("--temperature", type=float, help="GRPO's sampling temperature")
    parser.add_argument("--num-generations", type=int, help="GRPO's group size")
    parser.add_argument("--per-device-train-batch-size", type=int, help="GRPO's completions per step")
    parser.add_argument("--sft-more-learning-rate", type=float, default=1e-4)
    parser.add_argument(
        "--no-sft-more", dest="sft_more", action="store_false", help="skip the more-SFT control (choices only)"
    )
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    return parser.parse_args(argv)


def sft_world(demo: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """The demo world's records with their negatives (image paths absolute) and its validation-split ids."""
    folder = demo / "negatives"
    rows = [
        {**row, "image": str((folder / row["image"]).resolve())} for _, row in read_jsonl(folder / "negatives.jsonl")
    ]
    val = {item["id"] for _, item in read_jsonl(demo / "distill" / "items.jsonl") if item["meta"]["split"] == "val"}
    return rows, val


def build_pool(
    recipe: TinyJudgeRecipe, demo: Path, rows: list[dict[str, Any]], folder: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The filtered pool's files (`rl.jsonl`, `sft.jsonl`) and figures, and the dev records. A finished pool
    made from the same SFT judge and settings is reused (`pool.json`): filtering is the slowest step."""
    from jobs.jsonl import write_json_atomic

    key = {"demo": str(demo.resolve()), "sft": demo_stage_hash(demo, "sft"), "pool_n": args.pool_n}
    key.update(dev_fraction=args.dev_fraction, seed=recipe.seed, traces=recipe.traces)
    key.update(describe_error_rate=recipe.describe_error_rate)
    if recipe.reasoner_hint != "lean":  # keyed only when set, so pools made before the setting stay reusable
        key.update(reasoner_hint=recipe.reasoner_hint)
    pool_rows, dev_rows = split_dev(
        write_pool_world(recipe, folder, args.pool_n, exclude={content_key(r) for r in rows}),
        args.dev_fraction,
        recipe.seed,
    )
    record = folder / "pool.json"
    if record.is_file() and json.loads(record.read_text()).get("key") == key:
        return json.loads(record.read_text())["figures"], dev_rows
    candidates = all_pairs(pool_rows)
    verdicts, filter_s = judge_pairs(recipe, demo_judge(demo, "sft"), candidates)
    kept, figures = filter_pool(candidates, verdicts, recipe.seed)
    figures["filter_s"] = round(filter_s, 1)
    write_pool_items(kept, folder / "rl.jsonl")
    figures["sft_traces"] = write_pool_sft(
        kept,
        folder / "sft.jsonl",
        recipe.reasoner_style,
        traces=recipe.traces,
        describe_error_rate=recipe.describe_error_rate,
        reasoner_hint=recipe.reasoner_hint,
        seed=recipe.seed + POOL_SEED_OFFSET,
    )
    write_json_atomic(record, {"key": key, "figures": figures})
    return figures, dev_rows


def report_set(recipe: TinyJudgeRecipe, demo: Path, args: argparse.Namespace) -> tuple[dict[str, Any], list[Any]]:
    """The pool's figures (`build_pool`, in `args.out`) and the pairs the figures are on: the SFT world's
    validation pairs (the first `args.heldout_n`), or with `--report dev` every pair of the pool world's dev
    records. `benchmarks.judge_sampled` rebuilds a run's pairs with it."""
    rows, val_ids = sft_world(demo)
    pool, dev_rows = build_pool(recipe, demo, rows, args.out / "pool", args)
    if args.report == "dev":
        return pool, all_pairs(dev_rows)
    return pool, all_pairs(row for row in rows if row["id"] in val_ids)[: args.heldout_n]


def trace_figures(recipe: TinyJudgeRecipe, demo: Path, pool: dict[str, Any], rl: Path) -> dict[str, Any]:
    """Where the SFT traces came from and what distillation kept: for the SFT judge's data (`sft`) and for
    the pool's more-SFT control (`pool`); `grpo_on_dropped_items` counts GRPO's pool items that have no
    trace (judge GRPO needs only their label)."""
    distill, traced = demo_figures(demo, "distill"), pool.get("sft_traces", {})
    dropped = set(traced.get("dropped", ()))
    rl_ids = [row["id"] for _, row in read_jsonl(rl)]
    return {
        "traces": recipe.traces,
        "reasoner_hint": recipe.reasoner_hint,
        "describe_error_rate": {
            "set": recipe.describe_error_rate,
            "measured": distill.get("measured_error_rate", 0.0),
            "measured_pool": traced.get("measured_error_rate", 0.0),
        },
        "traces_kept": {
            "sft": distill["sft_train"] + distill["sft_val"],
            "sft_fraction": distill["kept_fraction"],
            "sft_drop_reasons": distill.get("drop_reasons", {}),
            "pool": traced.get("kept", traced.get("examples")),
            "pool_items": traced.get("items", traced.get("examples")),
            "pool_drop_reasons": traced.get("drop_reasons", {}),
        },
        "traces_false_fact_share": {
            "sft": distill.get("false_fact_share", 0.0),
            "pool": traced.get("false_fact_share", 0.0),
        },
        "grpo_on_dropped_items": sum(item_id in dropped for item_id in rl_ids),
        "grpo_pool_items": len(rl_ids),
    }


def judge_pairs(recipe: TinyJudgeRecipe, model: Path, pairs: list[Any]) -> tuple[list[Any], float]:
    """The judge's verdicts on `pairs` (greedy, both display orders) and the seconds it took."""
    start = time.perf_counter()
    judge = recipe.judge(model, image_root=None, batch_size=16)
    verdicts = judge.select(pairs)
    del judge
    gc.collect()
    return verdicts, time.perf_counter() - start


def credits(pairs: list[Any], verdicts: list[Any]) -> list[float]:
    return [UNDECIDED_CREDIT if v.choice is None else float(v.choice == p.label) for p, v in zip(pairs, verdicts)]


def figures_of(pairs: list[Any], verdicts: list[Any]) -> dict[str, Any]:
    scored = score_verdicts(pairs, verdicts)
    return {
        "accuracy": scored["accuracy"],
        "image_flaws": scored["per_evidence"].get("image"),
        "text_flaws": scored["per_evidence"].get("text"),
        "consistency": scored["consistency"],
        "per_kind": scored["per_kind"],
    }


def time_budget(seconds: float) -> Any:
    """A TrainerCallback that stops training once `seconds` of wall-clock time have passed since it began."""
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - self.start >= seconds:
                control.should_training_stop = True

    return TimeBudget()


def train_grpo(recipe: TinyJudgeRecipe, args: argparse.Namespace, sft: Path, pool: Path, out: Path, seed: int) -> dict:
    from training.grpo import build_grpo_trainer
    from training.recipe import run_recipe

    given = {
        "max_steps": args.grpo_max_steps,
        "learning_rate": args.grpo_learning_rate,
        "beta": args.beta,
        "loss_type": args.loss_type,
        "warmup_steps": args.warmup_steps,
        "temperature": args.temperature,
        "num_generations": args.num_generations,
        "per_device_train_batch_size": args.per_device_train_batch_size,
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    config = recipe.grpo_config(sft, pool, out, logging_steps=1, seed=seed, **overrides)
    history = History()
    start = time.perf_counter()
    run_recipe(build_grpo_trainer, config, [history.callback()])
    names = ("max_steps", "learning_rate", "beta", "loss_type", "warmup_steps", "temperature", "num_generations")
    settings = {name: getattr(config, name) for name in (*names, "per_device_train_batch_size")}
    return {"wall_s": time.perf_counter() - start, "logs": history.logs, "settings": settings}


def train_sft_more(recipe: TinyJudgeRecipe, args: argparse.Namespace, sft: Path, data: Path, out: Path, seconds: float):
    from training.recipe import run_recipe
    from training.sft import build_sft_trainer

    config = recipe.sft_config(
        sft,
        data,
        out,
        max_steps=100_000,  # stopped by the time budget
        learning_rate=args.sft_more_learning_rate,
        lr_scheduler_type="constant_with_warmup",
        lr_scheduler_kwargs={},
        warmup_steps=5,
        logging_steps=5,
        freeze_vision=recipe.freeze_vision,
    )
    history = History()
    start = time.perf_counter()
    run_recipe(build_sft_trainer, config, [history.callback(), time_budget(seconds)])
    steps = max((row["step"] for row in history.logs), default=0)
    return {"wall_s": time.perf_counter() - start, "logs": history.logs, "steps": steps}


def plot(path: Path, arms: dict[str, dict[str, Any]], title: str) -> Path:
    from eval.plots import bar_chart

    return bar_chart(
        path,
        {
            "overall": {k: 100 * f["accuracy"] for k, f in arms.items()},
            "image flaws": {k: None if f["image_flaws"] is None else 100 * f["image_flaws"] for k, f in arms.items()},
            "text flaws": {k: None if f["text_flaws"] is None else 100 * f["text_flaws"] for k, f in arms.items()},
            "consistency": {k: 100 * f["consistency"] for k, f in arms.items()},
        },
        title=title,
        ylabel="%",
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    began = time.perf_counter()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    demo = args.demo
    if demo is None:  # the demo's judge recipe up to SFT, in the benchmark's own folder (resumable)
        demo = out / "demo"
        traces = args.traces or "exact"
        rate = (0.2 if args.describe_error_rate is None else args.describe_error_rate) if traces == "distilled" else 0.0
        hint = args.reasoner_hint or "lean"
        config = DemoConfig(grpo_max_steps=0, traces=traces, describe_error_rate=rate, reasoner_hint=hint)
        run_stages(config, demo, until="sft")
    recipe = demo_recipe(demo)
    given = {
        "traces": args.traces,
        "describe_error_rate": args.describe_error_rate,
        "reasoner_hint": args.reasoner_hint,
    }
    for name, value in given.items():
        if value is not None and value != getattr(recipe, name):
            raise SystemExit(f"--{name.replace('_', '-')} {value}: {demo} was made with {getattr(recipe, name)}")
    sft = demo_judge(demo, "sft")

    pool, report = report_set(recipe, demo, args)
    print(f"pool {pool}; reporting on {len(report)} {args.report} pairs", file=sys.stderr)

    sft_verdicts, _ = judge_pairs(recipe, sft, report)
    arms = {"sft": figures_of(report, sft_verdicts)}
    base = credits(report, sft_verdicts)
    runs, grpo_credits, grpo_figures = [], [], []
    for seed in seeds:
        run = train_grpo(recipe, args, sft, out / "pool" / "rl.jsonl", out / f"grpo-{seed}", seed)
        verdicts, _ = judge_pairs(recipe, out / f"grpo-{seed}", report)
        grpo_credits.append(credits(report, verdicts))
        grpo_figures.append(figures_of(report, verdicts))
        runs.append(run)
        print(f"grpo seed {seed}: {grpo_figures[-1]} in {run['wall_s']:.0f} s", file=sys.stderr)
    mean = {  # a flaw share is None where the report set has no such pair
        key: sum(values) / len(values) if (values := [f[key] for f in grpo_figures if f[key] is not None]) else None
        for key in ("accuracy", "image_flaws", "text_flaws", "consistency")
    }
    arms["grpo"] = mean
    grpo_s = sum(run["wall_s"] for run in runs) / len(runs)
    more: dict[str, Any] = {"logs": [], "steps": 0, "wall_s": 0.0}
    more_credits: list[float] | None = None
    if args.sft_more:
        more = train_sft_more(recipe, args, sft, out / "pool" / "sft.jsonl", out / "sft-more", grpo_s)
        more_verdicts, _ = judge_pairs(recipe, out / "sft-more", report)
        arms["sft_more"] = figures_of(report, more_verdicts)
        more_credits = credits(report, more_verdicts)
    more_accuracy = arms["sft_more"]["accuracy"] if "sft_more" in arms else None
    low, high = paired_bootstrap(base, grpo_credits, args.bootstrap, recipe.seed)
    zero = [0.0] * len(base)  # an arm's own accuracy interval: its credits against nothing
    intervals = {
        "heldout_sft_ci95": paired_bootstrap(zero, [base], args.bootstrap, recipe.seed),
        "heldout_grpo_ci95": paired_bootstrap(zero, grpo_credits, args.bootstrap, recipe.seed),
        "heldout_sft_more_ci95": None
        if more_credits is None
        else paired_bootstrap(zero, [more_credits], args.bootstrap, recipe.seed),
        "grpo_vs_sft_more_ci95": None
        if more_credits is None
        else paired_bootstrap(more_credits, grpo_credits, args.bootstrap, recipe.seed),
    }
    zero_std = [log_stats(run["logs"], "frac_reward_zero_std", share=0.2) for run in runs]  # first and last fifth
    entropy = [log_stats(run["logs"], "entropy", share=0.2) for run in runs]

    def seed_mean(pairs: list[tuple[float | None, float | None]], end: int) -> float | None:
        values = [p[end] for p in pairs if p[end] is not None]
        return sum(values) / len(values) if values else None

    result = {
        "benchmark": "judge_grpo_gain",
        "report_set": args.report,
        **trace_figures(recipe, demo, pool, out / "pool" / "rl.jsonl"),
        "heldout_sft": arms["sft"]["accuracy"],
        "heldout_grpo": arms["grpo"]["accuracy"],
        "heldout_sft_more": more_accuracy,
        "heldout_grpo_per_seed": [f["accuracy"] for f in grpo_figures],
        "grpo_gain": arms["grpo"]["accuracy"] - arms["sft"]["accuracy"],
        "grpo_gain_ci95_low": low,
        "grpo_gain_ci95_high": high,
        "grpo_vs_sft_more": None if more_accuracy is None else arms["grpo"]["accuracy"] - more_accuracy,
        **intervals,
        **{f"image_flaws_{arm}": arms[arm]["image_flaws"] for arm in arms},
        **{f"text_flaws_{arm}": arms[arm]["text_flaws"] for arm in arms},
        **{f"consistency_{arm}": arms[arm]["consistency"] for arm in arms},
        "frac_reward_zero_std_first": seed_mean(zero_std, 0),
        "frac_reward_zero_std_last": seed_mean(zero_std, 1),
        "entropy_first": seed_mean(entropy, 0),
        "entropy_last": seed_mean(entropy, 1),
        "pool": {k: v for k, v in pool.items() if k != "sft_traces"},
        "report_pairs": len(report),
        "image_share_report": sum(evidence_of(p.meta["flaw"]) == "image" for p in report) / len(report),
        "seeds": seeds,
        "grpo": {**runs[0]["settings"], "train_s": grpo_s},
        "sft_more": {
            "learning_rate": args.sft_more_learning_rate,
            "steps": more["steps"],
            "train_s": more["wall_s"],
        },
        "wall_s": time.perf_counter() - began,
    }
    result = rounded(result)
    (out / "history.json").write_text(json.dumps({"grpo": [r["logs"] for r in runs], "sft_more": more["logs"]}))
    credited = {"ids": [p.id for p in report], "sft": base, "grpo": grpo_credits, "sft_more": more_credits}
    (out / "credits.json").write_text(json.dumps(credited))  # per pair: what a later interval is drawn from
    plot(
        out / "gain.png",
        arms,
        f"Judge on {len(report)} {args.report} pairs: SFT, + GRPO (mean of {len(seeds)}), + more SFT",
    )
    from eval.plots import training_curves

    training_curves(out / "curves.png", sft=more["logs"] or None, grpo=runs[0]["logs"])
    (out / "result.json").write_text(json.dumps(result, indent=1))
    emit(result)
    return result


if __name__ == "__main__":
    main()
