"""`mrjudge demo`: the main job on the embedded default — no downloads, a few seconds on a CPU.

Until the full pipeline lands (synthesis → SFT → GRPO → evaluation → reward server), the demo builds a
tiny, *untrained* Qwen2.5-VL judge, draws a handful of multiple-choice items about coloured shapes, judges
them in both display orders and prints each verdict and the accuracy. An untrained judge rarely writes a
parsable answer: the point is the plumbing, end to end, with the real model classes.

    mrjudge demo --out runs/demo
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 210, 40)}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the main job on the embedded default (no downloads)",
        description="Build a tiny judge, make a handful of MC items, judge them, print verdicts and accuracy.",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (default: runs/demo)")
    parser.add_argument("--n-items", type=int, default=8, help="number of MC items (default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the model and the items (default: 0)")
    parser.set_defaults(run=run)


def make_items(folder: Path, n: int, seed: int) -> Path:
    """Draw `n` one-shape images and write MC items asking for the shape's colour."""
    rng = random.Random(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        colour = rng.choice(sorted(COLOURS))
        image = Image.new("RGB", (84, 84), "white")
        x, y, r = rng.randint(20, 64), rng.randint(20, 64), rng.randint(10, 18)
        ImageDraw.Draw(image).ellipse((x - r, y - r, x + r, y + r), fill=COLOURS[colour])
        name = f"images/{i:03d}.png"
        image.save(folder / name)
        wrong = rng.sample([c for c in sorted(COLOURS) if c != colour], k=rng.randint(1, 2))
        candidates = [f"The circle is {c}." for c in [colour, *wrong]]
        rng.shuffle(candidates)
        rows.append(
            {
                "id": f"demo-{i:03d}",
                "image": name,
                "question": "What colour is the circle?",
                "candidates": candidates,
                "label": candidates.index(f"The circle is {colour}."),
                "meta": {"source": "demo"},
            }
        )
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

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
    items_path = make_items(out, args.n_items, args.seed)
    items = load_items(items_path)
    console.print(f"made {len(items)} multiple-choice items → {items_path}")

    judge = Judge(
        TransformersBackend(str(model_dir), device="cpu"),
        JudgeConfig(max_new_tokens=48, seed=args.seed),
        image_root=out,
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
