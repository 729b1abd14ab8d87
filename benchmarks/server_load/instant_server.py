"""The fault and hostile runs' server: `mrjudge serve`'s app over the instant rule judge, in its own process.

A subprocess so that its RSS is its own; it runs as `mrjudge serve` runs it (`reward_server.run.run_server`),
logging at its default level (info). Its judge is `tiny_world.rule_judge` (the candidate with the highest
`score=N` tag, after `--judge-delay-ms` per backend call): no model cost, so a run measures the server.

    python -m benchmarks.server_load.instant_server --port 8000 [--hostile] [--judge-delay-ms 5]
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.server_load.bodies import KEY

HOSTILE_SHUTDOWN_GRACE_S = 5.0
"""The hostile run's `shutdown_grace_s`: how long the server lets its work finish after SIGTERM."""


def command(port: int, *, hostile: bool = False, judge_delay_ms: float = 5.0) -> list[str]:
    """The command line that starts this server on `port` (the fault run keeps the default delay, 5 ms)."""
    argv = [sys.executable, "-m", "benchmarks.server_load.instant_server", "--port", str(port)]
    return argv + ["--judge-delay-ms", str(judge_delay_ms)] + (["--hostile"] if hostile else [])


def serve(port: int, hostile: bool = False, delay_ms: float = 5.0) -> None:
    """Serve until SIGTERM. The fault run tightens two limits; the hostile run keeps the defaults but a short
    body deadline and shutdown grace (so the run is short)."""
    from judge.judging import Judge, JudgeConfig
    from reward_server import ServerConfig, create_app
    from reward_server.run import run_server
    from tiny_world.rule_judge import RuleJudgeBackend

    if hostile:
        config = ServerConfig(port=port, api_key=KEY, body_timeout_s=2.0, shutdown_grace_s=HOSTILE_SHUTDOWN_GRACE_S)
    else:
        config = ServerConfig(port=port, api_key=KEY, max_image_bytes=256 * 1024, max_body_bytes=2 * 2**20)
    judge = Judge(RuleJudgeBackend(delay_ms / 1000), JudgeConfig(orders=2, batch_size=64, max_pixels=1_003_520))
    run_server(create_app(judge, config), config, log_level="info")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.server_load.instant_server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hostile", action="store_true", help="the hostile run's limits (else the fault run's)")
    parser.add_argument("--judge-delay-ms", type=float, default=5.0, help="per backend call")
    args = parser.parse_args(argv)
    serve(args.port, args.hostile, args.judge_delay_ms)


if __name__ == "__main__":
    main()
