"""Throughput at equal work: the server near the in-process judge's limit, and with batching against without."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time

import httpx

from benchmarks.equal_work import force_in_folder
from benchmarks.kit import cpu_seconds, free_port, percentile, start_server, stop_server
from benchmarks.server_load.bodies import data_url, reward_body
from benchmarks.server_load.inprocess import InProcess, serve_args
from benchmarks.server_load.raw_http import post_kept_alive


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
                    status, answer = await post_kept_alive(reader, writer, "/v1/reward", body)
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
    begin, cpu = time.perf_counter(), cpu_seconds()
    stop_at = begin + duration_s
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed, client_cpu = time.perf_counter() - begin, cpu_seconds() - cpu
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


def start_judge_server(model_dir: str, args: argparse.Namespace, batching: bool):
    """`mrjudge serve` over the tiny judge on a free port: (its process, its base URL)."""
    port = free_port()
    command = [sys.executable, "-m", "mrjudge.cli", *serve_args(model_dir, args, port, batching)]
    return start_server(command, port=port), f"http://127.0.0.1:{port}"


def batching_run(model_dir: str, args: argparse.Namespace) -> tuple[dict, dict, list[float]]:
    """With batching against without: both servers up, loaded by `--clients` clients in `--batching-rounds`
    rounds of one `--duration / rounds` s window each, the order turned each round (AB BA AB ...), so the
    machine's drift weighs on both alike. Returns each side's windows pooled and the rounds' ratios. One
    20 s window a side, one after the other, read ratios of 5.0, 4.2 and 5.5 in three bare runs."""
    servers = {batching: start_judge_server(model_dir, args, batching) for batching in (True, False)}
    windows: dict[bool, list[dict]] = {True: [], False: []}
    image = data_url(56, 0)
    try:
        window_s = args.duration / args.batching_rounds
        for round_ in range(args.batching_rounds):
            for batching in (True, False) if round_ % 2 == 0 else (False, True):
                windows[batching].append(asyncio.run(load(servers[batching][1], args.clients, window_s, image)))
    finally:
        for process, _ in servers.values():
            stop_server(process)
    ratios = [b["judgments_per_s"] / max(u["judgments_per_s"], 1e-9) for b, u in zip(windows[True], windows[False])]
    return pooled(windows[True]), pooled(windows[False]), ratios


def pooled(windows: list[dict]) -> dict:
    """`load` windows of one server as one run: rates over their summed time, percentiles over all latencies."""
    latencies = [ms for w in windows for ms in w["latencies_ms"]]
    seconds, batches = sum(w["seconds"] for w in windows), sum(w["batches"] for w in windows)
    return {
        "judgments_per_s": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "errors": sum(w["errors"] for w in windows),
        "seconds": seconds,
        "judge_busy_s": sum(w["judge_busy_s"] for w in windows),
        "mean_batch_requests": len(latencies) / batches if batches else 0.0,
    }


def efficiency_run(model_dir: str, args: argparse.Namespace, clients: int) -> dict:
    """In process and through the server at saturation (`clients` closed-loop clients), in
    `args.efficiency_rounds` rounds of two windows of `--duration / 3` s, the order turned each round (AB BA AB
    ...) so that the machine's other work and its drift weigh on both alike. Single windows of this VM read from
    0.62 to 1.26 of the in-process rate: three rounds in one order were too few to tell 0.8 from 0.9."""
    inprocess = InProcess(model_dir, args)
    process, base = start_judge_server(model_dir, args, batching=True)
    pid = process.pid  # its main thread (the same id) runs the event loop: the HTTP front
    windows: dict[str, list[dict]] = {"inprocess": [], "server": []}
    try:
        asyncio.run(load(base, clients, 1.0, data_url(56, 0)))  # warm-up
        window_s = args.duration / 3
        for round_ in range(args.efficiency_rounds):
            for side in ("inprocess", "server") if round_ % 2 == 0 else ("server", "inprocess"):
                if side == "inprocess":
                    windows["inprocess"].append(inprocess.run(window_s))
                    continue
                cpu, front = cpu_seconds(pid), cpu_seconds(pid, thread=pid)
                window = asyncio.run(load(base, clients, window_s, data_url(56, 0)))
                used = {"server_cpu_s": cpu_seconds(pid) - cpu, "front_cpu_s": cpu_seconds(pid, thread=pid) - front}
                windows["server"].append({**window, **used})
    finally:
        stop_server(process)
    served, local = windows["server"], windows["inprocess"]
    seconds = sum(w["seconds"] for w in served)
    local_seconds = sum(w["seconds"] for w in local)
    answered = sum(w["answered"] for w in served)
    return {
        "inprocess_judgments_per_s": sum(w["answered"] for w in local) / local_seconds,
        "server_judgments_per_s": answered / seconds,
        "inprocess_cpu_s_per_s": sum(w["cpu_s"] for w in local) / local_seconds,
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
        "window_efficiency": [s["judgments_per_s"] / (i["answered"] / i["seconds"]) for s, i in zip(served, local)],
    }


def measure(args: argparse.Namespace) -> dict:
    """The three throughput runs on one tiny judge forced to `--max-new-tokens`; the JSON line's throughput keys."""
    from tiny_world.model import build_tiny_model

    saturation = args.saturation_clients or 2 * args.max_batch_items
    with tempfile.TemporaryDirectory() as folder:
        model_dir = str(build_tiny_model(folder, size=args.size, seed=0))
        force_in_folder(model_dir, args.max_new_tokens)  # every call generates exactly max_new_tokens
        saturated = efficiency_run(model_dir, args, saturation)
        batched, unbatched, round_ratios = batching_run(model_dir, args)
    tokens_per_judgment = 2 * args.max_new_tokens  # two display orders
    server_rate, inprocess_rate = saturated["server_judgments_per_s"], saturated["inprocess_judgments_per_s"]
    return {
        "throughput_judge": f"{args.size} Qwen2.5-VL (random init), hf backend on cpu, orders=2, "
        f"max_new_tokens={args.max_new_tokens}",
        "duration_s": args.duration,
        "max_batch_items": args.max_batch_items,
        "max_wait_ms": args.max_wait_ms,
        "batched_judgments_per_s": batched["judgments_per_s"],
        "unbatched_judgments_per_s": unbatched["judgments_per_s"],
        "ratio": batched["judgments_per_s"] / max(unbatched["judgments_per_s"], 1e-9),
        "ratio_by_round": round_ratios,  # by round: AB, BA, AB, ...
        "batching_rounds": args.batching_rounds,
        "equal_work": "every call generates exactly max_new_tokens tokens (min_new_tokens in the served "
        "model's generation_config.json); tokens = judgments x 2 orders x max_new_tokens",
        "batched_tokens_per_s": batched["judgments_per_s"] * tokens_per_judgment,
        "unbatched_tokens_per_s": unbatched["judgments_per_s"] * tokens_per_judgment,
        "p50_ms": batched["p50_ms"],
        "p99_ms": batched["p99_ms"],
        "unbatched_p50_ms": unbatched["p50_ms"],
        "unbatched_p99_ms": unbatched["p99_ms"],
        "errors": batched["errors"] + unbatched["errors"] + saturated["errors"],
        "inprocess_judgments_per_s": inprocess_rate,
        "saturation_clients": saturation,
        "server_judgments_per_s": server_rate,
        "server_efficiency": server_rate / inprocess_rate,
        "server_efficiency_by_window": saturated["window_efficiency"],  # by round: AB, BA, AB, ...
        "efficiency_rounds": args.efficiency_rounds,
        "server_p50_ms": saturated["p50_ms"],
        "server_p99_ms": saturated["p99_ms"],
        "server_mean_batch_requests": saturated["mean_batch_requests"],
        "server_judge_busy_frac": saturated["judge_busy_frac"],
        "server_client_cpu_s_per_s": saturated["client_cpu_s_per_s"],
        "server_cpu_s_per_s": saturated["server_cpu_s_per_s"],
        # the event loop's own thread (HTTP, JSON, checks, image decoding): the CPU the judge's cores lose
        "server_front_cpu_s_per_s": saturated["front_cpu_s_per_s"],
        "server_front_cpu_ms_per_judgment": 1000 * saturated["front_cpu_s_per_s"] / server_rate,
        # judgments per CPU-second of the server process against those of the judge in process: what the HTTP
        # front costs, whatever share of the cores the machine's other work leaves either
        "server_cpu_efficiency": (server_rate / saturated["server_cpu_s_per_s"])
        / (inprocess_rate / saturated["inprocess_cpu_s_per_s"]),
        "batched_mean_batch_requests": batched["mean_batch_requests"],
        "batched_judge_busy_frac": batched["judge_busy_s"] / batched["seconds"],
        "inprocess_cpu_s_per_s": saturated["inprocess_cpu_s_per_s"],
        "inprocess_judge_ms_per_batch": saturated["inprocess_judge_ms_per_batch"],
        "server_judge_ms_per_batch": saturated["server_judge_ms_per_batch"],
    }
