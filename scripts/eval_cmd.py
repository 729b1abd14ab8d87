"""`mrjudge eval`: run a judge on a benchmark, or score a predictions file, into a run directory.

    mrjudge eval vl-rewardbench --model runs/judge --data MMInstruction/VL-RewardBench --out runs/vlrb
    mrjudge eval vl-rewardbench --model http://127.0.0.1:8000/v1 --mode official --k 10 --data test.parquet --out runs/vlrb
    mrjudge eval vl-rewardbench --data test.parquet --predictions preds.jsonl --out runs/vlrb-scored
    mrjudge eval multimodal-rewardbench --model runs/judge --data all_data.json --out runs/mmrb
    mrjudge eval mm-vet --model runs/judge --data mm-vet/mm-vet.json --candidates a.json b.json c.json d.json \\
        --grader-url https://api.openai.com/v1 --grader-model gpt-4-0613 --out runs/mmvet
    mrjudge eval mm-vet --model runs/judge --data mm-vet/mm-vet.json --policy OpenGVLab/InternVL2-2B --n 4 \\
        --grader-url https://api.openai.com/v1 --grader-model gpt-4-0613 --out runs/mmvet

Every run writes `metrics.json`, `predictions.jsonl` (with the raw judge text), `report.md` and PNG charts
into `--out`; re-running with the same `--out` skips the items already done, and is refused when the settings
that shape the predictions changed (the judge, its flags, the protocol), unless `--overwrite`. Bad data rows
up to `--max-bad-fraction` are left out, listed and counted (`data_skipped_rows` in metrics.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags
from mrjudge.engine_flags import add_engine_flags, engine_from, pixel_options
from mrjudge.judge_cmd import (
    add_bad_rows_flag,
    add_judge_config_flags,
    add_overwrite_flag,
    judge_config_from,
    print_skipped,
)
from mrjudge.model_flags import MODEL_HELP, add_model_flags, loaded, model_spec

from judge.judging import JudgeConfig

EVAL_JUDGE_FLAGS = ConfigFlags(JudgeConfig, skip=("top_p",))
"""The judge's flags here; `top_p` has none, as VL-RewardBench's `--top-p` is the official protocol's."""


