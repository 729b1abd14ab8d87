"""`mrjudge tiny-model`: write a randomly initialised tiny Qwen2.5-VL judge (or Qwen LM) to a folder."""

from __future__ import annotations

import argparse

from tiny_world.model import TINY_SIZES


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tiny-model",
        help="build a tiny Qwen2.5-VL judge or Qwen LM offline (tests, demos)",
        description="Build a tiny model from a config with a locally trained tokenizer; no download. "
        "The same seed writes byte-identical files. Its weights are random (the folder is marked untrained): "
        "as a judge its verdicts do not parse until it is trained (`mrjudge demo` trains one).",
    )
    parser.add_argument("--out", required=True, help="folder to write the model to")
    parser.add_argument(
        "--kind", choices=("vlm", "lm"), default="vlm", help="vlm: Qwen2.5-VL judge; lm: text-only Qwen2 (default: vlm)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and tokenizer (default: 0)")
    parser.add_argument(
        "--size",
        choices=sorted(TINY_SIZES),
        default="tiny",
        help="tiny: plumbing; small: learns simple visual tasks (default: tiny)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tiny_world.model import build_tiny_model

    path = build_tiny_model(args.out, kind=args.kind, seed=args.seed, size=args.size)
    print(
        f"wrote an untrained {args.size} {args.kind} model to {path} (random weights, for plumbing and as a start "
        "for training: as a judge its verdicts will not parse; `mrjudge demo` trains one, runs/demo/grpo/model)"
    )
    return 0
