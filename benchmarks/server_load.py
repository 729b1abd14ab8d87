"""Load on the reward server over loopback: how near the judge's own limit it gets, batching vs none, faults.

1. Throughput, equal work: every judge call generates exactly `--max-new-tokens` tokens (`min_new_tokens` in
   the served tiny Qwen2.5-VL's generation config, transformers backend), each request two responses and a
   small image (one MC item, two display orders).
   - Near the limit: the judge `mrjudge serve` builds from the same flags (`mrjudge.serve_cmd.served_judge`)
     runs in this process, the same requests in batches of `--max-batch-items` through `compute_rewards`
     (what the server's batch worker runs; requests read and images decoded as the server does), against
     the server loaded by `--saturation-clients` closed-loop clients (default 2 x max-batch-items, so a full
     batch always waits), in `--efficiency-rounds` (6) rounds of two windows of `--duration / 3` s each, the
     order turned every round (in process first, then the server first, ...), so that other work on the
     machine, and its drift, weigh on both alike.
     `server_efficiency` = server_judgments_per_s / inprocess_judgments_per_s;
     `server_cpu_efficiency` compares judgments per CPU-second of each process (what the HTTP front costs,
     whatever share of the cores the machine leaves), `server_front_cpu_ms_per_judgment` the event loop
     thread's own CPU (HTTP, JSON, checks, image decoding: what the judge's cores give up to the front);
     `server_mean_batch_requests` and
     `server_judge_busy_frac` (from the answers' timings) say whether batches were full and the judge busy;
     `inprocess_judge_ms_per_batch` and `server_judge_ms_per_batch` time the judge call alone (the same full
     batch), so a judge that runs slower beside the server's event loop (one GIL) shows there.
   - Batching: `--clients` clients for `--duration` s with dynamic batching, then with `--no-batching`.
   Judgments/s is answered MC items per second; latency is per request. The clients speak plain HTTP/1.1 on
   kept-alive sockets: httpx cost ~7 ms of CPU a request on the cores the server needs (it, not the server,
   capped the load at ~50 requests/s); `server_client_cpu_s_per_s` reports what they use now.
2. Faults: `--fault-requests` requests (10 % bad: invalid base64, truncated JSON, wrong types, oversized
   image, decompression bomb, 100 candidates, missing or wrong key) to a server with an API key whose
   judge is an instant rule backend defined here, so the run measures the server and not the model.
   Every bad request must get a 4xx, every good one a 200; the server's RSS (VmRSS of the subprocess)
   is compared before and after. The server logs at `mrjudge serve`'s default level (info) to a file:
   `fault_log_lines` counts the lines it wrote from the timed run's start to its exit, and
   `refused_log_lines_per_1000` per 1,000 bad requests (refusals and unscored samples are summarised, at
   most a line per reason per `log_interval_s`, never a line each).
3. Hostile: the same instant judge (plus `--judge-delay-ms` per backend call) at default limits, good
   clients alone for `--hostile-duration` s, then good clients with `--hostile-clients` hostile ones for as
   long: bomb-like images (8 one-bit 16-megapixel PNGs), a 200-query `/get_reward` (19,900 items), lone
   surrogates in values and keys, TIFF / EPS / text data URLs, a 100k-character `mode`, unknown item
   fields, a 10 MB JSON body of 3.3 million zeros, a body sent a byte at a time, and a 1,770-item job whose
   client hangs up.
   Reports `hostile_5xx` (must be 0), the server's peak RSS growth (VmHWM over VmRSS at the start of the
   phase), p99 of the good requests with and without the hostile traffic, and the time from SIGTERM to
   exit with all of it still running (`shutdown_grace_s` 5).

    python benchmarks/server_load.py [--duration 20] [--clients 32] [--fault-requests 10000] [--max-new-tokens 16]
    python benchmarks/server_load.py --skip-faults --skip-hostile --duration 12   # the near-the-limit figures only
    python benchmarks/server_load.py --skip-throughput --skip-faults --hostile-duration 10   # the hostile run

Every server's stderr goes to a file (`start_server`), never a pipe nobody drains. Run time: the bare run took
241 s on 2 shared cores: the efficiency run (six rounds of two ~6.7 s windows) and two 20 s throughput runs,
each with its server's start, the 10,000-request fault run at 196–249 requests/s, and two 20 s hostile phases.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import io
import json
import os
import platform
import random
import re
import signal
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

from judge.images import image_to_data_url
from judge.loopback import free_port

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

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def generate(self, requests, params):
        from judge.backends.base import Generation

        time.sleep(self.delay_s)
        out = []
        for request in requests:
            text = next(p["text"] for p in request.messages[-1]["content"] if p.get("type") == "text")
            scores = [int(m.group(1)) if (m := self.score.search(b)) else 0 for _, b in self.option.findall(text)]
            best = max(range(len(scores)), key=lambda i: (scores[i], -i)) if scores else 0
            out.append(Generation(text=f"<think>rule</think><answer>{string.ascii_uppercase[best]}</answer>"))
        return out


def serve_instant(port: int, hostile: bool = False, delay_ms: float = 0.0) -> None:
    """The fault and hostile runs' server (runs in a subprocess so its RSS is its own), as `mrjudge serve`
    runs it, logging at its default level (info). The fault run tightens two limits; the hostile run keeps
    the defaults but a short body deadline and shutdown grace (so the run is short)."""
    from judge.judging import Judge, JudgeConfig
    from reward_server import ServerConfig, create_app
    from reward_server.run import run_server

    if hostile:
        config = ServerConfig(port=port, api_key=KEY, body_timeout_s=2.0, shutdown_grace_s=5.0)
    else:
        config = ServerConfig(port=port, api_key=KEY, max_image_bytes=256 * 1024, max_body_bytes=2 * 2**20)
    judge = Judge(InstantRuleBackend(delay_ms / 1000), JudgeConfig(orders=2, batch_size=64, max_pixels=1_003_520))
    run_server(create_app(judge, config), config, log_level="info")


# -- helpers -----------------------------------------------------------------------------------------------


def data_url(size: int, seed: int) -> str:
    return image_to_data_url(
        Image.new("RGB", (size, size), tuple(random.Random(seed).randrange(256) for _ in range(3)))
    )


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width` x `height` pixels: a decompression bomb's calling card."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


def process_cpu_s(pid: int, thread: int | None = None) -> float:
    """CPU seconds (user + system) process `pid` has used so far: all its threads, or only `thread` (a thread id;
    `pid` itself is the main thread, where `mrjudge serve` runs its event loop)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def start_server(command: list[str], port: int, timeout_s: float = 300) -> subprocess.Popen:
    """Start a server and wait for its `/health`; its stderr goes to a file, `process.log` (`log_lines`).

    Not a pipe: nobody reads a pipe while the load runs, and a server that once logged a line per refused
    request (and per unscored `/get_reward` sample) blocked once 64 KB of them filled it (the fault run
    stalled between 1,000 and 2,000 requests). The server now summarises them (`reward_server.log_summary`);
    the fault run counts the lines it still writes."""
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    process.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"server exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("server did not come up")
        time.sleep(0.2)


