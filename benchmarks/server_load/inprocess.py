"""The limit the server is measured against: the served judge in this process, with no HTTP in front of it."""

from __future__ import annotations

import argparse
import gc
import time

from benchmarks.kit import cpu_seconds
from benchmarks.server_load.bodies import data_url, reward_body


def serve_args(model_dir: str, args: argparse.Namespace, port: int, batching: bool) -> list[str]:
    """`mrjudge serve`'s arguments for a throughput run (the in-process run builds its judge from the same)."""
    command = ["serve", "--model", model_dir, "--device", "cpu", "--port", str(port)]
    command += ["--max-new-tokens", str(args.max_new_tokens), "--log-level", "error"]
    command += ["--max-batch-items", str(args.max_batch_items), "--max-wait-ms", str(args.max_wait_ms)]
    return command + ["--request-timeout-s", "600"] + ([] if batching else ["--no-batching"])


class InProcess:
    """The judge `mrjudge serve` builds from the same flags (`mrjudge.serve_cmd.served_judge`), in this process,
    judging the same requests in batches of `--max-batch-items` through `compute_rewards` (what the server's
    batch worker runs), back to back. Each request is read and its image decoded as the server does
    (`RewardRequestBody.to_request`, `decode_images`); only HTTP, JSON and the queue are left out."""

    def __init__(self, model_dir: str, args: argparse.Namespace) -> None:
        from mrjudge.cli import build_parser
        from mrjudge.serve_cmd import served_judge, server_config_from

        from reward_server.wire_images import decode_range

        parsed = build_parser().parse_args(serve_args(model_dir, args, 0, batching=True))
        self.config = server_config_from(parsed)
        self.judge = served_judge(parsed, self.config)
        self.pixels, self.image = decode_range(self.judge), data_url(56, 0)
        self.number, self.judge_s = 0, 0.0
        self.batch()  # warm-up, as the server gets
        # As `run_server` does: the judge's long-lived objects out of the collector's full passes (165-210 ms each
        # when walked), so the limit is the judge at its best and the ratio holds only what serving adds.
        gc.collect()
        gc.freeze()

    def batch(self) -> int:
        from judge.reward.scoring import compute_rewards
        from reward_server.protocol import RewardRequestBody
        from reward_server.work import RewardWork, decode_images

        requests = []
        for c in range(self.config.max_batch_items):  # one MC item per request
            body = reward_body(c, self.number, self.image)
            request = RewardRequestBody.model_validate(body, context=self.config).to_request(self.config)
            decode_images(RewardWork([request]), self.pixels)
            requests.append(request)
        self.number += 1
        start = time.perf_counter()
        answered = len(compute_rewards(self.judge, requests, max_options=self.config.max_candidates))
        self.judge_s += time.perf_counter() - start
        return answered

    def run(self, duration_s: float) -> dict:
        """Full batches back to back for `duration_s`: answered items, batches, seconds, CPU and judge time."""
        answered, batches, self.judge_s = 0, 0, 0.0
        begin, cpu = time.perf_counter(), cpu_seconds()
        while time.perf_counter() - begin < duration_s:
            answered += self.batch()
            batches += 1
        return {"answered": answered, "batches": batches, "seconds": time.perf_counter() - begin,
                "cpu_s": cpu_seconds() - cpu, "judge_s": self.judge_s}  # fmt: skip
