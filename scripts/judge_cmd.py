"""`mrjudge judge`: judge a JSONL file of MC items into a JSONL file of verdicts.

    mrjudge judge --model runs/tiny-judge --input items.jsonl --output verdicts.jsonl
    mrjudge judge --model http://127.0.0.1:8000/v1 --input items.jsonl --output verdicts.jsonl --orders 2
    mrjudge judge --model runs/judge --backend vllm --input items.jsonl --output v.jsonl --engine ray --ray-address auto
    mrjudge judge --model Qwen/Qwen2.5-VL-7B-Instruct --input items.jsonl --output v.jsonl --max-pixels 1003520

Every input line is validated before any model is loaded: bad lines up to `--max-bad-fraction` of the file
are skipped, listed and counted; above it nothing runs (exit 2). Re-running with the same `--output` skips
the ids already judged; with other settings (model, `--orders`, `--max-pixels`, …) it is refused, naming
what changed, unless `--overwrite` (judge everything again) or a new `--output`. Each verdict carries
`usage` (prompt and completion tokens over its calls): with `--max-pixels` it shows what the cap saves.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags
from mrjudge.engine_flags import add_engine_flags, engine_from
from mrjudge.model_flags import add_model_flags, loaded, model_spec

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
    add_model_flags(parser)
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        help="MC items, JSONL; relative image paths are resolved against its folder",
    )
    parser.add_argument("--output", required=True, type=Path, help="verdicts, JSONL")
    add_overwrite_flag(parser, "verdicts")
    add_bad_rows_flag(parser, "lines")
    parser.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--api-key", help="openai backend: API key (default: $MRJUDGE_API_KEY or $OPENAI_API_KEY)")
    add_judge_config_flags(parser)
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def add_overwrite_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """`--overwrite`: start a resumable output over instead of resuming it (needed when settings changed)."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"discard the {what} an earlier run left and make them again; without it a rerun resumes, and "
        "refuses when the settings that shape them changed",
    )


def add_bad_rows_flag(parser: argparse.ArgumentParser, rows: str = "rows") -> None:
    """`--max-bad-fraction`: the same rule as `synth records` for the input's bad rows."""
    from jobs.jsonl import DEFAULT_MAX_BAD_FRACTION

    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=DEFAULT_MAX_BAD_FRACTION,
        help=f"skip bad input {rows} (listed on stderr, counted) up to this share of the {rows}; above it, run "
        f"nothing and exit 2 (default {DEFAULT_MAX_BAD_FRACTION}; 0: any bad {rows[:-1]} stops the run)",
    )


def print_skipped(source: Path, skipped: list[str], rows: int, max_listed: int = 20) -> None:
    """The bad rows a command skipped, one per line on stderr (the first `max_listed`), under a count."""
    import sys

    if not skipped:
        return
    print(f"skipped {len(skipped)} bad row(s) of {rows} in {source} (under --max-bad-fraction):", file=sys.stderr)
    for problem in skipped[:max_listed]:
        print(f"  {problem}", file=sys.stderr)
    if len(skipped) > max_listed:
        print(f"  … and {len(skipped) - max_listed} more", file=sys.stderr)


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
    """JudgeConfig from `--config` YAML, then the command-line flags given on top (ConfigError if refused)."""
    return flags.config(args, args.config)


def token_totals(verdicts: list[Any]) -> str:
    """`usage` summed over the verdicts that carry it, for the summary ("" when none does)."""
    usages = [v.usage for v in verdicts if v.usage]
    if not usages:
        return ""
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    return f"tokens {prompt:,} prompt ({prompt / len(usages):,.0f} per item) + {completion:,} completion"


def print_summary(summary: JudgeRunSummary, output: Path, tokens: str = "", skipped: int = 0) -> None:
    """A few short lines, each a whole phrase (a long line wrapped by the terminal broke mid-phrase)."""
    from rich.console import Console

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    speed = "" if summary.items_per_s is None else f", {summary.items_per_s:.2f} items/s"
    bad = f", {skipped} bad line(s) skipped" if skipped else ""
    lines = [
        f"[bold]{summary.n_items}[/] items ({summary.n_judged_now} judged now, {summary.n_skipped} resumed{bad}) "
        f"in {summary.wall_s:.1f}s{speed}",
        f"accuracy {pct(summary.accuracy)} of {summary.n_decided} decided, unparsed {summary.n_unparsed}, "
        f"consistency {pct(summary.consistency)}",
        *([tokens] if tokens else []),
        f"→ {output}",
    ]
    Console(stderr=True, soft_wrap=True).print("\n".join(lines))


def run(args: argparse.Namespace) -> int:
    from jobs.judge_file import JudgeSpec, judge_file, load_items
    from jobs.resumable import check_settings

    config = judge_config_from(args)
    engine = engine_from(args)
    if not args.input.is_file():
        raise FileNotFoundError(f"--input {args.input} does not exist")
    items = load_items(args.input, max_bad_fraction=args.max_bad_fraction)
    print_skipped(args.input, items.skipped, items.rows)
    judge = JudgeSpec(model_spec(args, config.pixel_options()), config, image_root=args.input.parent)
    check_settings(args.output, judge.settings(), overwrite=args.overwrite)  # before a model loads, not after
    loaded(judge.model, engine, what="the judge")  # on Ray the actors load it

    verdicts, summary = judge_file(judge, items, args.output, show_progress=True, engine=engine)
    print_summary(summary, args.output, token_totals(verdicts), skipped=len(items.skipped))
    return 0
