"""An adapter catalogue at 10⁵ revisions: registration, lookups and saves that do not grow, cold loads served.

1. Register `--revisions` rank-1 LoRA revisions of the tiny Qwen2.5-VL (language attention q/v/o; a few KB
   of safetensors each, seeded random values) over `--policies` policies, `--chunk` at a time through
   `AdapterStore.add_many` (`register_s`).
2. Probe the index after the first chunk (N = `--chunk`, "start") and after the last ("end"): p99 of
   `--probes` `resolve` calls (full ids and 8-digit prefixes of random revisions, and aliases), of single
   `add_files` saves (each pays its fsyncs) and of `promote` (the index write alone). The end/start ratios
   show whether they grow with the catalogue.
3. Serve it: `mrjudge serve --adapter-store` over the tiny model in a subprocess, on loopback. `--clients`
   resident clients ask for a hot set of `--hot` adapters (preloaded) for `--duration` s while `--clients`
   other clients ask (a) for the same hot set ("without cold traffic") and then (b) for adapters drawn
   Zipf-like (exponent `--zipf`) from the whole catalogue ("with cold traffic"). Reports the Zipf requests'
   `hit_rate` (adapter resident on arrival) and `cold_load_p50_ms` (their wait for the load), and the
   resident clients' p99 latency in (a) and (b). The server reserves its `--capacity` adapter slots at start
   (`--reserve-adapter-slots`). Besides the p99s, `resident_server_p99_ms` times the same requests inside the
   server and `resident_slowest_1pct` says where the slowest 1 % of them spent their time (inside the server,
   waiting for a batch, judging).

    python -m benchmarks.adapter_catalogue                      # N = 100,000: 3-4.5 min on 2 cores
    python -m benchmarks.adapter_catalogue --revisions 5000 --duration 8    # a quick run

Run time: three bare runs took 3–4.5 min each on 2 quiet cores (2026-12-06; registration 85–179 s of it, the
disk's pace); registering alone took 330 s and 534 s in two earlier runs on cores busy with other jobs
(docs/adapters.md).

The catalogue lives in a temporary folder (`--dir`, default the system's) and is deleted at the end.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

from benchmarks.kit import emit, free_port, percentile, start_server, stop_server

TARGETS = r"^(?!.*visual).*\.(q_proj|v_proj|o_proj)$"


def template(base_dir: Path) -> tuple[dict[str, tuple[int, ...]], dict, str]:
    """A rank-1 LoRA over the tiny base: its tensor shapes, its PEFT config, and the base's fingerprint."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    from adapter_revisions import base_fingerprint
    from judge.models import load_model

    model = load_model(str(base_dir), device="cpu").model
    fingerprint = base_fingerprint(model)
    torch.manual_seed(0)
    peft = get_peft_model(model, LoraConfig(r=1, lora_alpha=1, target_modules=TARGETS, lora_dropout=0.0))
    shapes = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(peft).items()}
    return shapes, peft.peft_config["default"].to_dict(), fingerprint


def adapter_bytes(shapes: dict[str, tuple[int, ...]], rng: np.random.Generator) -> bytes:
    """One revision's `adapter_model.safetensors`: small seeded values (the answers do not matter here)."""
    from safetensors.numpy import save

    return save({k: (rng.standard_normal(s) * 0.01).astype(np.float32) for k, s in shapes.items()})


SAVE_PHASES = ("file_fsync", "folder_fsync", "folder_ops", "index_txn", "other")
"""Where a save's time goes: fsyncs of its three files, of the revisions folder, making and renaming its
staging folder, the index transaction (with its commit), and the rest (hashing, JSON, reading the row back)."""


