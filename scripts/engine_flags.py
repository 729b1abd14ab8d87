"""Flags several commands share: `--engine local|ray` with its Ray flags (`mrjudge synth`, `eval`, `judge`),
and the image size `--min-pixels` / `--max-pixels` (every command whose model sees images)."""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (where the batches run)")
    group.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: this process (default); ray: a Ray Data pipeline (model work in an actor pool)",
    )
    group.add_argument(
        "--ray-address",
        help="with --engine ray: a running cluster (auto, or ray://HOST:10001); default: start Ray on this machine",
    )
    group.add_argument(
        "--ray-workers", type=int, help="with --engine ray: actors (model work) or tasks at once; default: GPUs or CPUs"
    )
    group.add_argument(
        "--ray-gpus-per-worker", type=float, help="with --engine ray: GPUs per model actor (default: 1 if any, else 0)"
    )
    group.add_argument(
        "--ray-cpus-per-worker", type=float, default=1.0, help="with --engine ray: CPUs per actor or task (default 1)"
    )


PIXEL_FLAGS = ("min_pixels", "max_pixels")


def add_pixel_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "the model") -> None:
    """`--min-pixels` / `--max-pixels`: the image size range, Qwen's meaning (dest `min_pixels`, `max_pixels`)."""
    parser.add_argument(
        "--min-pixels",
        type=int,
        metavar="N",
        help=f"images with fewer pixels are enlarged to about N (aspect kept, sides multiples of 28) before {what} "
        "sees them; default: the model's processor config",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        metavar="N",
        help=f"images with more pixels are shrunk to at most N before {what} sees them, e.g. 1003520 (1280*28*28: "
        "at most 1,280 visual tokens); default: the model's processor config (stock Qwen2.5-VL: 12845056, "
        "up to ~16k visual tokens per image)",
    )


def pixel_options(args: argparse.Namespace) -> dict[str, int]:
    """The pixel flags that were given, as backend options (`{"max_pixels": N}`); refused if out of range."""
    from judge.images import PixelRange

    return PixelRange(**{name: getattr(args, name, None) for name in PIXEL_FLAGS}).options()


def engine_from(args: argparse.Namespace) -> Any:
    """The engine the flags name; Ray flags without `--engine ray` are refused (ValueError), not ignored."""
    from jobs.executor import RayConfig, make_executor

    ray_flags = {
        "--ray-address": args.ray_address,
        "--ray-workers": args.ray_workers,
        "--ray-gpus-per-worker": args.ray_gpus_per_worker,
    }
    if args.engine != "ray":
        given = [flag for flag, value in ray_flags.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need --engine ray")
        return make_executor("local")
    config = RayConfig(
        address=args.ray_address,
        workers=args.ray_workers,
        num_gpus_per_worker=args.ray_gpus_per_worker,
        num_cpus_per_worker=args.ray_cpus_per_worker,
    )
    return make_executor("ray", config)
