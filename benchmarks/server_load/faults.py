"""Faults: a tenth of the requests bad, every bad one refused with a 4xx, the server's memory and log kept flat."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import time

import httpx

from benchmarks.kit import answers, free_port, log_lines, rss_mib, start_server, stop_server
from benchmarks.server_load import instant_server
from benchmarks.server_load.bodies import BAD_KINDS, KEY, bad_request, data_url, good_request


async def fault_load(base: str, n: int, clients: int) -> dict:
    """`n` requests from `clients` httpx clients, every tenth bad (each of `BAD_KINDS` equally often, at random
    places); counts the answers by what they should have been."""
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
    """`args.fault_requests` requests from `args.clients` clients after a 200-request warm-up: the answers'
    counts, whether the server is still alive, its RSS before and after (MiB), the seconds, and the lines it
    logged from the timed run's start to its exit."""
    port = free_port()
    process = start_server(instant_server.command(port), port=port)
    base = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(fault_load(base, 200, args.clients))  # warm-up, so first-use allocations are not counted
        rss_start = rss_mib(process.pid)
        lines_start = log_lines(process)
        begin = time.perf_counter()
        counts = asyncio.run(fault_load(base, args.fault_requests, args.clients))
        elapsed = time.perf_counter() - begin
        rss_end = rss_mib(process.pid)
        alive = answers(f"{base}/health", timeout_s=10) and process.poll() is None
    finally:
        stop_server(process)
    # Every line from the timed run's start to the server's exit: the summaries flushed at shutdown count too.
    lines = log_lines(process) - lines_start
    return {**counts, "alive": alive, "rss_start_mib": rss_start, "rss_end_mib": rss_end, "seconds": elapsed,
            "log_lines": lines}  # fmt: skip


def measure(args: argparse.Namespace) -> dict:
    """The fault run; the JSON line's fault keys."""
    faults = fault_run(args)
    return {
        "fault_judge": "instant rule backend (tiny_world.rule_judge), orders=2, api key on",
        "fault_bad_kinds": list(BAD_KINDS),
        "fault_bad_4xx": faults["bad_4xx"],
        "fault_bad_total": faults["bad_total"],
        "fault_good_200": faults["good_200"],
        "fault_good_total": faults["good_total"],
        "fault_5xx": faults["5xx"],
        "fault_server_alive": faults["alive"],
        "fault_requests_per_s": args.fault_requests / faults["seconds"],
        "fault_log_lines": faults["log_lines"],
        "refused_log_lines_per_1000": 1000 * faults["log_lines"] / max(faults["bad_total"], 1),
        "rss_start_mib": faults["rss_start_mib"],
        "rss_end_mib": faults["rss_end_mib"],
        "rss_growth": faults["rss_end_mib"] / faults["rss_start_mib"] - 1,
    }