@contextmanager
def timed_save_phases(store) -> Iterator[dict[str, float]]:
    """Time the store's own calls during the block, by phase (`SAVE_PHASES`), into the yielded dict (ms).

    The store's module-level `os.fsync`, `fsync_path`, `tempfile.mkdtemp`, `os.rename` and the catalogue's
    `write` are wrapped for the block only; what a save does is unchanged, only counted."""
    import adapter_revisions.store as store_module

    spent = dict.fromkeys(SAVE_PHASES, 0.0)
    inside: list[str] = []  # the phase being timed: `fsync_path` calls `os.fsync`, counted once, as the folder's

    def timed(phase: str, function):
        def call(*args, **kwargs):
            if inside:
                return function(*args, **kwargs)
            inside.append(phase)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[phase] += 1000 * (time.perf_counter() - start)
                inside.pop()

        return call

    @contextmanager
    def timed_write():
        start = time.perf_counter()
        with original_write() as conn:
            yield conn
        spent["index_txn"] += 1000 * (time.perf_counter() - start)

    original_write = store.catalogue.write
    patches = [
        (store_module.os, "fsync", timed("file_fsync", os.fsync)),
        (store_module, "fsync_path", timed("folder_fsync", store_module.fsync_path)),
        (store_module.tempfile, "mkdtemp", timed("folder_ops", tempfile.mkdtemp)),
        (store_module.os, "rename", timed("folder_ops", os.rename)),
        (store.catalogue, "write", timed_write),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, wrapper in patches:
        setattr(owner, name, wrapper)
    try:
        yield spent
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def probe(store, refs: list[str], policies: list[str], shapes, config, fingerprint, n: int, rng) -> dict:
    """p99 (and p50) of resolves, single saves (and each phase of them) and index writes on the store as it is.

    The disk is synced first: right after registering 10⁶ revisions (~16 GB of small files) the kernel is still
    writing them back, and a save's fsync would wait on that import rather than on anything of its own."""
    os.sync()
    resolve_ms, save_ms, index_ms = [], [], []
    phases: dict[str, list[float]] = {phase: [] for phase in SAVE_PHASES}
    for i in range(n):
        ref = refs[rng.integers(len(refs))]
        policy, _, rid = ref.partition("@")
        name = (rid, rid[:8], "latest", "bench")[i % 4]
        start = time.perf_counter()
        store.resolve(f"{policy}@{name}")
        resolve_ms.append(1000 * (time.perf_counter() - start))
    for i in range(max(10, n // 5)):
        policy = policies[i % len(policies)]
        weights = adapter_bytes(shapes, rng)
        with timed_save_phases(store) as spent:
            start = time.perf_counter()
            revision = store.add_files(policy, weights, config, base_fingerprint=fingerprint)
            save_ms.append(1000 * (time.perf_counter() - start))
        spent["other"] = save_ms[-1] - sum(spent.values())
        for phase, ms in spent.items():
            phases[phase].append(ms)
        start = time.perf_counter()
        store.promote(revision.ref, "bench")
        index_ms.append(1000 * (time.perf_counter() - start))
    return {
        "resolve_p99_ms": percentile(resolve_ms, 0.99),
        "resolve_p50_ms": percentile(resolve_ms, 0.5),
        "save_p99_ms": percentile(save_ms, 0.99),
        "save_p50_ms": percentile(save_ms, 0.5),
        "index_write_p99_ms": percentile(index_ms, 0.99),
        "save_phases_ms": {
            phase: {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99), "max": max(values)}
            for phase, values in phases.items()
        },
        "slowest_save_ms": _slowest(save_ms, phases),
    }


def _slowest(save_ms: list[float], phases: dict[str, list[float]]) -> dict[str, float]:
    """The slowest save of the probe, by phase: what a tail save waited on."""
    worst = max(range(len(save_ms)), key=save_ms.__getitem__)
    return {"total": save_ms[worst], **{phase: values[worst] for phase, values in phases.items()}}


def register(store, policies, shapes, config, fingerprint, total: int, chunk: int, rng, on_first_chunk) -> tuple:
    refs: list[str] = []
    elapsed = 0.0
    while len(refs) < total:
        size = min(chunk, total - len(refs))
        policy = policies[(len(refs) // chunk) % len(policies)]
        batch = [(adapter_bytes(shapes, rng), config) for _ in range(size)]
        start = time.perf_counter()
        added = store.add_many(policy, batch, base_fingerprint=fingerprint)
        elapsed += time.perf_counter() - start
        refs += [r.ref for r in added]
        if len(refs) == size:
            for policy_name in policies[:1]:
                store.promote(f"{policy_name}@latest", "bench")
            on_first_chunk(refs)
    for policy in store.policies():
        if "bench" not in store.aliases(policy):
            store.promote(f"{policy}@latest", "bench")
    return refs, elapsed


# -- serving ----------------------------------------------------------------------------------------------------


def image_url() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), (200, 30, 30)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def start_catalogue_server(base_dir: Path, store_dir: Path, args) -> tuple[subprocess.Popen, str]:
    """`mrjudge serve --adapter-store` over the tiny base, on a free port: (its process, its base URL)."""
    port = free_port()
    command = [
        sys.executable, "-m", "mrjudge.cli", "serve", "--model", str(base_dir), "--device", "cpu",
        "--adapter-store", str(store_dir), "--max-adapters", str(args.capacity), "--reserve-adapter-slots",
        "--orders", "1", "--max-new-tokens", str(args.max_new_tokens), "--port", str(port), "--max-wait-ms", "5",
        "--log-level", "warning",
    ]  # fmt: skip
    return start_server(command, port=port, timeout_s=180), f"http://127.0.0.1:{port}"


async def client(url: str, pick, stop_at: float, out: list[tuple[float, dict]], image: str) -> None:
    """Ask one request at a time until `stop_at`; records (latency_ms, the response's `timing`)."""
    async with httpx.AsyncClient(timeout=120) as http:
        while time.monotonic() < stop_at:
            body = {
                "model": pick(),
                "items": [
                    {"id": "q", "question": "What colour is it?", "candidates": ["Red.", "Blue."], "image": [image]}
                ],
            }
            start = time.perf_counter()
            response = await http.post(f"{url}/v1/judge", json=body)
            latency = 1000 * (time.perf_counter() - start)
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code}: {response.text[:300]}")
            out.append((latency, response.json()["timing"]))


async def phase(url: str, hot: list[str], other_pick, args, image: str) -> tuple[list, list]:
    stop_at = time.monotonic() + args.duration
    resident: list[tuple[float, dict]] = []
    other: list[tuple[float, dict]] = []
    rng = random.Random(1)
    await asyncio.gather(
        *(client(url, lambda: rng.choice(hot), stop_at, resident, image) for _ in range(args.clients)),
        *(client(url, other_pick, stop_at, other, image) for _ in range(args.clients)),
    )
    return resident, other


def serve_phase(base_dir: Path, store_dir: Path, refs: list[str], args) -> dict:
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(refs))  # Zipf rank -> revision
    weights = 1.0 / np.arange(1, len(refs) + 1) ** args.zipf
    cdf = np.cumsum(weights) / weights.sum()
    hot = [refs[i] for i in order[: args.hot]]
    draw_rng = np.random.default_rng(args.seed + 1)

    def zipf_pick() -> str:
        return refs[order[min(int(np.searchsorted(cdf, draw_rng.random())), len(refs) - 1)]]

    hot_rng = random.Random(2)
    image = image_url()
    server, url = start_catalogue_server(base_dir, store_dir, args)
    try:
        for ref in hot:  # preload the hot set, and warm the model
            httpx.post(
                f"{url}/v1/judge",
                json={
                    "model": ref,
                    "items": [{"id": "q", "question": "q", "candidates": ["a", "b"], "image": [image]}],
                },
                timeout=120,
            ).raise_for_status()
        without_resident, _ = asyncio.run(phase(url, hot, lambda: hot_rng.choice(hot), args, image))
        with_resident, zipf = asyncio.run(phase(url, hot, zipf_pick, args, image))
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        stop_server(server, timeout_s=30)
    cold = [timing["adapter_load_ms"] for _, timing in zipf if timing["adapter_load_ms"] > 0]
    loads = {}
    for line in metrics.splitlines():
        if line.startswith(("mrjudge_adapter_load_seconds_sum", "mrjudge_adapter_load_seconds_count")):
            name, value = line.rsplit(" ", 1)
            loads[name] = float(value)
    count = loads.get("mrjudge_adapter_load_seconds_count", 0)
    without = [lat for lat, _ in without_resident]
    with_cold = [lat for lat, _ in with_resident]
    without_p99, with_p99 = percentile(without, 0.99), percentile(with_cold, 0.99)
    inside, inside_cold = server_p99(without_resident), server_p99(with_resident)
    return {
        "zipf_requests": len(zipf),
        "hit_rate": 1 - len(cold) / max(1, len(zipf)),
        "cold_load_p50_ms": percentile(cold, 0.5),
        "server_load_mean_ms": 1000 * loads.get("mrjudge_adapter_load_seconds_sum", 0) / max(1, count),
        "resident_requests": {"without_cold": len(without_resident), "with_cold": len(with_resident)},
        "resident_p99_ms": {"without_cold": without_p99, "with_cold": with_p99, "ratio": with_p99 / without_p99},
        "resident_p50_ms": {"without_cold": percentile(without, 0.5), "with_cold": percentile(with_cold, 0.5)},
        # the same requests timed inside the server (arrival at the route to the answer built): what the batches
        # cost them, without the hand-over of the answer to the client
        "resident_server_p99_ms": {"without_cold": inside, "with_cold": inside_cold, "ratio": inside_cold / inside},
        "resident_slowest_1pct": {"without_cold": slowest(without_resident), "with_cold": slowest(with_resident)},
    }


def server_p99(requests: list[tuple[float, dict]]) -> float:
    return percentile([timing["total_ms"] for _, timing in requests], 0.99)


def slowest(requests: list[tuple[float, dict]], share: float = 0.01) -> dict[str, float]:
    """Where the slowest `share` of requests spent their time (means): in all, inside the server (`total_ms`),
    waiting for a batch to start, in their batch's judging, and how many requests that batch held."""
    tail = sorted(requests, key=lambda r: r[0])[-max(1, round(share * len(requests))) :]
    means = {"latency_ms": sum(latency for latency, _ in tail) / len(tail)}
    for key in ("total_ms", "queue_ms", "judge_ms", "batch_requests"):
        means[key] = sum(timing[key] for _, timing in tail) / len(tail)
    return means


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.adapter_catalogue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--revisions", type=int, default=100_000)
    parser.add_argument("--policies", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=1000, help="revisions per add_many call (and the 'start' N)")
    parser.add_argument("--probes", type=int, default=2000, help="resolves per probe (saves: a fifth)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per serving phase")
    parser.add_argument("--clients", type=int, default=2, help="resident clients (and as many other clients)")
    parser.add_argument("--hot", type=int, default=4, help="adapters the resident clients ask for")
    parser.add_argument("--capacity", type=int, default=32, help="the server's --max-adapters")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the cold traffic")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", help="where the temporary catalogue goes (default: the system's temp folder)")
    parser.add_argument("--skip-serving", action="store_true")
    args = parser.parse_args()
    if args.revisions < args.chunk:
        parser.error(f"--revisions ({args.revisions}) must be at least --chunk ({args.chunk})")

    from adapter_revisions import AdapterStore
    from tiny_world.model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="mrjudge-catalogue-", dir=args.dir))
    try:
        base_dir = build_tiny_model(work / "base", kind="vlm", seed=0)
        shapes, config, fingerprint = template(base_dir)
        store = AdapterStore(work / "store")
        policies = [f"policy-{i:03d}" for i in range(args.policies)]
        rng = np.random.default_rng(args.seed)
        probes: dict[str, dict] = {}

        def first_chunk(refs: list[str]) -> None:
            probes["start"] = probe(store, refs, policies[:1], shapes, config, fingerprint, args.probes, rng)

        refs, register_s = register(
            store, policies, shapes, config, fingerprint, args.revisions, args.chunk, rng, first_chunk
        )
        probes["end"] = probe(store, refs, policies, shapes, config, fingerprint, args.probes, rng)
        disk = sum(f.stat().st_size for f in (work / "store").glob("*.sqlite*"))

        def pair(key: str) -> dict[str, float]:
            start, end = probes["start"][key], probes["end"][key]
            return {"start": start, "end": end, "ratio": end / start}

        result = {
            "benchmark": "adapter_catalogue",
            "revisions": len(refs),
            "policies": args.policies,
            "start_revisions": args.chunk,
            "register_s": register_s,
            "register_per_s": len(refs) / register_s,
            "index_bytes": disk,
            "resolve_p99_ms": pair("resolve_p99_ms"),
            "resolve_p50_ms": pair("resolve_p50_ms"),
            "save_p99_ms": pair("save_p99_ms"),
            "save_p50_ms": pair("save_p50_ms"),
            "index_write_p99_ms": pair("index_write_p99_ms"),
            "save_phases_ms": {"start": probes["start"]["save_phases_ms"], "end": probes["end"]["save_phases_ms"]},
            "slowest_save_ms": {"start": probes["start"]["slowest_save_ms"], "end": probes["end"]["slowest_save_ms"]},
        }
        if not args.skip_serving:
            result.update(serve_phase(base_dir, store.root, refs, args))
        goals = {
            "resolve_p99_ms<=1": result["resolve_p99_ms"]["end"] <= 1.0,
            "save_p50_end/start<=2": result["save_p50_ms"]["ratio"] <= 2.0,
            "save_p99_end/start<=2": result["save_p99_ms"]["ratio"] <= 2.0,
        }
        if not args.skip_serving:
            goals["resident_p99_with/without_cold<=1.5"] = result["resident_p99_ms"]["ratio"] <= 1.5
        result["goals"] = goals
        result["machine"] = f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}"
        emit(result)
    finally:  # `rm -rf` where there is one: Python's rmtree takes minutes over 4·10⁶ files at N = 10⁶
        if shutil.which("rm") is None or subprocess.run(["rm", "-rf", str(work)], check=False).returncode != 0:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
