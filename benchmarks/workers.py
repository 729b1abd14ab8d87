"""Run one benchmark configuration in a fresh interpreter and read back its JSON line.

Memory benchmarks measure each configuration in its own process, so one configuration's peak (or its
crash, or its kill by the OOM killer) cannot leak into the next; the worker prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.kit import ROOT


def module_name(script: str | Path) -> str:
    """The dotted module a benchmark runs as: a module name as it is, a file of the repository by its path
    (`benchmarks/multi_policy.py` -> `benchmarks.multi_policy`; a package's `__main__.py` -> the package).

    >>> module_name("benchmarks.multi_policy"), module_name(ROOT / "benchmarks" / "prefix_replay" / "__main__.py")
    ('benchmarks.multi_policy', 'benchmarks.prefix_replay')
    """
    if Path(script).suffix != ".py":
        return str(script)
    parts = Path(script).resolve().relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def run_worker(
    module: str | Path, spec: dict[str, Any], timeout: float, *, mmap_threshold: int | None = None
) -> dict[str, Any]:
    """`python -m MODULE --worker SPEC` from the project root; its last JSON line, or why there is none.

    `module` is a module name or a file of the repository (`module_name`). `mmap_threshold` sets glibc's
    `MALLOC_MMAP_THRESHOLD_`: big blocks come from mmap and go back on free, so the process's RSS follows its
    live memory rather than the freed heap.
    """
    command = [sys.executable, "-m", module_name(module), "--worker", json.dumps(spec)]
    env = dict(os.environ)
    if mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"ok": False, "timeout": True}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"ok": False, "returncode": done.returncode, "stderr": done.stderr[-600:]}
    return json.loads(lines[-1])


def run_benchmark(name: str, *args: str, timeout: float, stderr_tail: int = 4000) -> dict[str, Any]:
    """`python -m benchmarks.NAME ARGS` from the project root, as a user runs it; the JSON line it prints last.

    `name` is the benchmark's module in `benchmarks` (`"learning_curve"`; `"learning_curve.py"` too). For tests
    that run a whole benchmark end to end; a failed run raises with the tail of its stderr.
    """
    command = [sys.executable, "-m", f"benchmarks.{name.removesuffix('.py')}", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}:\n{done.stderr[-stderr_tail:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def qwen2_lm_config(
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    tied: bool = False,
    *,
    max_positions: int = 4096,
) -> Any:
    """A Qwen2 causal-LM config from a benchmark's shape-table row (Qwen2.5's rope base, SDPA attention).

    The benchmarks build random-weight models of named sizes from such rows; one builder keeps them alike.
    """
    from transformers import Qwen2Config

    from tiny_world.model import qwen_text_shape

    config = Qwen2Config(
        **qwen_text_shape(hidden, layers, heads, kv_heads, intermediate, vocab, max_positions),
        rope_theta=1_000_000.0,
        tie_word_embeddings=tied,
    )
    config._attn_implementation = "sdpa"
    return config


def cluster_share_ci95(clusters: list[tuple[int, int]], resamples: int, seed: int) -> tuple[float, float] | None:
    """95 % interval of a share sum(hits) / sum(counts) over `clusters` of (hits, count), resampling clusters:
    the answers to one prompt are not independent, so the interval is wider than their count suggests."""
    clusters = [c for c in clusters if c[1]]
    if not clusters:
        return None
    rng, n = random.Random(seed), len(clusters)
    shares = []
    for _ in range(resamples):
        drawn = [clusters[rng.randrange(n)] for _ in range(n)]
        shares.append(sum(h for h, _ in drawn) / sum(c for _, c in drawn))
    shares.sort()
    return round(shares[int(0.025 * resamples)], 4), round(shares[int(0.975 * resamples) - 1], 4)


def paired_bootstrap(base: list[float], arms: list[list[float]], resamples: int, seed: int) -> tuple[float, float]:
    """95 % interval of mean(arm − base) over pairs and arms, resampling pairs (the same draw for every arm)."""
    n = len(base)
    diffs = [sum(arm[i] for arm in arms) / len(arms) - base[i] for i in range(n)]
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return round(means[int(0.025 * resamples)], 4), round(means[int(0.975 * resamples) - 1], 4)
