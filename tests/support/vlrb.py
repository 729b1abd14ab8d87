"""A VL-RewardBench predictions file scored through the command line, as a user scores one (no model runs)."""

from __future__ import annotations

import json
from pathlib import Path

from mrjudge.cli import main


def eval_vlrb(data: Path, predictions: Path, out: Path, *extra: str) -> int:
    """`mrjudge eval vl-rewardbench --data DATA --predictions PREDICTIONS --out OUT --quiet EXTRA…`: its exit
    status."""
    argv = ["eval", "vl-rewardbench", "--data", str(data), "--predictions", str(predictions), "--out", str(out)]
    return main([*argv, "--quiet", *extra])


def vlrb_metrics(data: Path, predictions: Path, out: Path, *extra: str) -> dict:
    """`eval_vlrb`, which must exit 0; the metrics.json it wrote in `out`."""
    status = eval_vlrb(data, predictions, out, *extra)
    assert status == 0, f"mrjudge eval vl-rewardbench exited {status}"
    return json.loads((out / "metrics.json").read_text())
