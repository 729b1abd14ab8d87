"""Judgments per second of the tiny judge through the transformers backend: batched vs one at a time.

Both runs judge the same items with the same settings in one process, so the ratio is like for like.
The judge is a randomly initialised tiny Qwen2.5-VL, which never stops early: every call generates
exactly `--max-new-tokens` tokens, a fixed and repeatable workload.

    python benchmarks/judge_throughput.py [--items 32] [--max-new-tokens 64] [--size tiny]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import tempfile
import time

import torch
from PIL import Image

from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.models import load_model
from judge.tiny import build_tiny_model
from judge.types import MCItem


def make_items(n: int, seed: int) -> list[MCItem]:
    rng = random.Random(seed)
    return [
        MCItem(
            id=i,
            question="What colour is the shape?",
            candidates=[f"The shape is {c}." for c in rng.sample(["red", "green", "blue", "yellow"], 2)],
            image=Image.new("RGB", (84, 84), tuple(rng.randrange(256) for _ in range(3))),
            label=0,
        )
        for i in range(n)
    ]


def items_per_s(judge: Judge, items: list[MCItem]) -> float:
    judge.select(items[:2])  # warm-up: first-call allocations and lazy vocab scans
    start = time.perf_counter()
    judge.select(items)
    return len(items) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="items per batch in the batched run")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        loaded = load_model(str(build_tiny_model(folder, size=args.size, seed=args.seed)), device="cpu")
    items = make_items(args.items, args.seed)
    config = dict(orders=2, max_new_tokens=args.max_new_tokens, seed=args.seed)
    batched = Judge(
        TransformersBackend(loaded, max_batch_size=2 * args.batch_size),
        JudgeConfig(batch_size=args.batch_size, **config),
    )
    single = Judge(TransformersBackend(loaded, max_batch_size=1), JudgeConfig(batch_size=1, **config))
    hf_batched = items_per_s(batched, items)
    hf_single = items_per_s(single, items)
    print(
        json.dumps(
            {
                "benchmark": "judge_throughput",
                "model": f"{args.size} Qwen2.5-VL (random init)",
                "device": "cpu",
                "threads": torch.get_num_threads(),
                "machine": platform.machine(),
                "items": args.items,
                "orders": 2,
                "max_new_tokens": args.max_new_tokens,
                "batch_items": args.batch_size,
                "hf_batched_items_per_s": round(hf_batched, 3),
                "hf_single_items_per_s": round(hf_single, 3),
                "batched_speedup": round(hf_batched / hf_single, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