def log_text(process: subprocess.Popen) -> str:
    """What the server has written to stderr so far (read with `pread`: the offset is shared with the server)."""
    fd = process.log.fileno()  # type: ignore[attr-defined]
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


def log_lines(process: subprocess.Popen) -> int:
    return log_text(process).count("\n")


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


def reward_body(c: int, n: int, image: str) -> dict:
    """Client `c`'s `n`-th `/v1/reward` body: two responses to one question about `image` (one MC item)."""
    return {
        "prompt": "What colour is the image?",
        "images": [image],
        "responses": [f"It is colour {c}-{n}.", f"It is not colour {c}-{n}."],
    }


async def post_raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes) -> tuple:
    """One POST on a kept-alive connection, as plain bytes: (status, body). The throughput clients share two
    cores with the server, and httpx spent ~7 ms of CPU a request there (the client, not the server, capped
    the load at ~50 requests/s); this costs a tenth of that."""
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
    return status, await reader.readexactly(length)


async def load(base: str, clients: int, duration_s: float, image: str) -> dict:
    """`clients` closed-loop clients (one kept-alive connection each) for `duration_s`; returns answered items/s,
    latencies, errors, the client's own CPU, and from the answers' timings how busy the judge was
    (`judge_busy_s`) and how many requests its batches held."""
    latencies: list[float] = []
    batch_shares: list[tuple[float, int]] = []  # per answer: (its batch's judge_ms, requests in that batch)
    errors = 0
    host, port = base.removeprefix("http://").split(":")
    stop_at = 0.0

    async def client(c: int) -> None:
        nonlocal errors
        n = 0
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop_at:
                body = json.dumps(reward_body(c, n, image)).encode()
                start = time.perf_counter()
                try:
                    status, answer = await post_raw(reader, writer, "/v1/reward", body)
                except (OSError, asyncio.IncompleteReadError, ValueError, AttributeError):
                    errors += 1
                    return
                if status == 200:
                    latencies.append(1000 * (time.perf_counter() - start))
                    timing = json.loads(answer)["timing"]
                    batch_shares.append((timing["judge_ms"], timing["batch_requests"]))
                else:
                    errors += 1
                n += 1
        finally:
            writer.close()

    async with httpx.AsyncClient(base_url=base, timeout=600) as http:
        for _ in range(2):  # warm-up: first-call allocations and lazy vocab scans
            await http.post("/v1/reward", json={"prompt": "Q?", "images": [image], "responses": ["a", "b"]})
    begin, cpu = time.perf_counter(), time.process_time()
    stop_at = begin + duration_s
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed, client_cpu = time.perf_counter() - begin, time.process_time() - cpu
    batches = sum(1 / size for _, size in batch_shares)
    return {
        "latencies_ms": latencies,
        "batches": batches,
        "judgments_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "errors": errors,
        "answered": len(latencies),
        "seconds": elapsed,
        "judge_busy_s": sum(ms / size for ms, size in batch_shares) / 1000,
        "mean_batch_requests": len(batch_shares) / batches if batches else 0.0,
        "client_cpu_s": client_cpu,
    }


