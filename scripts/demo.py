"""`mrjudge demo`: the main job on the embedded default — no downloads, seconds on a CPU.

Until the full pipeline lands (training, evaluation, reward server), the demo runs what exists end to end:
it draws the synthetic world, synthesises exact negatives, descriptions and judge traces, assembles
balanced multiple-choice items, builds a tiny *untrained* Qwen2.5-VL judge, judges the items in both
display orders and prints each verdict and the accuracy. An untrained judge rarely writes a parsable
answer: the point is the real pipeline and model classes, end to end; training makes the numbers move.

    mrjudge demo --out runs/demo
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the main job on the embedded default (no downloads)",
        description="Synthesise judge data from the synthetic world, build a tiny judge, judge a handful of MC items, "
        "print verdicts and accuracy.",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (default: runs/demo)")
    parser.add_argument("--n-items", type=int, default=8, help="number of MC items to judge (default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the model and the items (default: 0)")
    parser.set_defaults(run=run)


def _histogram(by_split: dict) -> str:
    """`train k=2 A4 B3, …` from assembly's nested letter histogram."""
    return ", ".join(
        f"{split} {k} " + " ".join(f"{letter}{n}" for letter, n in letters.items())
        for split, by_k in by_split.items()
        for k, letters in by_k.items()
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from data_synthesis.pipeline import SynthConfig, run_all
    from judge.backends.hf import TransformersBackend
    from judge.jobs import judge_file, load_items
    from judge.judging import Judge, JudgeConfig
    from judge.tiny import build_tiny_model
    from scripts.judge_cmd import print_summary

    console = Console()
    out: Path = args.out
    console.rule("[bold]mr-judge demo")
    model_dir = build_tiny_model(out / "tiny-judge", kind="vlm", seed=args.seed, size="tiny")
    console.print(f"built a tiny Qwen2.5-VL judge → {model_dir}")
    synth = run_all(
        SynthConfig(out=str(out / "synth"), world_n=max(4 * args.n_items, 20), world_seed=args.seed, seed=args.seed),
        show_progress=False,
    )
    distilled, assembled = synth["distilled"], synth["items"]
    console.print(
        f"synthesised {assembled['items']} MC items from the synthetic world "
        f"({synth['negatives']['negatives']} exact negatives; right letter per split and size: "
        f"{_histogram(assembled['letter_histogram'])}); kept {distilled['kept']} judge traces "
        f"({distilled['kept_fraction']:.0%}) for SFT → {out / 'synth'}"
    )
    items = load_items(out / "synth" / "items.jsonl")[: args.n_items]
    judge = Judge(
        TransformersBackend(str(model_dir), device="cpu"),
        JudgeConfig(max_new_tokens=48, seed=args.seed),
        image_root=out / "synth",
    )
    verdicts, summary = judge_file(judge, items, out / "verdicts.jsonl")

    table = Table(title="verdicts (label, choice and votes index the candidates as given)")
    for column in ("id", "K", "label", "choice", "votes", "consistent", "probs"):
        table.add_column(column, no_wrap=True)
    for item, verdict in zip(items, verdicts):
        probs = "—" if verdict.probs is None else " ".join(f"{p:.2f}" for p in verdict.probs)
        table.add_row(
            str(item.id),
            str(len(item.candidates)),
            str(item.label),
            str(verdict.choice),
            str(verdict.votes),
            str(verdict.consistent),
            probs,
        )
    console.print(table)
    if verdicts and verdicts[0].raw:
        console.print(f"first raw output of {verdicts[0].id}: {verdicts[0].raw[0][:80]!r}", markup=False)
    print_summary(summary, out / "verdicts.jsonl")
    accuracy = "n/a" if summary.accuracy is None else f"{summary.accuracy:.3f}"
    console.print(
        f"[bold]accuracy {accuracy}[/] over {summary.n_items} items ({summary.n_unparsed} unparsed; the tiny judge is untrained)"
    )
    return 0
