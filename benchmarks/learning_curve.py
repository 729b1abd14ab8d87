"""The learning bar: does the recipe *teach* a tiny judge on 2 CPU cores in 15 minutes?

synthetic world → exact negatives → scene descriptions → balanced MC items → distilled traces →
warm-up SFT (TRL SFTTrainer) → judge GRPO (TRL GRPOTrainer) on a judge from the tiny-model factory,
then a held-out synthetic *pairwise* set judged in both display orders — before training, after SFT,
and after GRPO. Prints one JSON line; saves loss and reward curves as PNG beside `--out`.

    python benchmarks/learning_curve.py --out runs/learning_curve

The judge prompt is the compact one (`COMPACT_PROMPT`): the model is tiny and the CPU slow, so every
prompt token costs steps; the recipe is otherwise the real one. What the defaults add for a judge that has
never seen a picture (README, "Training a judge"): the world is shaded, each grid cell on its own
background, so positions show in the pixels (`--no-shaded`: white); a perception warm-up of the vision
tower, with a head for each token's cell, runs first and the tower is then frozen
(`--vision-warmup-steps`, `training.vision_warmup`); and the traces are `checks` traces, the picture's
facts keyed by shape, then every option checked fact by fact (`--reasoner-style`,
`data_synthesis.world.scene_reasoner`). `vision_sensitivity` in the JSON line says whether the judge's
image features still depend on the picture (see `tiny_recipe.vision_sensitivity`); `--describe-share`
mixes image → description examples into the SFT data.

Accuracy counts an item the judge could not decide (no parsable answer in either order) as a coin flip,
0.5, so an untrained judge that never answers scores chance; `heldout_accuracy_strict` counts it as wrong.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from training.tiny_recipe import (
    History,
    distill_judge_data,
    grpo_config,
    heldout_pairs,
    plot_curves,
    recipe_judge,
    sft_config,
    vision_sensitivity,
    warmup_rows,
    write_kind_world,
)


def make_data(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """World → negatives → describe → assemble → distill, keeping only the benchmark's question kinds."""
    from data_synthesis.pipeline import run_negatives

    world = out / "data"
    write_kind_world(
        out / "world",
        world,
        kinds=args.kinds.split(","),
        n=args.world_n,
        seed=args.seed,
        image_size=args.image_size,
        shaded=args.shaded,
    )
    run_negatives(world, world, generator="scene", n=3, seed=args.seed, show_progress=False)
    data = distill_judge_data(
        world,
        world,
        max_options=args.max_options,
        val_fraction=args.val_fraction,
        reasoner_style=args.reasoner_style,
        describe_share=args.describe_share,
        seed=args.seed,
    )
    return {"items": data["items"], "kept_fraction": data["kept_fraction"]}


TRACE_TOKENS = {"pairs": 256, "scene": 128, "checks": 192}
"""Judge and GRPO generation budgets for trace layouts longer than the recipe's default 96 tokens."""


def evaluate(model_dir: Path, items: list[Any], image_root: Path, batch_size: int, budget: int) -> dict[str, Any]:
    judge = recipe_judge(model_dir, image_root=image_root, batch_size=batch_size, max_new_tokens=budget)
    verdicts = judge.select(items)
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    calls = [0, 0]
    for item, verdict in zip(items, verdicts):
        per_kind[item.meta["kind"]][0] += verdict.choice == item.label
        per_kind[item.meta["kind"]][1] += 1
        calls[0] += sum(v == item.label for v in verdict.votes)
        calls[1] += len(verdict.votes)
    n = len(items)
    correct = sum(v.choice == i.label for v, i in zip(verdicts, items))
    undecided = sum(v.choice is None for v in verdicts)
    return {
        # A judge that cannot decide is a coin flip: undecided items count 0.5 (pairwise chance).
        "accuracy": (correct + 0.5 * undecided) / n,
        "accuracy_strict": correct / n,
        "undecided": undecided,
        "call_accuracy": calls[0] / calls[1],
        "order_consistency": sum(bool(v.consistent) for v in verdicts) / n,
        "unparsed_calls": sum(v is None for verdict in verdicts for v in verdict.votes),
        "per_kind": {k: round(a / b, 4) for k, (a, b) in sorted(per_kind.items())},
        "sample": verdicts[0].raw[0][:200],
    }