def serve_args(model_dir: str, args: argparse.Namespace, port: int, batching: bool) -> list[str]:
    """`mrjudge serve`'s arguments for a throughput run (the in-process run builds its judge from the same)."""
    command = ["serve", "--model", model_dir, "--device", "cpu", "--port", str(port)]
    command += ["--max-new-tokens", str(args.max_new_tokens), "--log-level", "error"]
    command += ["--max-batch-items", str(args.max_batch_items), "--max-wait-ms", str(args.max_wait_ms)]
    return command + ["--request-timeout-s", "600"] + ([] if batching else ["--no-batching"])


def throughput_run(model_dir: str, args: argparse.Namespace, batching: bool, clients: list[int]) -> list[dict]:
    """One server, loaded by each number of `clients` in turn for `--duration` s."""
    port = free_port()
    process = start_server([sys.executable, "-m", "mrjudge.cli", *serve_args(model_dir, args, port, batching)], port)
    try:
        return [asyncio.run(load(f"http://127.0.0.1:{port}", n, args.duration, data_url(56, 0))) for n in clients]
    finally:
        stop_server(process)


class InProcess:
    """The limit the server is measured against: the judge `mrjudge serve` builds from the same flags
    (`mrjudge.serve_cmd.served_judge`), in this process, judging the same requests in batches of
    `--max-batch-items` through `compute_rewards` (what the server's batch worker runs), back to back. Each
    request is read and its image decoded as the server does (`RewardRequestBody.to_request`, `decode_images`);
    only HTTP, JSON and the queue are left out."""

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
        answered, batches, self.judge_s = 0, 0, 0.0
        begin, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - begin < duration_s:
            answered += self.batch()
            batches += 1
        return {"answered": answered, "batches": batches, "seconds": time.perf_counter() - begin,
                "cpu_s": time.process_time() - cpu, "judge_s": self.judge_s}  # fmt: skip


