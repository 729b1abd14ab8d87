"""`mrjudge eval`: run a judge on a benchmark, or score a predictions file, into a run directory.

    mrjudge eval vl-rewardbench --model runs/judge --data MMInstruction/VL-RewardBench --out runs/vlrb
    mrjudge eval vl-rewardbench --model http://127.0.0.1:8000/v1 --mode official --k 10 --data test.parquet --out runs/vlrb
    mrjudge eval vl-rewardbench --data test.parquet --predictions preds.jsonl --out runs/vlrb-scored
    mrjudge eval multimodal-rewardbench --model runs/judge --data all_data.json --out runs/mmrb
    mrjudge eval mm-vet --model runs/judge --data mm-vet/mm-vet.json --candidates a.json b.json c.json d.json \\
        --grader-url https://api.openai.com/v1 --grader-model gpt-4-0613 --out runs/mmvet

Every run writes `metrics.json`, `predictions.jsonl` (with the raw judge text), `report.md` and PNG charts
into `--out`; re-running with the same `--out` skips the items already done.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from scripts.judge_cmd import judge_config_from


def _add_judge_flags(parser: argparse.ArgumentParser, *, predictions: bool) -> None:
    model_help = "judge model folder or hub id, or an OpenAI-compatible server URL (http://…/v1)"
    if predictions:
        model_help += "; leave out with --predictions"
    parser.add_argument("--model", required=not predictions, help=model_help)
    parser.add_argument("--backend", choices=("hf", "openai", "vllm"), help="default: openai for URLs, hf otherwise")
    parser.add_argument("--out", required=True, type=Path, help="run directory (metrics.json, predictions.jsonl, …)")
    parser.add_argument("--limit", type=int, help="only the first N items")
    parser.add_argument("--seed", type=int, default=0, help="seeds display orders, sampling and coin flips")
    parser.add_argument("--batch-size", type=int, default=8, help="items per backend call")
    parser.add_argument("--config", type=Path, help="mc mode: YAML with JudgeConfig fields")
    parser.add_argument("--orders", type=int, help="mc mode: display orders per item (default 2)")
    parser.add_argument("--samples", type=int, help="mc mode: calls per display order")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default: the protocol's)")
    parser.add_argument("--max-new-tokens", type=int, help="generation budget per call (default: the protocol's)")
    parser.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 …")
    parser.add_argument("--api-key", help="openai backend: API key (default: $MRJUDGE_API_KEY or $OPENAI_API_KEY)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate a judge on VL-RewardBench, Multimodal RewardBench or MM-Vet best-of-N",
        description="Evaluate a judge; every run writes metrics.json, predictions.jsonl, report.md and PNGs.",
    )
    benchmarks = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)

    vlrb = benchmarks.add_parser(
        "vl-rewardbench",
        help="VL-RewardBench: official pairwise protocol or our MC judge",
        description="VL-RewardBench (official protocol or MC mode), or score a predictions JSONL with --predictions.",
    )
    vlrb.add_argument(
        "--data", required=True, help="MMInstruction/VL-RewardBench (hub, split test) or a local .parquet/.jsonl"
    )
    vlrb.add_argument("--mode", choices=("mc", "official"), default="mc", help="default: mc")
    vlrb.add_argument("--k", type=int, default=10, help="official mode: calls per item, majority-voted (default 10)")
    vlrb.add_argument("--top-p", type=float, help="official mode: top_p (default 0.2)")
    vlrb.add_argument("--predictions", type=Path, help='score this JSONL ({"id", "pred"}) instead of running a model')
    _add_judge_flags(vlrb, predictions=True)
    vlrb.set_defaults(run=run_pairwise_cli)

    mmrb = benchmarks.add_parser(
        "multimodal-rewardbench",
        help="Multimodal RewardBench: official pairwise protocol or our MC judge",
        description="Multimodal RewardBench (official or MC mode), or score a predictions JSONL with --predictions.",
    )
    mmrb.add_argument("--data", required=True, type=Path, help="all_data.json (or a JSONL with the same fields)")
    mmrb.add_argument("--image-folder", type=Path, help="folder the Image paths are relative to (default: --data's)")
    mmrb.add_argument("--mode", choices=("mc", "official"), default="mc", help="default: mc")
    mmrb.add_argument("--predictions", type=Path, help='score this JSONL ({"id", "pred"}) instead of running a model')
    _add_judge_flags(mmrb, predictions=True)
    mmrb.set_defaults(run=run_pairwise_cli)


def make_judge_backend(args: argparse.Namespace) -> Any:
    """The backend `--model`/`--backend` name; a load failure exits with a message naming the flag."""
    from judge.backends import make_backend

    kwargs: dict[str, Any] = {}
    if args.device:
        kwargs["device"] = args.device
    if args.api_key:
        kwargs["api_key"] = args.api_key
    try:
        return make_backend(args.model, args.backend, **kwargs)
    except (ImportError, OSError, ValueError) as exc:
        raise SystemExit(f"error: cannot load the judge from --model {args.model}: {exc}") from exc


def make_judge(args: argparse.Namespace) -> Any:
    """An MC `Judge` from the flags (mc mode), seeded by `--seed`."""
    from judge.judging import Judge

    config = judge_config_from(args)
    return Judge(make_judge_backend(args), config)


def _load_pairwise(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    from judge.jsonl import InputError

    try:
        if args.benchmark == "vl-rewardbench":
            from eval import vl_rewardbench as bench

            items = bench.load_vl_rewardbench(args.data, limit=args.limit)
        else:
            from eval import multimodal_rewardbench as bench

            items = bench.load_multimodal_rewardbench(args.data, image_folder=args.image_folder, limit=args.limit)
    except InputError as exc:
        raise SystemExit(f"error: {exc}") from exc
    return bench, items


def run_pairwise_cli(args: argparse.Namespace) -> int:
    from eval.common import read_decisions
    from eval.pairwise import mc_predict
    from eval.pairwise_run import report_pairwise, run_pairwise
    from judge.jsonl import InputError

    bench, items = _load_pairwise(args)
    spec = bench.BENCHMARK
    vlrb = args.benchmark == "vl-rewardbench"
    if args.predictions is not None:
        try:
            rows = read_decisions(args.predictions)
            metrics = spec.score(items, rows)
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        report_pairwise(spec, metrics, args.out, judge_name=args.predictions.name, protocol=bench.protocol("file"))
    elif args.model is None:
        print("error: give --model to run a judge, or --predictions to score a file", file=sys.stderr)
        return 2
    elif args.mode == "mc":
        judge = make_judge(args)
        metrics = run_pairwise(
            spec,
            items,
            args.out,
            lambda batch: mc_predict(judge, batch),
            batch_size=args.batch_size,
            judge_name=args.model,
            protocol=bench.protocol("mc", orders=judge.config.orders or 2),
            show_progress=not args.quiet,
        )
    else:
        backend = make_judge_backend(args)
        overrides = {"seed": args.seed}
        if args.temperature is not None:
            overrides["temperature"] = args.temperature
        if args.max_new_tokens is not None:
            overrides["max_new_tokens"] = args.max_new_tokens
        if vlrb:
            overrides["k"] = args.k
            if args.top_p is not None:
                overrides["top_p"] = args.top_p
            config = bench.VLRBConfig(**overrides)
        else:
            config = bench.MMRBConfig(**overrides)
        metrics = run_pairwise(
            spec,
            items,
            args.out,
            lambda batch: bench.official_predict(backend, batch, config),
            batch_size=args.batch_size,
            judge_name=args.model,
            protocol=bench.protocol("official", config),
            show_progress=not args.quiet,
        )
    _print_headline(spec.title, metrics, args.out)
    return 0


def _print_headline(title: str, metrics: dict[str, Any], out: Path) -> None:
    from rich.console import Console

    def pct(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else f"{100 * value:.1f}%"

    extra = f", macro {pct('macro_accuracy')}" if "macro_accuracy" in metrics else ""
    extra += f", consistency {pct('consistency')}" if "consistency" in metrics else ""
    Console(stderr=True).print(
        f"[bold]{title}[/]: overall {pct('overall_accuracy')}{extra} on {metrics['n']} items "
        f"({metrics['unparsed']} unparsed) → {out}/report.md"
    )
