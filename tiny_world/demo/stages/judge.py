"""The judge's stages: built untrained and scored, its vision tower warmed up, SFT, its own GRPO pool, GRPO.
SFT and GRPO train by the recipe's trainer configs (`tiny_world.recipe`) through `_train_judge`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tiny_world.demo.stages.context import Stage, StageContext, fmt
from tiny_world.demo.stages.heldout_eval import JUDGE_NAME, heldout_eval, heldout_line
from tiny_world.demo.stages.training import log_stats, with_progress

__all__ = ["GRPO", "POOL", "SFT", "UNTRAINED", "WARMUP"]


def untrained(ctx: StageContext) -> dict[str, Any]:
    from tiny_world.model import build_tiny_model

    model = build_tiny_model(ctx.folder / "model", size=ctx.config.judge_size, seed=ctx.config.seed)
    figures = heldout_eval(
        ctx, model, ctx.folder / "vlrb", JUDGE_NAME["untrained"], limit=ctx.config.untrained_heldout_n
    )
    return {"model": ctx.rel(model), **figures}


UNTRAINED = Stage(
    name="untrained",
    title="a randomly initialised tiny Qwen2.5-VL judge, judged before training",
    fields=("seed", "judge_size", "judge_max_new_tokens", "eval_batch_size", "untrained_heldout_n"),
    after=("heldout",),
    run=untrained,
    line=heldout_line,
    budget=lambda c: f"the first {min(c.untrained_heldout_n, c.heldout_n)} held-out pairs × 2 orders",
)


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


WARMUP = Stage(
    name="warmup",
    title="perception warm-up: the vision tower learns to name each token's shape and cell, then is frozen",
    fields=("seed", "vision_warmup_steps", "train_vision", "shaded"),
    after=("untrained", "distill"),
    run=warmup,
    line=lambda f: (
        "skipped (vision_warmup_steps=0)"
        if not f["steps"]
        else f"{f['steps']} steps in {f['train_s']:.0f} s; token accuracy "
        + ", ".join(f"{k} {v:.2f}" for k, v in f["accuracy"].items())
        + ("; tower frozen" if f["frozen"] else "")
    ),
    budget=lambda c: f"{c.vision_warmup_steps} warm-up steps",
)


def _train_judge(
    ctx: StageContext, stage: str, build: Any, model: Path, data: Path, curve: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train the judge by the recipe's `stage` (sft or grpo) from `model` on the `data` file into
    `<stage>/model`, with one progress bar; write `history.json`; return the logged history and the stage's
    training figures (model, steps, wall time, and the mean logged `curve` at the start and the end)."""
    from tiny_world.recipe import History
    from training.recipe import run_recipe

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
    run_recipe(with_progress(build, ctx.console, f"judge {stage.upper()}"), trainer_config, [history.callback()])
    train_s = time.perf_counter() - start
    (ctx.folder / "history.json").write_text(json.dumps(history.logs))
    first, last = log_stats(history.logs, curve)
    figures = {"model": ctx.rel(ctx.folder / "model"), "steps": steps, "train_s": round(train_s, 1)}
    return history.logs, {**figures, f"{curve}_first": first, f"{curve}_last": last}


def sft(ctx: StageContext) -> dict[str, Any]:
    from eval.plots import training_curves
    from training.sft import build_sft_trainer

    warm = ctx.out / ctx.figures("warmup")["model"]
    logs, trained = _train_judge(ctx, "sft", build_sft_trainer, warm, ctx.path("distill", "sft", "train.jsonl"), "loss")
    training_curves(ctx.folder / "loss.png", sft=logs)
    figures = heldout_eval(ctx, ctx.folder / "model", ctx.folder / "vlrb", JUDGE_NAME["sft"])
    return {**trained, **figures, "loss_plot": ctx.rel(ctx.folder / "loss.png")}


SFT = Stage(
    name="sft",
    title="warm-up SFT on the distilled traces (TRL SFTTrainer)",
    fields=(
        "seed",
        "sft_max_steps",
        "sft_learning_rate",
        "vision_learning_rate",
        "per_device_train_batch_size",
        "judge_max_new_tokens",
        "eval_batch_size",
    ),
    after=("distill", "warmup", "heldout"),
    run=sft,
    line=lambda f: (
        f"{f['steps']} steps in {f['train_s']:.0f} s, loss {fmt(f['loss_first'], 2)} → "
        f"{fmt(f['loss_last'], 2)}; " + heldout_line(f)
    ),
    budget=lambda c: f"{c.sft_max_steps} SFT steps × batch {c.per_device_train_batch_size}",
)


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


POOL = Stage(
    name="pool",
    title="judge GRPO's own pool: fresh records, every negative, where the SFT judge is wrong or unsure (+ as many right)",
    fields=("seed", "pool_n", "judge_max_new_tokens", "eval_batch_size", "negatives_n"),
    after=("sft", "negatives"),
    run=pool,
    line=lambda f: (
        "skipped (pool_n=0): GRPO trains on the SFT items"
        if f.get("skipped")
        else f"{f['n']} pairs from {f['records']} fresh records; the SFT judge {fmt(f['sft_accuracy'])} on "
        f"them; kept {f['hard']} wrong or inconsistent + {f['kept'] - f['hard']} right ({f['image_share']:.0%} "
        f"image flaws) → {f['items']} items in both orders"
    ),
    budget=lambda c: f"{c.pool_n} fresh records × {c.negatives_n} negatives, judged in both orders",
)


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
    zero_first, zero_last = log_stats(logs, "frac_reward_zero_std")
    entropy_first, entropy_last = log_stats(logs, "entropy")
    return {
        **trained,
        "frac_reward_zero_std_first": zero_first,
        "frac_reward_zero_std_last": zero_last,
        "entropy_first": entropy_first,
        "entropy_last": entropy_last,
        "plots": [ctx.rel(ctx.folder / "curves.png")],
    }


GRPO = Stage(
    name="grpo",
    title="judge GRPO on its pool (TRL GRPOTrainer, loss grpo, reward 0.9 · correct + 0.1 · format)",
    fields=(
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
    after=("sft", "pool", "warmup"),
    run=grpo,
    line=lambda f: (
        "skipped (grpo_max_steps=0)"
        if f.get("skipped")
        else f"{f['steps']} steps in {f['train_s']:.0f} s, mean reward {fmt(f['reward_first'])} → "
        f"{fmt(f['reward_last'])}, zero-variance groups {fmt(f['frac_reward_zero_std_first'], 2)} → "
        f"{fmt(f['frac_reward_zero_std_last'], 2)}"
    ),
    budget=lambda c: (
        f"{c.grpo_max_steps} GRPO steps × {c.per_device_train_batch_size // c.num_generations} prompts × "
        f"{c.num_generations} completions"
    ),
)