def efficiency_run(model_dir: str, args: argparse.Namespace, clients: int) -> dict:
    """In process and through the server at saturation (`clients` closed-loop clients), in
    `args.efficiency_rounds` rounds of two windows of `--duration / 3` s, the order turned each round (AB BA AB
    ...) so that the machine's other work and its drift weigh on both alike. Single windows of this VM read from
    0.62 to 1.26 of the in-process rate: three rounds in one order were too few to tell 0.8 from 0.9."""
    inprocess = InProcess(model_dir, args)
    port = free_port()
    process = start_server([sys.executable, "-m", "mrjudge.cli", *serve_args(model_dir, args, port, True)], port)
    windows: dict[str, list[dict]] = {"inprocess": [], "server": []}
    try:
        asyncio.run(load(f"http://127.0.0.1:{port}", clients, 1.0, data_url(56, 0)))  # warm-up
        window_s = args.duration / 3
        for round_ in range(args.efficiency_rounds):
            for side in ("inprocess", "server") if round_ % 2 == 0 else ("server", "inprocess"):
                if side == "inprocess":
                    windows["inprocess"].append(inprocess.run(window_s))
                    continue
                cpu, front = process_cpu_s(process.pid), process_cpu_s(process.pid, process.pid)
                window = asyncio.run(load(f"http://127.0.0.1:{port}", clients, window_s, data_url(56, 0)))
                used = {
                    "server_cpu_s": process_cpu_s(process.pid) - cpu,
                    "front_cpu_s": process_cpu_s(process.pid, process.pid) - front,
                }
                windows["server"].append({**window, **used})
    finally:
        stop_server(process)
    served, local = windows["server"], windows["inprocess"]
    seconds = sum(w["seconds"] for w in served)
    answered = sum(w["answered"] for w in served)
    return {
        "inprocess_judgments_per_s": sum(w["answered"] for w in local) / sum(w["seconds"] for w in local),
        "server_judgments_per_s": answered / seconds,
        "inprocess_cpu_s_per_s": sum(w["cpu_s"] for w in local) / sum(w["seconds"] for w in local),
        "p50_ms": percentile([ms for w in served for ms in w["latencies_ms"]], 0.5),
        "p99_ms": percentile([ms for w in served for ms in w["latencies_ms"]], 0.99),
        "errors": sum(w["errors"] for w in served),
        "mean_batch_requests": answered / sum(w["batches"] for w in served),
        "judge_busy_frac": sum(w["judge_busy_s"] for w in served) / seconds,
        # the judge's own time per full batch, in process and in the server (where the event loop shares its GIL)
        "inprocess_judge_ms_per_batch": 1000 * sum(w["judge_s"] for w in local) / sum(w["batches"] for w in local),
        "server_judge_ms_per_batch": 1000 * sum(w["judge_busy_s"] for w in served) / sum(w["batches"] for w in served),
        "client_cpu_s_per_s": sum(w["client_cpu_s"] for w in served) / seconds,
        "server_cpu_s_per_s": sum(w["server_cpu_s"] for w in served) / seconds,
        "front_cpu_s_per_s": sum(w["front_cpu_s"] for w in served) / seconds,
        "window_efficiency": [
            round(s["judgments_per_s"] / (i["answered"] / i["seconds"]), 3) for s, i in zip(served, local)
        ],
    }


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
        lines_start = log_lines(process)
        begin = time.perf_counter()
        counts = asyncio.run(fault_load(base, args.fault_requests, args.clients))
        elapsed = time.perf_counter() - begin
        rss_end = rss_kib(process.pid)
        alive = httpx.get(f"{base}/health", timeout=10).status_code == 200 and process.poll() is None
    finally:
        stop_server(process)
    # Every line from the timed run's start to the server's exit: the summaries flushed at shutdown count too.
    lines = log_lines(process) - lines_start
    return {
        **counts,
        "alive": alive,
        "rss_start_kib": rss_start,
        "rss_end_kib": rss_end,
        "seconds": elapsed,
        "log_lines": lines,
    }


# -- hostile -----------------------------------------------------------------------------------------------


def one_bit_png(width: int, height: int) -> str:
    return image_to_data_url(Image.new("1", (width, height), 1))


