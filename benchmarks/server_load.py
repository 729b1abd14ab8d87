"""Load on the reward server over loopback: dynamic batching vs none, then a fault run.

1. Throughput: `--clients` concurrent clients post `/v1/reward` (two responses and a small image: one MC
   item, two display orders) for `--duration` seconds to `mrjudge serve` over an untrained tiny
   Qwen2.5-VL (transformers backend, `--max-new-tokens` per call), once with dynamic batching and once
   with `--no-batching`. Judgments/s is answered MC items per second; latency is per request.
2. Faults: `--fault-requests` requests (10 % bad: invalid base64, truncated JSON, wrong types, oversized
   image, decompression bomb, 100 candidates, missing or wrong key) to a server with an API key whose
   judge is an instant rule backend defined here, so the run measures the server and not the model.
   Every bad request must get a 4xx, every good one a 200; the server's RSS (VmRSS of the subprocess)
   is compared before and after.

    python benchmarks/server_load.py [--duration 20] [--clients 32] [--fault-requests 10000] [--max-new-tokens 16]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import platform
import random
import re
import signal
import socket
import string
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import httpx
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
KEY = "bench-key"
BAD_KINDS = (
    "invalid_base64",
    "truncated_json",
    "wrong_types",
    "oversized_image",
    "decompression_bomb",
    "100_candidates",
    "missing_key",
    "wrong_key",
)


# -- the instant judge (fault run) ---------------------------------------------------------------------------


class InstantRuleBackend:
    """Answers at once for the option with the highest `score=N` tag: a judge with no model cost."""

    name = "instant-rule"
    option = re.compile(r"^([A-Z])\. (.*)$", re.MULTILINE)
    score = re.compile(r"score=(\d+)")

    def generate(self, requests, params):
        from judge.backends.base import Generation

        out = []
        for request in requests:
            text = next(p["text"] for p in request.messages[-1]["content"] if p.get("type") == "text")
            scores = [int(m.group(1)) if (m := self.score.search(b)) else 0 for _, b in self.option.findall(text)]
            best = max(range(len(scores)), key=lambda i: (scores[i], -i)) if scores else 0
            out.append(Generation(text=f"<think>rule</think><answer>{string.ascii_uppercase[best]}</answer>"))
        return out


def serve_instant(port: int) -> None:
    """The fault run's server (runs in a subprocess so its RSS is its own)."""
    import uvicorn

    from judge.judging import Judge, JudgeConfig
    from judge.server import ServerConfig, create_app

    config = ServerConfig(port=port, api_key=KEY, max_image_bytes=256 * 1024, max_body_bytes=2 * 2**20)
    app = create_app(Judge(InstantRuleBackend(), JudgeConfig(orders=2, batch_size=64)), config)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


# -- helpers -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def data_url(size: int, seed: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), tuple(random.Random(seed).randrange(256) for _ in range(3))).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def png_claiming(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_server(command: list[str], port: int, timeout_s: float = 300) -> subprocess.Popen:
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("server did not come up")
        time.sleep(0.2)


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- throughput --------------------------------------------------------------------------------------------


async def load(base: str, clients: int, duration_s: float, image: str) -> dict:
    """`clients` closed-loop clients for `duration_s`; returns answered items/s, latencies and errors."""
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + duration_s

    async def client(c: int, http: httpx.AsyncClient) -> None:
        nonlocal errors
        n = 0
        while time.perf_counter() < stop_at:
            body = {
                "prompt": "What colour is the image?",
                "images": [image],
                "responses": [f"It is colour {c}-{n}.", f"It is not colour {c}-{n}."],
            }
            start = time.perf_counter()
            try:
                response = await http.post("/v1/reward", json=body)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies.append(1000 * (time.perf_counter() - start))
            else:
                errors += 1
            n += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as http:
        for _ in range(2):  # warm-up: first-call allocations and lazy vocab scans
            await http.post("/v1/reward", json={"prompt": "Q?", "images": [image], "responses": ["a", "b"]})
        begin = time.perf_counter()
        await asyncio.gather(*(client(c, http) for c in range(clients)))
        elapsed = time.perf_counter() - begin
    return {
        "judgments_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "errors": errors,
        "answered": len(latencies),
    }


