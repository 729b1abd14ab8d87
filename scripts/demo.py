"""`mrjudge demo`: the whole MR. Judge life cycle on the embedded synthetic world — a CPU, no download.

    mrjudge demo                                        # the full demo into runs/demo (at most 15 minutes on 2 cores)
    mrjudge demo --out runs/demo2 --sft-max-steps 400   # any DemoConfig field as a flag
    mrjudge demo --out runs/demo2 sft_max_steps=400     # or as key=value: the same thing
    mrjudge demo --config configs/demo.yaml             # or from YAML
    mrjudge demo --quick --out /tmp/demo                # every stage on tiny budgets (under a minute)

synthetic world → reverse negatives → reasoning distillation → perception warm-up → warm-up SFT → judge
GRPO (the learning benchmark's recipe, `tiny_world.recipe.TinyJudgeRecipe`) → evaluation
(VL-RewardBench-format held-out set, split into image and text flaws; MM-Vet-style best-of-N) → the reward
server on loopback → a short policy GRPO run rewarded by it → a summary table, `OUT/summary.json` and
`OUT/report.md` with the plots.
Each stage writes `OUT/<stage>/stage.json` when it finishes; re-running the same command resumes after the
last finished stage, and a changed budget re-runs the stages it affects (see `tiny_world.demo.runner`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mrjudge.config_flags import ConfigFlags, add_key_values

from tiny_world.demo.config import DemoConfig

DEMO_FLAGS = ConfigFlags(DemoConfig)
"""`--sft-max-steps`, `--quick`, …: every DemoConfig field."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="the whole pipeline on the embedded default: data → SFT → GRPO → eval → reward server → policy GRPO",
        description="Run the whole MR. Judge life cycle on the synthetic world on a CPU with no download: data "
        "synthesis, judge SFT and GRPO, held-out evaluation, best-of-N, and policy GRPO against the judge served on "
        "loopback. Resumable; ends with a summary table, summary.json and report.md.",
        epilog="Budgets are DemoConfig fields (tiny_world/demo/config.py, configs/demo.yaml): field default < "
        "--quick preset < --config YAML < flags and key=value.",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (default: runs/demo)")
    parser.add_argument("--config", type=Path, help="YAML file of DemoConfig fields; the flags below override it")
    DEMO_FLAGS.add_to(
        parser.add_argument_group("demo (DemoConfig fields)"),
        help={"quick": "tiny budgets: every stage in well under a minute (the QUICK preset under the YAML and flags)"},
    )
    add_key_values(parser, "sft_max_steps=400")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tiny_world.demo.config import load_demo_config
    from tiny_world.demo.runner import run_demo

    config = load_demo_config(args.config, DEMO_FLAGS.values(args))
    console = Console()
    if not console.is_terminal:  # piped to a log: rich would squeeze the tables to 80 columns
        console = Console(width=160)
    console.rule("[bold]mr-judge demo")
    console.print(f"output: {args.out}  (re-run the same command to resume; `--quick` for tiny budgets)")
    if config.quick:
        console.print(
            "quick preset: every stage runs on tiny budgets to show that the pipeline works; they cannot teach, "
            "so its accuracies sit near chance (the full demo: `mrjudge demo`, about 15-20 minutes on 2 cores)"
        )
    run_demo(config, args.out, console)
    return 0