def hostile_bodies() -> dict[str, tuple[str, bytes]]:
    """The issue's probes, each `(path, body)`; every one must be refused with a 4xx."""
    bomb = [one_bit_png(4000, 4000 - i) for i in range(8)]  # ~9 KB each, 16 megapixels each
    tiff, eps = io.BytesIO(), b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    Image.new("RGB", (8, 8)).save(tiff, "TIFF")
    png = data_url(8, 2).split(",", 1)[1]
    reward = {"prompt": "Q?", "responses": ["score=1", "score=2"]}
    item = {"id": 1, "question": "Q?", "candidates": ["a", "b"]}
    bodies = {
        "bomb_images": ("/v1/reward", {**reward, "images": bomb}),
        "round_robin_19900": (
            "/get_reward",
            {"query": [f"P: {i}" for i in range(200)], "prompts": ["P: "] * 200, "tournament": "round_robin"},
        ),
        "surrogate_prompt": ("/v1/reward", {**reward, "prompt": "Q\ud800?"}),
        "surrogate_key": ("/v1/judge", {"items": [{**item, "\ud800": 1}]}),
        "surrogate_get_reward": ("/get_reward", {"query": ["P: a", "P: b"], "prompts": ["P\ud800", "P: "]}),
        "tiff": (
            "/v1/reward",
            {**reward, "images": ["data:image/tiff;base64," + base64.b64encode(tiff.getvalue()).decode()]},
        ),
        "eps": ("/v1/reward", {**reward, "images": ["data:image/eps;base64," + base64.b64encode(eps).decode()]}),
        "text_data_url": ("/v1/reward", {**reward, "images": ["data:text/plain;base64," + png]}),
        "long_mode": ("/v1/reward", {**reward, "mode": "x" * 100_000}),
        "unknown_item_field": ("/v1/judge", {"items": [{**item, "colour": "red"}]}),
        "json_10mb": ("/v1/reward", {**reward, "padding": [0] * 3_300_000}),
    }
    return {kind: (path, json.dumps(body).encode()) for kind, (path, body) in bodies.items()}


