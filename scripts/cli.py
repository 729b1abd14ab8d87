"""`mrjudge`: the command line. Each subcommand lives in its own module; this file only dispatches.

mrjudge demo                       # the main job on the embedded default (no downloads)
mrjudge tiny-model --out runs/tiny-judge
mrjudge judge --model runs/tiny-judge --input items.jsonl --output verdicts.jsonl
mrjudge eval vl-rewardbench --model runs/tiny-judge --data test.parquet --out runs/vlrb
mrjudge adapters --store runs/adapters list
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mrjudge import adapters_cmd, demo, eval_cmd, judge_cmd, serve_cmd, synth_cmd, tiny_model_cmd, train_cmd

SUBCOMMANDS = (demo, judge_cmd, synth_cmd, train_cmd, eval_cmd, tiny_model_cmd, serve_cmd, adapters_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrjudge",
        description="mr-judge: multimodal reasoning judges that pick the best of several answers.",
        epilog="Run `mrjudge COMMAND --help` for a command's options.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
