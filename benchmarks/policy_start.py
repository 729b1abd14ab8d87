"""What every benchmark on the seeing policy starts from: its flags, the demo and judge, the question split, the
start policy (trained once, then reused), the served judge's app, and policy GRPO's settings as a JSON line
states them. `benchmarks.judge_as_reward` and `benchmarks.reward_audit` are built on it."""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiny_world.demo.config import DemoConfig
from tiny_world.demo.runner import demo_judge, demo_recipe, demo_stage_hash, run_stages
from tiny_world.policy_data import rebase_images, world_questions
from tiny_world.seeing_policy import SEEING_POLICY_VERSION, train_seeing_policy

__all__ = [
    "Start",
    "add_policy_args",
    "demo_and_judge",
    "grpo_settings",
    "plain_paths",
    "reward_app",
    "seeing_policy",
    "split_questions",
]


def add_policy_args(parser: argparse.ArgumentParser, *, max_steps: int, max_steps_help: str) -> None:
    """What every benchmark on the seeing policy asks: the demo and judge, the question split, the start
    policy's warm-up and SFT, policy GRPO's settings and the evaluation's samples."""
    parser.add_argument("--demo", type=Path, help="a demo folder with its world and judge (default: train one)")
    parser.add_argument("--judge", type=Path, help="the judge model (default: the demo's grpo/model)")
    parser.add_argument("--report", choices=("val", "dev"), default="val", help="the questions figures are on")
    parser.add_argument("--dev-fraction", type=float, default=0.1, help="training questions held back for choices")
    parser.add_argument("--policy-seed", type=int, default=1, help="the policy's own seed (warm-up, SFT)")
    parser.add_argument("--warmup-steps", type=int, default=600, help="policy perception warm-up steps")
    parser.add_argument("--sft-max-steps", type=int, default=800, help="policy SFT steps on right answers")
    parser.add_argument("--max-steps", type=int, default=max_steps, help=max_steps_help)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--per-device-train-batch-size", type=int, default=16)
    parser.add_argument("--max-completion-length", type=int, default=24)
    parser.add_argument("--samples", type=int, default=4, help="sampled answers per question in the evaluation")


def grpo_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Policy GRPO's settings as the JSON line states them."""
    names = ("max_steps", "learning_rate", "beta", "num_generations", "per_device_train_batch_size")
    return {name: getattr(args, name) for name in names}


@dataclass(frozen=True)
class Start:
    """What every arm starts from and is measured on."""

    model: Path  # the seeing policy after its SFT
    prompts: Path  # its GRPO prompts
    image_root: Path  # the demo's negatives folder, where the questions' images are
    report_rows: list[dict[str, Any]]  # the questions figures are on (`--report`)
    dev_rows: list[dict[str, Any]]  # training questions held back for choices
    agree_rows: list[dict[str, Any]]  # the questions whose samples the judge scores
    evaluate: dict[str, Any]  # `exact_answers`' settings
    before: dict[str, Any]  # the start policy's exact answers to `report_rows`
    swapped: dict[str, Any]  # the same with each question's picture swapped for another's


def demo_and_judge(args: argparse.Namespace) -> tuple[Path, Path, Any]:
    """The demo folder, the judge model and the demo's recipe. Without `--demo`, the demo's judge recipe up to its
    GRPO stage, in the benchmark's own folder (resumable)."""
    demo = args.demo
    if demo is None:
        demo = args.out / "demo"
        run_stages(DemoConfig(), demo, until="grpo")
    return demo, args.judge or demo_judge(demo), demo_recipe(demo)


def split_questions(
    demo: Path, data: Path, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The world's questions: the policy's training questions (images rebased into `data`), the dev questions
    held back from them (`--dev-fraction`), and the questions figures are reported on (`--report`)."""
    negatives, distill = demo / "negatives", demo / "distill"
    train = rebase_images(world_questions(negatives, distill, "train"), negatives, data)
    rng = random.Random(f"{args.seed}:dev")
    dev_ids = set(rng.sample([r["id"] for r in train], round(args.dev_fraction * len(train))))
    dev_rows = [r for r in world_questions(negatives, distill, "train") if r["id"] in dev_ids]
    report_rows = world_questions(negatives, distill, "val") if args.report == "val" else dev_rows
    return [r for r in train if r["id"] not in dev_ids], dev_rows, report_rows


def seeing_policy(
    args: argparse.Namespace, demo: Path, recipe: Any, train: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The start policy (`train_seeing_policy`) and its cache key; the same policy trained before is reused
    (`OUT/policy/seeing.json`)."""
    key = {"demo": str(demo.resolve()), "distill": demo_stage_hash(demo, "distill"), "seed": args.policy_seed}
    key.update(warmup_steps=args.warmup_steps, version=SEEING_POLICY_VERSION)
    key.update(sft_max_steps=args.sft_max_steps, dev_fraction=args.dev_fraction, dev_seed=args.seed)
    record = args.out / "policy" / "seeing.json"
    if record.is_file() and json.loads(record.read_text())["key"] == key:  # the same seeing policy: reuse it
        saved = json.loads(record.read_text())["policy"]
        return {k: Path(v) if k in ("model", "prompts") else v for k, v in saved.items()}, key
    policy = train_seeing_policy(demo / "world", demo / "distill", train, args.out / "policy", seed=args.policy_seed,
                                 warmup_steps=args.warmup_steps, sft_max_steps=args.sft_max_steps,
                                 shaded=recipe.shaded)  # fmt: skip
    record.write_text(json.dumps({"key": key, "policy": plain_paths(policy)}))
    return policy, key


def plain_paths(policy: dict[str, Any]) -> dict[str, Any]:
    """A policy record with its paths as text (for JSON)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in policy.items()}


def reward_app(judge: Any, per_device_train_batch_size: int) -> Any:
    """The reward server's app serving `judge` (`serve_in_thread` it on loopback): batches of up to two GRPO
    batches, up to 8 candidates a request."""
    from reward_server import create_app
    from reward_server.config import ServerConfig

    batch = 2 * per_device_train_batch_size
    return create_app(judge, ServerConfig(port=0, max_batch_items=batch, max_candidates=8))
