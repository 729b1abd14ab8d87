"""`--base`: the base model of a LoRA adapter folder given as `--model` (judge, eval, serve)."""

from __future__ import annotations

import argparse
from typing import Any

BASE_HELP = (
    "when --model is a LoRA adapter folder: its base model folder or hub id "
    "(default: the adapter_config.json's base_model_name_or_path)"
)


def add_base_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", help=BASE_HELP)


def base_options(args: argparse.Namespace, model: str, backend: str | None) -> dict[str, Any]:
    """`{"base": …}` for the backend when `--base` is given; refused (ValueError) where no adapter can be loaded."""
    base = getattr(args, "base", None)
    if base is None:
        return {}
    if backend == "openai" or model.startswith(("http://", "https://")):
        raise ValueError("--base goes with a local adapter folder as --model, not with a server (--backend openai)")
    return {"base": base}
