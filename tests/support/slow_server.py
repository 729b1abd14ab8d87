"""The reward server around the slow rule judge, run the way `mrjudge serve` runs it, for shutdown tests.

    python -m tests.support.slow_server PORT --grace 3 --delay 0.5

Prints `ready` once listening is about to start; the judge takes `--delay` seconds per backend call
and judges 2 items per call, so a tournament of many responses is a long job.
"""

from __future__ import annotations

import argparse

from judge.judging import Judge, JudgeConfig
from reward_server import ServerConfig, create_app
from reward_server.run import run_server
from tiny_world.rule_judge import SlowRuleBackend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--grace", type=float, default=3.0)
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()
    config = ServerConfig(port=args.port, shutdown_grace_s=args.grace)
    app = create_app(Judge(SlowRuleBackend(args.delay), JudgeConfig(orders=2, batch_size=2)), config)
    run_server(app, config, log_level="warning")


if __name__ == "__main__":
    main()
