"""Hostile clients beside good ones: every probe refused with a 4xx, good requests still served, memory bounded,
and a prompt shutdown with all of it in flight."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import time

import httpx

from benchmarks.kit import free_port, peak_rss_mib, percentile, rss_mib, start_server
from benchmarks.server_load import instant_server
from benchmarks.server_load.bodies import KEY, data_url, good_request, hang_up_body, hostile_bodies
from benchmarks.server_load.raw_http import post_once


async def good_clients(base: str, clients: int, stop: asyncio.Event, latencies: list[float], counts: dict) -> None:
    """`clients` httpx clients sending the fault run's good requests until `stop`: the latencies of the 200s,
    and every status counted."""
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
    """`clients` raw-socket clients sending the probes in turn (or `only` these kinds) until `stop`; counts
    each kind's statuses."""
    bodies = hostile_bodies()
    kinds = [k for k in (*bodies, "slow_body", "hang_up") if not only or k in only]
    hang_up = hang_up_body()
    auth = f"Bearer {KEY}"

    async def client(c: int) -> None:
        i = c
        while not stop.is_set():
            kind = kinds[i % len(kinds)]
            if kind == "slow_body":
                path, body = "/v1/reward", bodies["surrogate_prompt"][1]
                status = await post_once(port, path, body, authorization=auth, byte_every_s=0.5)
            elif kind == "hang_up":
                status = await post_once(port, "/v1/reward", hang_up, authorization=auth, hang_up_after_s=0.05)
            else:
                try:
                    status = await post_once(port, *bodies[kind], authorization=auth)
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
    """A quiet phase, a hostile one, then SIGTERM under hostile load; the JSON line's hostile keys."""
    port = free_port()
    process = start_server(instant_server.command(port, hostile=True, judge_delay_ms=args.judge_delay_ms), port=port)
    try:
        quiet = asyncio.run(hostile_phase(port, args, hostile=False))
        rss_start, hwm_start = rss_mib(process.pid), peak_rss_mib(process.pid)
        loud = asyncio.run(hostile_phase(port, args, hostile=True))
        rss_end, hwm_end = rss_mib(process.pid), peak_rss_mib(process.pid)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
        counter = r'^mrjudge_(cancelled_requests_total\{reason="\w+"\}|stopped_batches_total) (\d+)'
        counted = dict(re.findall(counter, metrics, re.M))
        shutdown = asyncio.run(hostile_phase(port, args, hostile=True, process=process, duration_s=3.0))
    finally:
        if process.poll() is None:
            process.kill()
    by_kind = loud["bad"].values()
    return {
        "hostile_5xx": sum(n for per_kind in by_kind for s, n in per_kind.items() if s >= 500),
        "hostile_requests": sum(n for per_kind in by_kind for n in per_kind.values()),
        "hostile_statuses": {k: {str(s): n for s, n in sorted(v.items())} for k, v in sorted(loud["bad"].items())},
        "hostile_all_refused_4xx": all(400 <= s < 500 or s == 0 for per_kind in by_kind for s in per_kind),
        "good_5xx_with_hostile": sum(n for s, n in loud["good"].items() if s >= 500),
        "good_non_200_with_hostile": sum(n for s, n in loud["good"].items() if s != 200),
        "good_p50_ms_quiet": percentile(quiet["latencies"], 0.5),
        "good_p99_ms_quiet": percentile(quiet["latencies"], 0.99),
        "good_p50_ms_hostile": percentile(loud["latencies"], 0.5),
        "good_p99_ms_hostile": percentile(loud["latencies"], 0.99),
        "good_requests_quiet": len(quiet["latencies"]),
        "good_requests_hostile": len(loud["latencies"]),
        "hostile_rss_start_mib": rss_start,
        "hostile_peak_rss_growth_mib": max(hwm_end, hwm_start) - rss_start,
        "hostile_rss_end_growth_mib": rss_end - rss_start,
        "health_after_hostile": health,
        "cancelled_disconnect": int(counted.get('cancelled_requests_total{reason="disconnect"}', 0)),
        "stopped_batches": int(counted.get("stopped_batches_total", 0)),
        "shutdown_s_under_load": shutdown["shutdown_s"],
        "shutdown_grace_s": instant_server.HOSTILE_SHUTDOWN_GRACE_S,
        "shutdown_exit_code": process.returncode,
    }


def measure(args: argparse.Namespace) -> dict:
    """The hostile run; the JSON line's hostile keys."""
    return {
        "hostile_judge": f"instant rule backend + {args.judge_delay_ms:g} ms per call, default limits",
        "hostile_duration_s": args.hostile_duration,
        "hostile_clients": args.hostile_clients,
        **hostile_run(args),
    }