def plot(history: dict[str, History], path: Path) -> None:
    plot_curves(path, sft=history["sft"].logs, grpo=history["grpo"].logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning_curve"))
    parser.add_argument("--size", default="small")
    parser.add_argument("--kinds", default="attribute,count,spatial", help="question kinds of the world to use")
    parser.add_argument("--world-n", type=int, default=4000, help="records of those kinds")
    parser.add_argument("--image-size", type=int, default=84, help="84 px → 9 image tokens per picture")
    parser.add_argument(
        "--shaded",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="draw each grid cell on its own background, so positions show in the pixels (Scene.shaded); "
        "--no-shaded: white pictures",
    )
    parser.add_argument("--max-options", type=int, default=2)
    parser.add_argument(
        "--reasoner-style",
        default="checks",
        help="scene reasoner layout: checks (the default: the keyed image line, then each option checked fact by "
        "fact), diff, restate, contrast (near 0.74), pairs (0.775, consistency 0.83), scene (the whole picture "
        "described first) or keyed (each fact right after its shape's kind, then diff verdicts)",
    )
    parser.add_argument(
        "--describe-share", type=float, default=0.0, help="share of SFT examples that ask for the image's description"
    )
    parser.add_argument("--val-fraction", type=float, default=0.08)
    parser.add_argument("--heldout-n", type=int, default=200)
    parser.add_argument("--sft-steps", type=int, default=1500)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--grpo-lr", type=float, default=5e-5)
    parser.add_argument(
        "--vision-warmup-steps",
        type=int,
        default=1500,
        help="perception warm-up steps before SFT (training.vision_warmup), then the tower is frozen; 0: none",
    )
    parser.add_argument(
        "--train-vision",
        action="store_true",
        help="train the vision tower in SFT and GRPO too (default: frozen after the warm-up, trained without one)",
    )
    parser.add_argument("--vision-lr", type=float, default=None, help="vision tower learning rate (default: --sft-lr)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from judge.tiny import build_tiny_model
    from training.grpo import run_grpo
    from training.sft import run_sft

    torch.manual_seed(args.seed)
    start = time.perf_counter()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = make_data(out, args)
    world = out / "data"
    heldout = heldout_pairs(world, args.heldout_n, args.seed)
    budget = TRACE_TOKENS.get(args.reasoner_style, 96)  # generation budget: the longest trace fits
    base = build_tiny_model(out / "untrained", size=args.size, seed=args.seed)
    untrained = evaluate(base, heldout, world, args.batch_size, budget)

    warmup: dict[str, Any] = {"steps": 0, "wall_s": 0.0}
    start_model, freeze_vision = base, False
    if args.vision_warmup_steps:
        from training.vision_warmup import VisionWarmupConfig, warm_up_vision

        warmup = warm_up_vision(
            base,
            warmup_rows(world),
            image_root=world,
            out_dir=out / "seeing",
            # On a shaded world the warm-up also teaches where each token is (its cell shows in the pixels).
            config=VisionWarmupConfig(steps=args.vision_warmup_steps, seed=args.seed, cell_head=args.shaded),
        )
        start_model, freeze_vision = out / "seeing", not args.train_vision

    history = {"sft": History(), "grpo": History()}
    sft = sft_config(
        start_model,
        world / "sft" / "train.jsonl",
        out / "sft",
        steps=args.sft_steps,
        batch_size=args.batch_size,
        learning_rate=args.sft_lr,
        seed=args.seed,
        freeze_vision=freeze_vision,
        vision_learning_rate=args.vision_lr,
    )
    sft_start = time.perf_counter()
    run_sft(sft, callbacks=[history["sft"].callback()])
    sft_s = time.perf_counter() - sft_start
    after_sft = evaluate(out / "sft", heldout, world, args.batch_size, budget)

    grpo_start = time.perf_counter()
    if args.grpo_steps:
        grpo = grpo_config(
            out / "sft",
            world / "rl" / "train.jsonl",
            out / "grpo",
            steps=args.grpo_steps,
            batch_size=args.batch_size,
            learning_rate=args.grpo_lr,
            max_completion_length=budget,
            seed=args.seed,
            freeze_vision=freeze_vision,
        )
        run_grpo(grpo, callbacks=[history["grpo"].callback()])
        final = evaluate(out / "grpo", heldout, world, args.batch_size, budget)
    else:
        final = after_sft
    grpo_s = time.perf_counter() - grpo_start
    plot(history, out / "learning_curve.png")
    (out / "history.json").write_text(json.dumps({k: h.logs for k, h in history.items()}))
    result = {
        "benchmark": "learning_curve",
        "model": f"{args.size} Qwen2.5-VL from the tiny-model factory",
        "kinds": sorted(args.kinds.split(",")),
        "shaded": args.shaded,
        "heldout_items": len(heldout),
        "heldout_accuracy": round(final["accuracy"], 4),
        "order_consistency": round(final["order_consistency"], 4),
        "sft_accuracy": round(after_sft["accuracy"], 4),
        "sft_order_consistency": round(after_sft["order_consistency"], 4),
        "untrained_accuracy": round(untrained["accuracy"], 4),
        "untrained_undecided": untrained["undecided"],
        "heldout_accuracy_strict": round(final["accuracy_strict"], 4),
        "per_kind": final["per_kind"],
        "call_accuracy": round(final["call_accuracy"], 4),
        "unparsed_calls": final["unparsed_calls"],
        "vision_warmup_steps": warmup["steps"],
        # The warm-up heads' token accuracies on its last batch (kind, colour, size, cell).
        "vision_warmup_accuracy": {
            k.removesuffix("_accuracy"): v for k, v in warmup.items() if k.endswith("_accuracy")
        },
        "vision_warmup_s": warmup["wall_s"],
        "vision_frozen": freeze_vision,
        "sft_steps": args.sft_steps,
        "grpo_steps": args.grpo_steps,
        "sft_s": round(sft_s, 1),
        "grpo_s": round(grpo_s, 1),
        "train_items": data["items"],
        "wall_s": round(time.perf_counter() - start, 1),
        # Relative change of the image features when one shape changes colour, kind or size: near 0 means
        # the vision tower has collapsed to a constant and only text-visible flaws can be decided.
        "vision_sensitivity": {
            name: vision_sensitivity(model, image_size=args.image_size, shaded=args.shaded)
            for name, model in (("untrained", base), ("final", out / ("grpo" if args.grpo_steps else "sft")))
        },
        "curves": str(out / "learning_curve.png"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
