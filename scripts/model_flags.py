"""Where a command's model comes from: `--model`/`--backend` with `--device`, `--api-key` and `--base` (the base
model of a LoRA adapter folder given as `--model`) (judge, eval, serve), and loading it before any work."""

from __future__ import annotations

import argparse
from typing import Any

BASE_HELP = (
    "when --model is a LoRA adapter folder: its base model folder or hub id "
    "(default: the adapter_config.json's base_model_name_or_path)"
)


MODEL_HELP = (
    "model folder or hub id, or an OpenAI-compatible server URL (http://…/v1; several servers of the same model "
    "comma-separated: each request goes to the least busy, a failed one is skipped)"
)


def add_model_flags(parser: argparse.ArgumentParser, *, required: bool = True, model_help: str = MODEL_HELP) -> None:
    """`--model`, `--backend` and `--base`: which model a command runs, and how."""
    parser.add_argument("--model", required=required, help=model_help)
    parser.add_argument("--backend", choices=("hf", "openai", "vllm"), help="default: openai for URLs, hf otherwise")
    add_base_flag(parser)


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


def model_spec(args: argparse.Namespace, options: dict[str, Any], model: str | None = None) -> Any:
    """The `ModelSpec` that `--model`/`--backend` name, with `options` (the image size) and `--device`,
    `--api-key` and `--base`; or `model`, a second model (`--policy`) on its default backend, with `--device`."""
    from judge.backends.spec import ModelSpec

    options = dict(options)
    if getattr(args, "device", None):
        options["device"] = args.device
    if model is None:
        if getattr(args, "api_key", None):
            options["api_key"] = args.api_key
        options.update(base_options(args, args.model, args.backend))
    return ModelSpec(model or args.model, None if model else args.backend, options)


def loaded(spec: Any, engine: Any = None, *, flag: str = "--model", what: str = "the model") -> Any:
    """`spec`, loaded now when it runs in this process, so a bad model fails before any work with a message
    naming the flag (ValueError). On Ray (`engine`) the model loads in the actors; this process never loads it."""
    if engine is None or engine.name == "local":
        try:
            spec.build()
        except (ImportError, OSError, ValueError) as exc:
            raise ValueError(f"cannot load {what} from {flag} {spec.model}: {exc}") from exc
    return spec