def throughput_run(model_dir: str, args: argparse.Namespace, batching: bool) -> dict:
    port = free_port()
    command = [sys.executable, "-m", "scripts.cli", "serve", "--model", model_dir, "--device", "cpu"]
    command += ["--port", str(port), "--max-new-tokens", str(args.max_new_tokens), "--log-level", "error"]
    command += ["--max-batch-items", str(args.max_batch_items), "--max-wait-ms", str(args.max_wait_ms)]
    command += ["--request-timeout-s", "600"] + ([] if batching else ["--no-batching"])
    process = start_server(command, port)
    try:
        return asyncio.run(load(f"http://127.0.0.1:{port}", args.clients, args.duration, data_url(56, 0)))
    finally:
        stop_server(process)


# -- faults ------------------------------------------------------------------------------------------------


def good_request(i: int, image: str) -> tuple[str, bytes, dict]:
    kind = i % 3
    if kind == 0:
        body = {"prompt": f"Q{i}?", "images": [image], "responses": [f"score={i % 7}", "score=3", "score=5"]}
        return "/v1/reward", json.dumps(body).encode(), {}
    if kind == 1:
        item = {"id": i, "question": "Q?", "image": image, "candidates": ["score=1", f"score={i % 5}"]}
        return "/v1/judge", json.dumps({"items": [item]}).encode(), {}
    prompts = [f"P{i}:"] * 3 + [f"P{i}b:"]
    body = {"query": [p + f"score={j}" for j, p in enumerate(prompts)], "prompts": prompts, "labels": [None] * 4}
    return "/get_reward", json.dumps(body).encode(), {}


def bad_request(kind: str, image: str, big_image: str) -> tuple[str, bytes, dict]:
    good = {"prompt": "Q?", "images": [image], "responses": ["score=1", "score=2"]}
    if kind == "invalid_base64":
        return "/v1/reward", json.dumps({**good, "images": ["data:image/png;base64,%%%not-base64%%%"]}).encode(), {}
    if kind == "truncated_json":
        return "/v1/reward", json.dumps(good).encode()[:-7], {}
    if kind == "wrong_types":
        return "/v1/reward", json.dumps({**good, "responses": ["score=1", 2, None]}).encode(), {}
    if kind == "oversized_image":
        return "/v1/reward", json.dumps({**good, "images": [big_image]}).encode(), {}
    if kind == "decompression_bomb":
        bomb = "data:image/png;base64," + base64.b64encode(png_claiming(50_000, 50_000)).decode()
        return "/v1/reward", json.dumps({**good, "images": [bomb]}).encode(), {}
    if kind == "100_candidates":
        item = {"id": 1, "question": "Q?", "candidates": [f"c{j}" for j in range(100)]}
        return "/v1/judge", json.dumps({"items": [item]}).encode(), {}
    if kind == "missing_key":
        return "/v1/reward", json.dumps(good).encode(), {"Authorization": ""}
    assert kind == "wrong_key"
    return "/v1/reward", json.dumps(good).encode(), {"Authorization": "Bearer not-the-key"}


