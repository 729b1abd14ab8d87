"""`python -m benchmarks.server_load`: the flags, the runs they ask for, and the one JSON line."""

from __future__ import annotations

import argparse
import os
import platform

import benchmarks.server_load as package
from benchmarks.kit import emit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.server_load", description=package.__doc__.splitlines()[0]
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per throughput run")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument(
        "--saturation-clients", type=int, default=0, help="clients of the saturated run (default: 2 x max-batch-items)"
    )
    parser.add_argument(
        "--efficiency-rounds",
        type=int,
        default=6,
        help="rounds of the near-the-limit run, each a --duration/3 s window in process and one through the server",
    )
    parser.add_argument(
        "--batching-rounds",
        type=int,
        default=4,
        help="rounds of the batching run, each a --duration/rounds s window with batching and one without",
    )
    parser.add_argument("--fault-requests", type=int, default=10_000)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-batch-items", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--skip-hostile", action="store_true")
    parser.add_argument("--hostile-duration", type=float, default=20.0, help="seconds per hostile-run phase")
    parser.add_argument("--hostile-clients", type=int, default=8)
    parser.add_argument("--hostile-kinds", default="", help="comma-separated probe kinds (default: all)")
    parser.add_argument("--judge-delay-ms", type=float, default=5.0, help="hostile run: per backend call")
    args = parser.parse_args(argv)
    for flag in ("efficiency_rounds", "batching_rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} ({getattr(args, flag)}) must be >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result: dict = {"benchmark": "server_load", "machine": platform.machine(), "cpus": os.cpu_count(),
                    "clients": args.clients}  # fmt: skip
    if not args.skip_throughput:
        from benchmarks.server_load import throughput

        result.update(throughput.measure(args))
    if not args.skip_faults:
        from benchmarks.server_load import faults

        result.update(faults.measure(args))
    if not args.skip_hostile:
        from benchmarks.server_load import hostile

        result.update(hostile.measure(args))
    emit(result)


if __name__ == "__main__":
    main()
