"""Negatives per second through the transformers backend on the tiny model: batched vs one at a time.

Both runs synthesise negatives for the same synthetic-world records, with the same settings, in one
process. The generator is a randomly initialised tiny Qwen2.5-VL, which never stops early, so each call
costs exactly `--max-new-tokens` tokens: a fixed, repeatable workload.

    python benchmarks/synthesis_throughput.py [--items 128] [--batch-size 64] [--max-new-tokens 64]

Prints one JSON line with `batched_items_per_s`, `single_items_per_s` and `ratio`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from data_synthesis.negatives import ModelNegatives
from data_synthesis.pipeline import load_rows
from data_synthesis.world import write_world
from judge.backends.hf import TransformersBackend
from judge.models import load_model
from judge.tiny import build_tiny_model


def items_per_s(generator: ModelNegatives, rows: list[dict], batch_size: int) -> float:
    generator(rows[:2])  # warm-up
    start = time.perf_counter()
    for offset in range(0, len(rows), batch_size):
        generator(rows[offset : offset + batch_size])
    return len(rows) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=128)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="rows per batched call (the tiny model needs large batches to fill 2 cores)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        loaded = load_model(str(build_tiny_model(folder / "model", seed=args.seed)), device="cpu")
        write_world(args.items, args.seed, folder / "world")
        rows = load_rows(folder / "world", "records", folder / "world")
        settings = dict(
            n=3, max_attempts=1, max_new_tokens=args.max_new_tokens, seed=args.seed, image_root=folder / "world"
        )
        batched = ModelNegatives(TransformersBackend(loaded, max_batch_size=args.batch_size), **settings)
        single = ModelNegatives(TransformersBackend(loaded, max_batch_size=1), **settings)
        batched_rate = items_per_s(batched, rows, args.batch_size)
        single_rate = items_per_s(single, rows, 1)
    print(
        json.dumps(
            {
                "benchmark": "synthesis_throughput",
                "stage": "negatives (model generator, transformers backend)",
                "model": "tiny Qwen2.5-VL (random init)",
                "device": "cpu",
                "threads": torch.get_num_threads(),
                "items": args.items,
                "batch_size": args.batch_size,
                "max_new_tokens": args.max_new_tokens,
                "batched_items_per_s": round(batched_rate, 3),
                "single_items_per_s": round(single_rate, 3),
                "ratio": round(batched_rate / single_rate, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