async def raw_request(
    port: int, path: str, body: bytes, *, byte_every_s: float = 0.0, hang_up_after_s: float = 0.0
) -> int:
    """One request on a raw socket: the body all at once or a byte at a time; or sent whole, then the
    client hangs up. Returns the status (0: no answer, as expected after hanging up)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    try:
        writer.write(head.encode())
        if byte_every_s:
            for i in range(len(body)):
                writer.write(body[i : i + 1])
                await writer.drain()
                try:
                    line = await asyncio.wait_for(reader.readline(), byte_every_s)
                    return int(line.split()[1]) if line else 0
                except asyncio.TimeoutError:
                    continue
        try:
            writer.write(body)
            await writer.drain()
        except OSError:  # the server answered early (413 / 408) and closed: read what it said
            pass
        if hang_up_after_s:
            await asyncio.sleep(hang_up_after_s)
            return 0
        line = await reader.readline()
        return int(line.split()[1]) if line else 0
    finally:
        writer.close()


async def good_clients(base: str, clients: int, stop: asyncio.Event, latencies: list[float], counts: dict) -> None:
    image = data_url(32, 1)

    async def client(c: int, http: httpx.AsyncClient) -> None:
        i = c
        while not stop.is_set():
            path, body, _ = good_request(i, image)
            start = time.perf_counter()
            try:
                status = (await http.post(path, content=body, headers={"Content-Type": "application/json"})).status_code
            except httpx.HTTPError:
                status = 0
            if status == 200:
                latencies.append(1000 * (time.perf_counter() - start))
            counts[status] = counts.get(status, 0) + 1
            i += clients

    headers = {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits, headers=headers) as http:
        await asyncio.gather(*(client(c, http) for c in range(clients)))


async def hostile_clients(port: int, clients: int, stop: asyncio.Event, counts: dict, only: tuple = ()) -> None:
    bodies = hostile_bodies()
    kinds = [k for k in (*bodies, "slow_body", "hang_up") if not only or k in only]
    hang_up = json.dumps({"prompt": "Q?", "responses": [f"score={i}" for i in range(60)], "mode": "tournament"})

    async def client(c: int) -> None:
        i = c
        while not stop.is_set():
            kind = kinds[i % len(kinds)]
            if kind == "slow_body":
                status = await raw_request(port, "/v1/reward", bodies["surrogate_prompt"][1], byte_every_s=0.5)
            elif kind == "hang_up":
                status = await raw_request(port, "/v1/reward", hang_up.encode(), hang_up_after_s=0.05)
            else:
                try:
                    status = await raw_request(port, *bodies[kind])
                except OSError:
                    status = -1  # reset: never expected
            counts.setdefault(kind, {}).setdefault(status, 0)
            counts[kind][status] += 1
            i += clients

    await asyncio.gather(*(client(c) for c in range(clients)))


async def hostile_phase(port: int, args: argparse.Namespace, hostile: bool, process=None, duration_s=None) -> dict:
    """Good clients (and hostile ones) for `--hostile-duration` s; with `process`, SIGTERM it at the end
    with the load still running and time its exit."""
    stop = asyncio.Event()
    latencies: list[float] = []
    good: dict = {}
    bad: dict = {}
    tasks = [asyncio.ensure_future(good_clients(f"http://127.0.0.1:{port}", args.clients, stop, latencies, good))]
    if hostile:
        only = tuple(args.hostile_kinds.split(",")) if args.hostile_kinds else ()
        tasks.append(asyncio.ensure_future(hostile_clients(port, args.hostile_clients, stop, bad, only)))
    await asyncio.sleep(args.hostile_duration if duration_s is None else duration_s)
    shutdown_s = None
    if process is not None:
        start = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        while process.poll() is None and time.perf_counter() - start < 60:
            await asyncio.sleep(0.02)
        shutdown_s = time.perf_counter() - start
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"latencies": latencies, "good": good, "bad": bad, "shutdown_s": shutdown_s}


def hostile_run(args: argparse.Namespace) -> dict:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve-instant", str(port), "--hostile-server"]
    command += ["--judge-delay-ms", str(args.judge_delay_ms)]
    process = start_server(command, port)
    try:
        quiet = asyncio.run(hostile_phase(port, args, hostile=False))
        rss_start = rss_kib(process.pid)
        hwm_start = rss_kib(process.pid, "VmHWM")
        loud = asyncio.run(hostile_phase(port, args, hostile=True))
        rss_end, hwm_end = rss_kib(process.pid), rss_kib(process.pid, "VmHWM")
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
        counted = dict(
            re.findall(
                r'^mrjudge_(cancelled_requests_total\{reason="\w+"\}|stopped_batches_total) (\d+)', metrics, re.M
            )
        )
        shutdown = asyncio.run(hostile_phase(port, args, hostile=True, process=process, duration_s=3.0))
    finally:
        if process.poll() is None:
            process.kill()
    statuses = [s for per_kind in loud["bad"].values() for s in per_kind]
    return {
        "hostile_5xx": sum(n for per_kind in loud["bad"].values() for s, n in per_kind.items() if s >= 500),
        "hostile_requests": sum(n for per_kind in loud["bad"].values() for n in per_kind.values()),
        "hostile_statuses": {k: {str(s): n for s, n in sorted(v.items())} for k, v in sorted(loud["bad"].items())},
        "hostile_all_refused_4xx": all(400 <= s < 500 or s == 0 for s in statuses),
        "good_5xx_with_hostile": sum(n for s, n in loud["good"].items() if s >= 500),
        "good_non_200_with_hostile": sum(n for s, n in loud["good"].items() if s != 200),
        "good_p50_ms_quiet": round(percentile(quiet["latencies"], 0.5), 1),
        "good_p99_ms_quiet": round(percentile(quiet["latencies"], 0.99), 1),
        "good_p50_ms_hostile": round(percentile(loud["latencies"], 0.5), 1),
        "good_p99_ms_hostile": round(percentile(loud["latencies"], 0.99), 1),
        "good_requests_quiet": len(quiet["latencies"]),
        "good_requests_hostile": len(loud["latencies"]),
        "hostile_rss_start_mib": round(rss_start / 1024, 1),
        "hostile_peak_rss_growth_mib": round((max(hwm_end, hwm_start) - rss_start) / 1024, 1),
        "hostile_rss_end_growth_mib": round((rss_end - rss_start) / 1024, 1),
        "health_after_hostile": health,
        "cancelled_disconnect": int(counted.get('cancelled_requests_total{reason="disconnect"}', 0)),
        "stopped_batches": int(counted.get("stopped_batches_total", 0)),
        "shutdown_s_under_load": round(shutdown["shutdown_s"], 2),
        "shutdown_grace_s": 5.0,
        "shutdown_exit_code": process.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per throughput run")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument(
        "--saturation-clients", type=int, default=0, help="clients of the saturated run (default: 2 x max-batch-items)"
    )
    parser.add_argument(
        "--efficiency-rounds",
        type=int,
        default=6,
        help="rounds of the near-the-limit run, each a --duration/3 s window in process and one through the server",
    )
    parser.add_argument("--fault-requests", type=int, default=10_000)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-batch-items", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--skip-hostile", action="store_true")
    parser.add_argument("--hostile-duration", type=float, default=20.0, help="seconds per hostile-run phase")
    parser.add_argument("--hostile-clients", type=int, default=8)
    parser.add_argument("--hostile-kinds", default="", help="comma-separated probe kinds (default: all)")
    parser.add_argument("--judge-delay-ms", type=float, default=5.0, help="hostile run: per backend call")
    parser.add_argument("--serve-instant", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--hostile-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.efficiency_rounds < 1:
        parser.error(f"--efficiency-rounds ({args.efficiency_rounds}) must be >= 1")
    if args.serve_instant:
        serve_instant(args.serve_instant, args.hostile_server, args.judge_delay_ms)
        return

    result: dict = {
        "benchmark": "server_load",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "clients": args.clients,
    }
    if not args.skip_throughput:
        from tiny_world.model import build_tiny_model

        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from benchmarks.equal_work import force_in_folder

        saturation = args.saturation_clients or 2 * args.max_batch_items
        with tempfile.TemporaryDirectory() as folder:
            model_dir = str(build_tiny_model(folder, size=args.size, seed=0))
            force_in_folder(model_dir, args.max_new_tokens)  # every call generates exactly max_new_tokens
            saturated = efficiency_run(model_dir, args, saturation)
            [batched] = throughput_run(model_dir, args, True, [args.clients])
            [unbatched] = throughput_run(model_dir, args, False, [args.clients])
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
                "errors": batched["errors"] + unbatched["errors"] + saturated["errors"],
                "inprocess_judgments_per_s": round(saturated["inprocess_judgments_per_s"], 2),
                "saturation_clients": saturation,
                "server_judgments_per_s": round(saturated["server_judgments_per_s"], 2),
                "server_efficiency": round(
                    saturated["server_judgments_per_s"] / saturated["inprocess_judgments_per_s"], 3
                ),
                "server_efficiency_by_window": saturated["window_efficiency"],  # by round: AB, BA, AB, ...
                "efficiency_rounds": args.efficiency_rounds,
                "server_p50_ms": round(saturated["p50_ms"], 1),
                "server_p99_ms": round(saturated["p99_ms"], 1),
                "server_mean_batch_requests": round(saturated["mean_batch_requests"], 2),
                "server_judge_busy_frac": round(saturated["judge_busy_frac"], 3),
                "server_client_cpu_s_per_s": round(saturated["client_cpu_s_per_s"], 3),
                "server_cpu_s_per_s": round(saturated["server_cpu_s_per_s"], 3),
                # the event loop's own thread (HTTP, JSON, checks, image decoding): the CPU the judge's cores lose
                "server_front_cpu_s_per_s": round(saturated["front_cpu_s_per_s"], 3),
                "server_front_cpu_ms_per_judgment": round(
                    1000 * saturated["front_cpu_s_per_s"] / saturated["server_judgments_per_s"], 3
                ),
                # judgments per CPU-second of the server process against those of the judge in process: what
                # the HTTP front costs, whatever share of the cores the machine's other work leaves either
                "server_cpu_efficiency": round(
                    (saturated["server_judgments_per_s"] / saturated["server_cpu_s_per_s"])
                    / (saturated["inprocess_judgments_per_s"] / saturated["inprocess_cpu_s_per_s"]),
                    3,
                ),
                "batched_mean_batch_requests": round(batched["mean_batch_requests"], 2),
                "batched_judge_busy_frac": round(batched["judge_busy_s"] / batched["seconds"], 3),
                "inprocess_cpu_s_per_s": round(saturated["inprocess_cpu_s_per_s"], 3),
                "inprocess_judge_ms_per_batch": round(saturated["inprocess_judge_ms_per_batch"], 1),
                "server_judge_ms_per_batch": round(saturated["server_judge_ms_per_batch"], 1),
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
                "fault_log_lines": faults["log_lines"],
                "refused_log_lines_per_1000": round(1000 * faults["log_lines"] / max(faults["bad_total"], 1), 1),
                "rss_start_mib": round(faults["rss_start_kib"] / 1024, 1),
                "rss_end_mib": round(faults["rss_end_kib"] / 1024, 1),
                "rss_growth": round(faults["rss_end_kib"] / faults["rss_start_kib"] - 1, 4),
            }
        )
    if not args.skip_hostile:
        result.update(
            {
                "hostile_judge": f"instant rule backend + {args.judge_delay_ms:g} ms per call, default limits",
                "hostile_duration_s": args.hostile_duration,
                "hostile_clients": args.hostile_clients,
                **hostile_run(args),
            }
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
