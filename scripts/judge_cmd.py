"""`mrjudge judge`: judge a JSONL file of MC items into a JSONL file of verdicts.

    mrjudge judge --model runs/tiny-judge --input items.jsonl --output verdicts.jsonl
    mrjudge judge --model http://127.0.0.1:8000/v1 --input items.jsonl --output verdicts.jsonl --orders 2
    mrjudge judge --model runs/judge --backend vllm --input items.jsonl --output v.jsonl --engine ray --ray-address auto
    mrjudge judge --model Qwen/Qwen2.5-VL-7B-Instruct --input items.jsonl --output v.jsonl --max-pixels 1003520

Every input line is validated before any model is loaded; re-running with the same `--output` skips the
ids already judged. Each verdict carries `usage` (prompt and completion tokens over its calls): with
`--max-pixels` it shows what the cap saves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags
from mrjudge.engine_flags import add_engine_flags, engine_from
from mrjudge.model_flags import add_base_flag, base_options

from jobs.judge_file import JudgeRunSummary
from judge.judging import JudgeConfig

JUDGE_FLAGS = ConfigFlags(JudgeConfig)
"""`--orders`, `--temperature`, `--max-pixels`, …: every JudgeConfig field but the prompt (judge, eval, serve)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "judge",
        help="judge a JSONL of multiple-choice items into a JSONL of verdicts (resumable)",
        description="Judge MC items (one JSON object per line: id, image, question, candidates, label, meta). "
        "Output is written atomically; re-running with the same --output resumes.",
    )
    parser.add_argument(
        "--model", required=True, help="model folder or hub id, or an OpenAI-compatible server URL (http://…/v1)"
    )
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        help="MC items, JSONL; relative image paths are resolved against its folder",
    )
    parser.add_argument("--output", required=True, type=Path, help="verdicts, JSONL")
    parser.add_argument("--backend", choices=("hf", "openai", "vllm"), help="default: openai for URLs, hf otherwise")
    add_base_flag(parser)
    parser.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--api-key", help="openai backend: API key (default: $MRJUDGE_API_KEY or $OPENAI_API_KEY)")
    add_judge_config_flags(parser)
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def add_judge_config_flags(
    parser: argparse.ArgumentParser, flags: ConfigFlags = JUDGE_FLAGS, *, config_help: str | None = None, **wording: Any
) -> None:
    """`--config FILE` and a flag per JudgeConfig field, in one group; `wording`: `ConfigFlags.add_to`'s."""
    group = parser.add_argument_group("judge (JudgeConfig fields: field default < --config YAML < flag)")
    group.add_argument(
        "--config", type=Path, help=config_help or "YAML file with JudgeConfig fields; the flags below override it"
    )
    flags.add_to(group, **wording)


def judge_config_from(args: argparse.Namespace, flags: ConfigFlags = JUDGE_FLAGS) -> JudgeConfig:
    """JudgeConfig from `--config` YAML, then the command-line flags given on top."""
    from judge.config import ConfigError

    try:
        return flags.config(args, args.config)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from exc


def token_totals(verdicts: list[Any]) -> str:
    """`usage` summed over the verdicts that carry it, for the summary line ("" when none does)."""
    usages = [v.usage for v in verdicts if v.usage]
    if not usages:
        return ""
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    return f"; tokens {prompt:,} prompt ({prompt / len(usages):,.0f} per item) + {completion:,} completion"


def print_summary(summary: JudgeRunSummary, output: Path, tokens: str = "") -> None:
    from rich.console import Console

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    speed = "" if summary.items_per_s is None else f", {summary.items_per_s:.2f} items/s"
    Console(stderr=True).print(
        f"[bold]{summary.n_items}[/] items ({summary.n_judged_now} judged now, {summary.n_skipped} resumed) "
        f"in {summary.wall_s:.1f}s{speed}; accuracy {pct(summary.accuracy)}, consistency "
        f"{pct(summary.consistency)}, unparsed {summary.n_unparsed}{tokens} → {output}"
    )


def run(args: argparse.Namespace) -> int:
    from jobs.jsonl import InputError
    from jobs.judge_file import JudgeSpec, judge_file, load_items
    from judge.backends.spec import ModelSpec

    config = judge_config_from(args)
    try:
        engine = engine_from(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.input.is_file():
        print(f"error: --input {args.input} does not exist", file=sys.stderr)
        return 2
    try:
        items = load_items(args.input)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend_kwargs: dict[str, Any] = config.pixel_options()  # the model's processor gets the judge's range
    if args.device:
        backend_kwargs["device"] = args.device
    if args.api_key:
        backend_kwargs["api_key"] = args.api_key
    try:
        backend_kwargs.update(base_options(args, args.model, args.backend))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = ModelSpec(args.model, args.backend, backend_kwargs)
    if engine.name == "local":  # on Ray the actors load it; here a bad --model fails before any work
        try:
            spec.build()
        except (ImportError, OSError, ValueError) as exc:
            print(f"error: cannot load the judge from --model {args.model}: {exc}", file=sys.stderr)
            return 2
    judge = JudgeSpec(spec, config, image_root=args.input.parent)

    verdicts, summary = judge_file(judge, items, args.output, show_progress=True, engine=engine)
    print_summary(summary, args.output, token_totals(verdicts))
    return 0
