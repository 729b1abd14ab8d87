"""Each part, and each training run, in a process of its own: `python -m benchmarks.gpu_checks` again.

A CUDA error poisons the process it happens in, and accelerate keeps one device state per process: a fresh
interpreter per part (and per training run) keeps one failure or one device from reaching the next.
"""

from __future__ import annotations

import os
import sys

from benchmarks.kit import ROOT


def child_command(*args: str) -> list[str]:
    """The command line of a child process: this package as a module, with `args` (`--part`, `--train`, ...)."""
    return [sys.executable, "-m", "benchmarks.gpu_checks", *args]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