def _add_judge_flags(parser: argparse.ArgumentParser, *, predictions: bool) -> None:
    model_help = "judge " + MODEL_HELP + ("; leave out with --predictions" if predictions else "")
    add_model_flags(parser, required=not predictions, model_help=model_help)
    parser.add_argument("--out", required=True, type=Path, help="run directory (metrics.json, predictions.jsonl, …)")
    add_overwrite_flag(parser, "predictions (and MM-Vet's sampled candidates and grades)")
    parser.add_argument("--limit", type=int, help="only the first N items")
    add_bad_rows_flag(parser)
    add_judge_config_flags(
        parser,
        EVAL_JUDGE_FLAGS,
        config_help="mc mode: YAML with JudgeConfig fields; the flags below override it",
        help={"seed": "seeds display orders, sampling, coin flips and bootstrap intervals"},
        defaults={"seed": 0, "batch_size": 8},  # run-level: they also size official mode's batches
        shown={"temperature": "the protocol's", "max_new_tokens": "the protocol's"},
    )
    parser.add_argument("--device", help="hf backend: cpu, cuda, cuda:1 …")
    parser.add_argument("--api-key", help="openai backend: API key (default: $MRJUDGE_API_KEY or $OPENAI_API_KEY)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_flags(parser)


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
    vlrb.add_argument(
        "--predictions",
        type=Path,
        help='score this JSONL ({"id", "pred"}; with --reading lmms-eval {"id", "reply"}) instead of running a model',
    )
    # -- issue 25: which copy of the data, which reading of the calls, a model-based answer reader --
    vlrb.add_argument("--revision", help="hub data: the dataset commit or branch to load (recorded in metrics.json)")
    vlrb.add_argument("--image-folder", type=Path, help="GitHub data.jsonl: folder image_path is relative to")
    vlrb.add_argument(
        "--reading",
        choices=("cal.py", "all-calls", "lmms-eval"),
        default="cal.py",
        help="official mode: cal.py = its seeded shuffle and first k calls (default); all-calls = majority of all; "
        "lmms-eval = one reply per item read as lmms-eval 0.7.3 (its order, answer rule, categories, macro)",
    )
    vlrb.add_argument("--headline-k", type=int, help="cal.py reading: k of 1,3,5,7,9 (default: largest <= --k)")
    vlrb.add_argument(
        "--llm-parse", metavar="URL", help="official mode: /v1 server that reads regex-missed replies (key: --api-key)"
    )
    vlrb.add_argument("--llm-parse-model", help="model name at --llm-parse (default: the first served)")
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

    mmvet = benchmarks.add_parser(
        "mm-vet",
        help="MM-Vet best-of-N: the judge picks one of N answers; MM-Vet's grader scores it",
        description="MM-Vet best-of-N. Candidates from N prediction files ({id: answer}) or sampled from a policy; "
        "every candidate graded with MM-Vet's official grader prompt and retry rule through an OpenAI-compatible "
        "endpoint; first / random / judge / oracle picks scored per capability.",
    )
    mmvet.add_argument("--data", required=True, type=Path, help="the official mm-vet.json")
    mmvet.add_argument("--images", type=Path, help="image folder (default: images/ beside --data)")
    source = mmvet.add_mutually_exclusive_group(required=True)
    source.add_argument("--candidates", nargs="+", type=Path, help="N prediction files {id: answer}, one per sample")
    source.add_argument(
        "--policy",
        help="sample the N candidates from this model (folder, hub id or /v1 URL; images sized by --max-pixels too)",
    )
    mmvet.add_argument("--n", type=int, default=4, help="with --policy: answers per question (default 4)")
    mmvet.add_argument("--policy-temperature", type=float, default=0.7, help="with --policy (default 0.7)")
    mmvet.add_argument("--policy-max-new-tokens", type=int, default=512, help="with --policy (default 512)")
    mmvet.add_argument("--grader-url", required=True, help="OpenAI-compatible endpoint of the grader (…/v1)")
    mmvet.add_argument("--grader-model", help="grader model name (official: gpt-4-0613; default: the first served)")
    mmvet.add_argument("--grader-api-key", help="default: $MRJUDGE_API_KEY or $OPENAI_API_KEY")
    # -- issue 25: repeated gradings (mean and std), as the MM-Vet paper's 5 runs --
    mmvet.add_argument("--num-runs", type=int, default=1, help="gradings of every candidate; mean and std (paper: 5)")
    _add_judge_flags(mmvet, predictions=False)
    mmvet.set_defaults(run=run_mmvet_cli)


def make_judge(args: argparse.Namespace) -> Any:
    """The MC `JudgeSpec` from the flags (mc mode), seeded by `--seed`; not loaded yet."""
    from eval.workers import JudgeSpec

    return JudgeSpec(model_spec(args, pixel_options(args)), judge_config_from(args, EVAL_JUDGE_FLAGS))


def _settled(path: Path, settings: dict[str, Any], args: argparse.Namespace) -> None:
    """Refuse a rerun with other settings (or start over with --overwrite) before any model loads."""
    from jobs.resumable import check_settings

    check_settings(path, settings, overwrite=args.overwrite)


def run_pairwise_cli(args: argparse.Namespace) -> int:
    from eval.run import Official, Scoring, load_pairwise, official_config, run_pairwise_benchmark, run_settings

    vlrb = args.benchmark == "vl-rewardbench"
    bench, items = load_pairwise(
        args.benchmark,
        args.data,
        limit=args.limit,
        revision=args.revision if vlrb else None,
        image_folder=args.image_folder,
        max_bad_fraction=args.max_bad_fraction,
    )
    print_skipped(args.data, items.skipped, len(items) + len(items.skipped))
    engine = engine_from(args)
    scoring = Scoring(seed=args.seed)
    if vlrb:
        scoring = Scoring(args.seed, args.reading, args.headline_k, args.k)
        if args.llm_parse:
            from judge.backends.openai_http import OpenAIBackend

            scoring.llm_parse = OpenAIBackend(args.llm_parse, model_name=args.llm_parse_model, api_key=args.api_key)
    run = dict(scoring=scoring, out=args.out, judge_name=args.model, **_batching(args, engine))
    if args.predictions is not None:
        title, metrics = run_pairwise_benchmark(bench, items, predictions=args.predictions, **run)
    elif args.model is None:
        raise ValueError("give --model to run a judge, or --predictions to score a file")
    elif args.mode == "mc":
        judge = make_judge(args)
        _settled(args.out / "predictions.jsonl", run_settings(bench, judge=judge), args)
        loaded(judge.model, engine)
        title, metrics = run_pairwise_benchmark(bench, items, judge=judge, **run)
    else:
        official = Official(args.temperature, args.max_new_tokens, args.top_p if vlrb else None)
        model = model_spec(args, pixel_options(args))
        protocol = official_config(bench, scoring, official)
        _settled(args.out / "predictions.jsonl", run_settings(bench, model=model, official=protocol), args)
        title, metrics = run_pairwise_benchmark(bench, items, model=loaded(model, engine), official=official, **run)
    _print_headline(title, metrics, args.out)
    return 0


def _print_headline(title: str, metrics: dict[str, Any], out: Path) -> None:
    from rich.console import Console

    def pct(key: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else f"{100 * value:.1f}%"

    if metrics.get("reading") == "lmms-eval":  # lmms-eval reports one figure: its macro over categories
        Console(stderr=True).print(
            f"[bold]{title}[/]: lmms-eval vlreward_score {pct('lmms_eval_score')} on {metrics['n']} items "
            f"({metrics['lmms_eval_coin_flips']} coin flips) → {out}/report.md"
        )
        return
    extra = f", macro {pct('macro_accuracy')}" if "macro_accuracy" in metrics else ""
    extra += f", consistency {pct('consistency')}" if "consistency" in metrics else ""
    Console(stderr=True).print(
        f"[bold]{title}[/]: overall {pct('overall_accuracy')}{extra} on {metrics['n']} items "
        f"({metrics['unparsed']} unparsed) → {out}/report.md"
    )


def _batching(args: argparse.Namespace, engine: Any) -> dict[str, Any]:
    """How every benchmark run of this command batches, reports progress and runs its model calls."""
    return dict(batch_size=args.batch_size, show_progress=not args.quiet, engine=engine)


def run_mmvet_cli(args: argparse.Namespace) -> int:
    from eval import mmvet
    from eval.run import mmvet_candidates
    from judge.backends.openai_http import OpenAIBackend

    engine = engine_from(args)
    run = dict(seed=args.seed, **_batching(args, engine))
    questions = mmvet.load_mmvet(args.data, args.images, limit=args.limit, max_bad_fraction=args.max_bad_fraction)
    print_skipped(args.data, questions.skipped, questions.rows)
    judge = make_judge(args)
    if args.overwrite:  # before any model loads: the folder's earlier work goes
        from jobs.resumable import discard_output

        for name in ("candidates.jsonl", "predictions.jsonl", "grades.jsonl"):
            discard_output(args.out / name)
    _settled(args.out / "predictions.jsonl", mmvet.mmvet_settings(judge, args.seed), args)
    policy = None
    if args.policy:
        policy = loaded(model_spec(args, pixel_options(args), args.policy), engine, flag="--policy")
    candidates = mmvet_candidates(
        questions,
        args.out,
        files=args.candidates,
        policy=policy,
        n=args.n,
        temperature=args.policy_temperature,
        max_new_tokens=args.policy_max_new_tokens,
        **run,
    )
    loaded(judge.model, engine)
    grader = OpenAIBackend(args.grader_url, model_name=args.grader_model, api_key=args.grader_api_key)
    metrics = mmvet.run_mmvet(
        judge,
        questions,
        candidates,
        grader,
        args.out,
        **run,
        num_runs=args.num_runs,
        data_source=str(args.data),
    )
    from rich.console import Console

    scores = ", ".join(f"{s} {100 * metrics[f'{s}_total']:.1f}" for s in mmvet.SELECTORS)
    Console(stderr=True).print(
        f"[bold]MM-Vet best-of-{metrics['n_candidates']}[/] on {metrics['n']} questions: {scores} → {args.out}/report.md"
    )
    return 0
