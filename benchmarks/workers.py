"""Run one benchmark configuration in a fresh interpreter and read back its JSON line.

Memory benchmarks measure each configuration in its own process, so one configuration's peak (or its
crash, or its kill by the OOM killer) cannot leak into the next; the worker prints one JSON line last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_worker(
    script: str | Path, spec: dict[str, Any], timeout: float, *, mmap_threshold: int | None = None
) -> dict[str, Any]:
    """`python SCRIPT --worker SPEC` from the project root; its last JSON line, or why there is none.

    `mmap_threshold` sets glibc's `MALLOC_MMAP_THRESHOLD_`: big blocks come from mmap and go back on free,
    so the process's RSS follows its live memory rather than the freed heap.
    """
    command = [sys.executable, str(Path(script).resolve()), "--worker", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
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