async def fault_load(base: str, n: int, clients: int) -> dict:
    image = data_url(32, 1)
    big_image = "data:image/png;base64," + base64.b64encode(os.urandom(300 * 1024)).decode()
    rng = random.Random(0)
    plan = [("bad", BAD_KINDS[(i // 10) % len(BAD_KINDS)]) if i % 10 == 9 else ("good", "") for i in range(n)]
    rng.shuffle(plan)  # every kind of bad request equally often, at random places
    counts = {"bad_4xx": 0, "bad_total": 0, "good_200": 0, "good_total": 0, "5xx": 0, "other": 0}
    queue: asyncio.Queue = asyncio.Queue()
    for i, (what, kind) in enumerate(plan):
        queue.put_nowait((i, what, kind))

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            i, what, kind = queue.get_nowait()
            if what == "good":
                path, body, headers = good_request(i, image)
            else:
                path, body, headers = bad_request(kind, image, big_image)
            headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **headers}
            if not headers["Authorization"]:
                del headers["Authorization"]
            try:
                status = (await http.post(path, content=body, headers=headers)).status_code
            except httpx.HTTPError:
                status = 0
            counts[f"{what}_total"] += 1
            if status >= 500:
                counts["5xx"] += 1
            if what == "good" and status == 200:
                counts["good_200"] += 1
            elif what == "bad" and 400 <= status < 500:
                counts["bad_4xx"] += 1
            elif status < 500:
                counts["other"] += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return counts


def fault_run(args: argparse.Namespace) -> dict:
    port = free_port()
    process = start_server([sys.executable, str(Path(__file__).resolve()), "--serve-instant", str(port)], port)
    base = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(fault_load(base, 200, args.clients))  # warm-up, so first-use allocations are not counted
        rss_start = rss_kib(process.pid)
        begin = time.perf_counter()
        counts = asyncio.run(fault_load(base, args.fault_requests, args.clients))
        elapsed = time.perf_counter() - begin
        rss_end = rss_kib(process.pid)
        alive = httpx.get(f"{base}/health", timeout=10).status_code == 200 and process.poll() is None
    finally:
        stop_server(process)
    return {**counts, "alive": alive, "rss_start_kib": rss_start, "rss_end_kib": rss_end, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per throughput run")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--fault-requests", type=int, default=10_000)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-batch-items", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--serve-instant", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_instant:
        serve_instant(args.serve_instant)
        return

    result: dict = {
        "benchmark": "server_load",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "clients": args.clients,
    }
    if not args.skip_throughput:
        from judge.tiny import build_tiny_model

        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from benchmarks.equal_work import force_in_folder

        with tempfile.TemporaryDirectory() as folder:
            model_dir = str(build_tiny_model(folder, size=args.size, seed=0))
            force_in_folder(model_dir, args.max_new_tokens)  # every call generates exactly max_new_tokens
            batched = throughput_run(model_dir, args, batching=True)
            unbatched = throughput_run(model_dir, args, batching=False)
        result.update(
            {
                "throughput_judge": f"{args.size} Qwen2.5-VL (random init), hf backend on cpu, orders=2, "
                f"max_new_tokens={args.max_new_tokens}",
                "duration_s": args.duration,
                "max_batch_items": args.max_batch_items,
                "max_wait_ms": args.max_wait_ms,
                "batched_judgments_per_s": round(batched["judgments_per_s"], 2),
                "unbatched_judgments_per_s": round(unbatched["judgments_per_s"], 2),
                "ratio": round(batched["judgments_per_s"] / max(unbatched["judgments_per_s"], 1e-9), 2),
                "equal_work": "every call generates exactly max_new_tokens tokens (min_new_tokens in the served "
                "model's generation_config.json); tokens = judgments x 2 orders x max_new_tokens",
                "batched_tokens_per_s": round(batched["judgments_per_s"] * 2 * args.max_new_tokens, 1),
                "unbatched_tokens_per_s": round(unbatched["judgments_per_s"] * 2 * args.max_new_tokens, 1),
                "p50_ms": round(batched["p50_ms"], 1),
                "p99_ms": round(batched["p99_ms"], 1),
                "unbatched_p50_ms": round(unbatched["p50_ms"], 1),
                "unbatched_p99_ms": round(unbatched["p99_ms"], 1),
                "errors": batched["errors"] + unbatched["errors"],
            }
        )
    if not args.skip_faults:
        faults = fault_run(args)
        result.update(
            {
                "fault_judge": "instant rule backend (in this file), orders=2, api key on",
                "fault_bad_kinds": list(BAD_KINDS),
                "fault_bad_4xx": faults["bad_4xx"],
                "fault_bad_total": faults["bad_total"],
                "fault_good_200": faults["good_200"],
                "fault_good_total": faults["good_total"],
                "fault_5xx": faults["5xx"],
                "fault_server_alive": faults["alive"],
                "fault_requests_per_s": round(args.fault_requests / faults["seconds"], 1),
                "rss_start_mib": round(faults["rss_start_kib"] / 1024, 1),
                "rss_end_mib": round(faults["rss_end_kib"] / 1024, 1),
                "rss_growth": round(faults["rss_end_kib"] / faults["rss_start_kib"] - 1, 4),
            }
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
