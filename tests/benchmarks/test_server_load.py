"""benchmarks.server_load: the fault run's server summarises its refusals in the log instead of writing a line
per request, and the command line answers as it did."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks.server_load.bodies import BAD_KINDS, bad_request, good_request
from benchmarks.server_load.faults import fault_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_fault_run_gets_a_4xx_for_every_bad_request_and_its_server_logs_a_summary_not_a_line_each():
    """The fault run's server logs at `mrjudge serve`'s default level (info); 300 requests (30 bad, 100 unscored
    `/get_reward` samples) leave a few summary lines in its log, not one per request."""
    args = argparse.Namespace(fault_requests=300, clients=8)
    faults = fault_run(args)
    assert faults["bad_4xx"] == faults["bad_total"] == 30 and faults["good_200"] == faults["good_total"] == 270
    assert faults["5xx"] == 0 and faults["alive"]
    # The timed run's lines: one summary per reason at shutdown (the first of each was logged in the warm-up),
    # and uvicorn's own shutdown lines.
    assert faults["log_lines"] <= 12


def test_every_bad_kind_has_a_request_and_the_good_ones_take_turns():
    assert {good_request(i, "data:,")[0] for i in range(3)} == {"/v1/reward", "/v1/judge", "/get_reward"}
    for kind in BAD_KINDS:
        path, body, _ = bad_request(kind, "data:,", "data:,")
        assert path.startswith("/") and body


def test_the_module_runs_and_rejects_zero_rounds():
    command = [sys.executable, "-m", "benchmarks.server_load"]
    helped = subprocess.run([*command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--skip-hostile" in helped.stdout
    refused = subprocess.run([*command, "--efficiency-rounds", "0"], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "--efficiency-rounds (0) must be >= 1" in refused.stderr
