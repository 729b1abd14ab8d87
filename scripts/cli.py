"""`mrjudge`: the command line. Each subcommand lives in its own module; this file dispatches, and is the one
place that turns a user's error (a bad flag value, config key, input line or file) into `error: …`, exit 2.

mrjudge demo                       # the main job on the embedded default (no downloads)
mrjudge tiny-model --out runs/tiny-judge
mrjudge judge --model runs/tiny-judge --input items.jsonl --output verdicts.jsonl
mrjudge eval vl-rewardbench --model runs/tiny-judge --data test.parquet --out runs/vlrb
mrjudge adapters --store runs/adapters list
mrjudge view runs/demo --out demo.html
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mrjudge import (
    adapters_cmd,
    demo,
    eval_cmd,
    judge_cmd,
    serve_cmd,
    synth_cmd,
    tiny_model_cmd,
    train_cmd,
    view_cmd,
)

SUBCOMMANDS = (demo, judge_cmd, synth_cmd, train_cmd, eval_cmd, view_cmd, tiny_model_cmd, serve_cmd, adapters_cmd)


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


def _user_errors() -> tuple[type[BaseException], ...]:
    """What a user can fix: bad input, config values or flags (the project's own `ConfigError`, `InputError`,
    `DataError`, `AdapterStoreError`, … are `ValueError`s), missing files, ports and endpoints (`OSError`),
    missing optional packages, and a synth stage with too many failed rows (its summary is written first).
    A model server that cannot be reached or refuses a call is one too (`endpoint_error` words it)."""
    from data_synthesis.stage_runner import TooManyFailures

    return (ValueError, OSError, ImportError, TooManyFailures)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command, and turn a user's error into one `error: …` line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except Exception as exc:
        from judge.backends.openai_http import endpoint_error

        message = endpoint_error(exc) or (str(exc) if isinstance(exc, _user_errors()) else None)
        if message is None or os.environ.get("MRJUDGE_TRACEBACK"):
            raise  # a bug keeps its traceback; MRJUDGE_TRACEBACK=1 shows it for user errors too
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
