"""Negatives per second through the transformers backend on the tiny model: batched vs one at a time.

Both runs synthesise negatives for the same synthetic-world records, with the same settings, in one
process. The generator is a randomly initialised tiny Qwen2.5-VL; every call is forced to generate exactly
`--max-new-tokens` tokens (`min_new_tokens`, `benchmarks.equal_work`) and the tokens each run generated
are counted, so both sides do the same, repeatable work.

    python -m benchmarks.synthesis_throughput [--items 16] [--batch-size 16] [--max-new-tokens 64]
    python -m benchmarks.synthesis_throughput --items 128 --batch-size 64     # the larger run (former defaults)

Run time: one pair took 9-10 s on 2 quiet cores (2026-12-06); 328 s under load (7 agents on 2 cores), where the
larger run was stopped unfinished after 600 s.

Both runs are repeated `--repeats` times (5), taking turns, and their medians are the figures: at the defaults
one batched run lasts a third of a second and one run at a time about five, so a single pair is mostly noise.

Prints one JSON line with `batched_items_per_s`, `single_items_per_s`, `ratio` (median batched / median single),
the generated `*_tokens` and `*_tokens_per_s` (`tokens_equal`: every run generated the same number), each run's
`*_tokens_per_s_runs`, the pairs' `ratio_runs` and their `ratio_spread` ((max - min) / ratio).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.equal_work import FORCED_LENGTH, GenerateCounter
from benchmarks.kit import add_repeats_flag, emit, median_run
from data_synthesis.negatives import ModelNegatives
from data_synthesis.pipeline import load_rows
from data_synthesis.world import write_world
from judge.backends.hf import TransformersBackend
from judge.models import load_model
from tiny_world.model import build_tiny_model


def timed(
    generator: ModelNegatives, rows: list[dict], batch_size: int, counter: GenerateCounter, warm_up: bool = True
) -> tuple:
    """Items/s, generated tokens and tokens/s of one run (after a two-row warm-up)."""
    if warm_up:
        generator(rows[:2])
    counter.reset()
    start = time.perf_counter()
    for offset in range(0, len(rows), batch_size):
        generator(rows[offset : offset + batch_size])
    seconds = time.perf_counter() - start
    return len(rows) / seconds, counter.tokens, counter.tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.synthesis_throughput", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--items", type=int, default=16, help="world records (both runs write negatives for each)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="rows per batched call (the tiny model needs large batches to fill 2 cores)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_flag(parser, 5, "runs of each side, in turns; medians are the figures")
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
        with GenerateCounter(loaded.model, args.max_new_tokens) as counter:
            # Both sides repeated, taking turns (a slow spell of the machine hits both), medians reported as
            # pyperf does: one batched call lasts a third of a second, so one run of it is mostly noise.
            runs, singles = [], []
            for i in range(args.repeats):
                runs.append(timed(batched, rows, args.batch_size, counter, warm_up=i == 0))
                singles.append(timed(single, rows, 1, counter, warm_up=i == 0))
    batched_tps_runs = [tps for _, _, tps in runs]
    single_tps_runs = [tps for _, _, tps in singles]
    batched_rate, batched_tokens, batched_tps = median_run(runs, key=lambda run: run[2])
    single_rate, single_tokens, single_tps = median_run(singles, key=lambda run: run[2])
    ratios = [b / s for b, s in zip(batched_tps_runs, single_tps_runs)]
    emit(
        {
            "benchmark": "synthesis_throughput",
            "stage": "negatives (model generator, transformers backend)",
            "model": "tiny Qwen2.5-VL (random init)",
            "device": "cpu",
            "threads": torch.get_num_threads(),
            "items": args.items,
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "equal_work": FORCED_LENGTH,
            "batched_items_per_s": batched_rate,
            "single_items_per_s": single_rate,
            "batched_tokens": batched_tokens,
            "single_tokens": single_tokens,
            "batched_tokens_per_s": batched_tps,
            "single_tokens_per_s": single_tps,
            "tokens_equal": len({tokens for _, tokens, _ in runs + singles}) == 1,
            "ratio": batched_tps / single_tps,
            "repeats": args.repeats,
            "batched_tokens_per_s_runs": batched_tps_runs,
            "single_tokens_per_s_runs": single_tps_runs,
            "ratio_runs": ratios,
            "ratio_spread": (max(ratios) - min(ratios)) / (batched_tps / single_tps),
        }
    )


if __name__ == "__main__":
    main()
