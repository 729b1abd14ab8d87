"""The learning bar: does the recipe *teach* a tiny judge on 2 CPU cores in 15 minutes?

synthetic world → exact negatives → scene descriptions → balanced MC items → distilled traces →
warm-up SFT (TRL SFTTrainer) → judge GRPO (TRL GRPOTrainer) on a judge from the tiny-model factory,
then a held-out synthetic *pairwise* set judged in both display orders — before training, after SFT,
and after GRPO. Prints one JSON line; saves loss and reward curves as PNG beside `--out`.

    python benchmarks/learning_curve.py --out runs/learning_curve

The judge prompt is the compact one (`COMPACT_PROMPT`): the model is tiny and the CPU slow, so every
prompt token costs steps; the recipe is otherwise the real one. Accuracy counts an item the judge could
not decide (no parsable answer in either order) as a coin flip, 0.5, so an untrained judge that never
answers scores chance; `heldout_accuracy_strict` counts it as wrong.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from judge.prompt import PromptConfig

COMPACT_PROMPT = PromptConfig(
    instruction="Which candidate answers the question about the image best?",
    criteria=None,
    answer_format="Check each candidate against the image in <think></think>, then answer <answer>X</answer>.",
)


def make_data(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """World → negatives → describe → assemble → distill, keeping only the benchmark's question kinds."""
    from data_synthesis.assemble import AssembleConfig
    from data_synthesis.pipeline import (
        load_rows,
        run_assemble,
        run_describe,
        run_distill,
        run_negatives,
        write_sft_examples,
    )
    from data_synthesis.world import write_world
    from judge.jsonl import write_jsonl_atomic

    kinds = set(args.kinds.split(","))
    world, data = out / "world", out / "data"
    write_world(args.world_n * 5 // len(kinds) + 5, args.seed, world, size=args.image_size)
    rows = [r for r in load_rows(world, "records", data) if r["source"].split("/")[1] in kinds]
    write_jsonl_atomic(
        data / "records.jsonl", [{k: r[k] for k in ("id", "image", "question", "answer", "source")} for r in rows]
    )
    write_jsonl_atomic(data / "scenes.jsonl", [{"id": r["id"], **r["world"]} for r in rows])
    world = data
    run_negatives(world, world, generator="scene", n=3, seed=args.seed, show_progress=False)
    run_describe(world, world, describer="scene", show_progress=False)
    items, _ = run_assemble(
        world, world, AssembleConfig(max_options=args.max_options, val_fraction=args.val_fraction, seed=args.seed)
    )
    distilled, summary = run_distill(
        world, world, reasoner="scene", reasoner_style=args.reasoner_style, show_progress=False
    )
    write_sft_examples(items, distilled, world, prompt=COMPACT_PROMPT)
    return {"items": len(items), "kept_fraction": summary["kept_fraction"]}


def heldout_pairs(world: Path, n: int, seed: int) -> list[Any]:
    """Pairwise items (reference vs one negative) from validation-split records only."""
    import random

    from judge.jsonl import read_jsonl
    from judge.types import MCItem

    rng = random.Random(seed)
    items = []
    for _, item in read_jsonl(world / "items.jsonl"):
        if item["meta"]["split"] != "val":
            continue
        label = item["label"]
        wrong = rng.choice([i for i in range(len(item["candidates"])) if i != label])
        pair = [item["candidates"][label], item["candidates"][wrong]]
        first = rng.randrange(2)
        candidates = pair if first == 0 else pair[::-1]
        items.append(
            MCItem(
                id=item["id"],
                image=item["image"],
                question=item["question"],
                candidates=candidates,
                label=0 if first == 0 else 1,
                meta={"kind": item["meta"]["source"].split("/")[1], "flaw": item["meta"]["flaws"][wrong]},
            )
        )
    return items[:n]


def evaluate(model_dir: Path, items: list[Any], image_root: Path, batch_size: int) -> dict[str, Any]:
    from judge.backends.hf import TransformersBackend
    from judge.judging import Judge, JudgeConfig

    judge = Judge(
        TransformersBackend(str(model_dir), device="cpu", max_batch_size=2 * batch_size),
        JudgeConfig(orders=2, max_new_tokens=96, batch_size=batch_size, prompt=COMPACT_PROMPT),
        image_root=image_root,
    )
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


class History:
    """A TrainerCallback-like recorder of logged losses and rewards, for the curves."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def callback(self) -> Any:
        from transformers import TrainerCallback

        history = self

        class Record(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    history.logs.append(
                        {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
                    )

        return Record()


def plot(history: dict[str, History], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_reward) = plt.subplots(1, 2, figsize=(11, 4))
    sft = [(r["step"], r["loss"]) for r in history["sft"].logs if "loss" in r]
    ax_loss.plot(*zip(*sft), label="SFT loss") if sft else None
    ax_loss.set_xlabel("SFT step"), ax_loss.set_ylabel("loss"), ax_loss.set_yscale("log"), ax_loss.legend()
    rewards = [(r["step"], r["reward"]) for r in history["grpo"].logs if "reward" in r]
    ax_reward.plot(*zip(*rewards), label="GRPO mean reward") if rewards else None
    ax_reward.set_xlabel("GRPO step"), ax_reward.set_ylabel("reward"), ax_reward.set_ylim(0, 1), ax_reward.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning_curve"))
    parser.add_argument("--size", default="small")
    parser.add_argument("--kinds", default="attribute,count,spatial", help="question kinds of the world to use")
    parser.add_argument("--world-n", type=int, default=4000, help="records of those kinds")
    parser.add_argument("--image-size", type=int, default=84, help="84 px → 9 image tokens per picture")
    parser.add_argument("--max-options", type=int, default=2)
    parser.add_argument(
        "--reasoner-style",
        default="diff",
        help="scene reasoner layout: diff (default), restate or contrast (all measured near 0.74)",
    )
    parser.add_argument("--val-fraction", type=float, default=0.08)
    parser.add_argument("--heldout-n", type=int, default=200)
    parser.add_argument("--sft-steps", type=int, default=1500)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--grpo-lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from judge.tiny import build_tiny_model
    from training.grpo import JudgeGRPOConfig, run_grpo
    from training.sft import JudgeSFTConfig, run_sft

    torch.manual_seed(args.seed)
    start = time.perf_counter()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = make_data(out, args)
    world = out / "data"
    heldout = heldout_pairs(world, args.heldout_n, args.seed)
    base = build_tiny_model(out / "untrained", size=args.size, seed=args.seed)
    untrained = evaluate(base, heldout, world, args.batch_size)

    history = {"sft": History(), "grpo": History()}
    common = dict(
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        seed=args.seed,
        dataloader_num_workers=0,
        # TRL switches checkpointing on by default; on a model this small it only buys recompute time.
        gradient_checkpointing=False,
    )
    sft = JudgeSFTConfig(
        model_name_or_path=str(base),
        train_file=str(world / "sft" / "train.jsonl"),
        output_dir=str(out / "sft"),
        max_steps=args.sft_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.sft_lr,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": int(0.3 * args.sft_steps)},
        warmup_steps=int(0.03 * args.sft_steps),
        weight_decay=0.0,
        max_length=None,
        logging_steps=10,
        **common,
    )
    sft_start = time.perf_counter()
    run_sft(sft, callbacks=[history["sft"].callback()])
    sft_s = time.perf_counter() - sft_start
    after_sft = evaluate(out / "sft", heldout, world, args.batch_size)

    grpo_start = time.perf_counter()
    if args.grpo_steps:
        grpo = JudgeGRPOConfig(
            model_name_or_path=str(out / "sft"),
            train_file=str(world / "rl" / "train.jsonl"),
            output_dir=str(out / "grpo"),
            max_steps=args.grpo_steps,
            per_device_train_batch_size=args.batch_size,
            num_generations=4,
            max_completion_length=96,
            learning_rate=args.grpo_lr,
            temperature=1.0,
            beta=0.0,
            prompt_instruction=COMPACT_PROMPT.instruction,  # the wording the SFT data used
            prompt_criteria="",
            prompt_answer_format=COMPACT_PROMPT.answer_format,
            logging_steps=2,
            **common,
        )
        run_grpo(grpo, callbacks=[history["grpo"].callback()])
        final = evaluate(out / "grpo", heldout, world, args.batch_size)
    else:
        final = after_sft
    grpo_s = time.perf_counter() - grpo_start
    plot(history, out / "learning_curve.png")
    (out / "history.json").write_text(json.dumps({k: h.logs for k, h in history.items()}))
    result = {
        "benchmark": "learning_curve",
        "model": f"{args.size} Qwen2.5-VL from the tiny-model factory",
        "kinds": sorted(args.kinds.split(",")),
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
        "sft_steps": args.sft_steps,
        "grpo_steps": args.grpo_steps,
        "sft_s": round(sft_s, 1),
        "grpo_s": round(grpo_s, 1),
        "train_items": data["items"],
        "wall_s": round(time.perf_counter() - start, 1),
        "curves": str(out / "learning_curve.png"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
