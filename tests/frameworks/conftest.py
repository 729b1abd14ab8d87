"""Fixtures for the tests that run verl, OpenRLHF and lmms-eval's own code with mr-judge's integrations.

The frameworks are installed with `--no-deps` into a cached folder by `scripts/frameworks_env.sh`
(`make frameworks-env`; `make test` builds it first). Their wheels install top-level `tests` and `scripts`
packages, so they never enter this interpreter: each test runs a driver script in a subprocess with
`PYTHONPATH=<folder>/site` (torch, ray, transformers come from .venv). Without the folder these tests skip
with a message saying how to build it, except where `MRJUDGE_REQUIRE_FRAMEWORKS=1` (set by `make test`, hence
CI): there a missing folder fails them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.required import found_or_skip

REPO = Path(__file__).resolve().parents[2]
VERSIONS = {"verl": "0.9.1", "openrlhf": "0.11.2", "lmms_eval": "0.7.3"}
"""What constraints/frameworks.txt pins, and what the drivers check they imported."""


def frameworks_folder() -> Path:
    """The built folder (`scripts/frameworks_env.sh --path`); raises `FileNotFoundError` saying how to build it."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "frameworks_env.sh"), "--path"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    if done.returncode != 0:
        raise FileNotFoundError(
            "the frameworks folder (verl, OpenRLHF, lmms-eval) is not built: run `make frameworks-env` "
            "(or `bash scripts/frameworks_env.sh`)"
        )
    return Path(done.stdout.strip())


@pytest.fixture(scope="session")
def frameworks_site() -> Path:
    return found_or_skip(lambda: frameworks_folder() / "site", FileNotFoundError, "MRJUDGE_REQUIRE_FRAMEWORKS")


@pytest.fixture(autouse=True)
def _needs_frameworks(frameworks_site):
    """Every test here skips (or, under MRJUDGE_REQUIRE_FRAMEWORKS=1, fails) first thing without the folder."""


def run_driver(site: Path, script: str, spec: dict, tmp_path: Path, env: dict | None = None, timeout: float = 300):
    """Run `tests/frameworks/<script>` on `spec` (written as JSON) with the frameworks on PYTHONPATH; returns its
    last stdout line as JSON, failing with the driver's output when it has none."""
    spec_file = tmp_path / f"{Path(script).stem}-spec.json"
    spec_file.write_text(json.dumps(spec))
    environment = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "frameworks" / script), str(spec_file)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, (
        f"{script} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return json.loads(lines[-1]), done.stderr
