"""The learning benchmark runs end to end on tiny budgets and prints the figures the issue asks for.

The real run takes minutes (README, "Training a judge"); this one only shows that every stage still fits
together: world → negatives → distillation → warm-up → SFT → GRPO → both-order held-out judging.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.workers import run_benchmark


@pytest.mark.slow  # the whole recipe in a subprocess, on tiny budgets
def test_learning_benchmark_prints_its_figures_and_saves_the_curves(tmp_path):
    out = tmp_path / "lc"
    budgets = "--world-n 60 --val-fraction 0.25 --heldout-n 8 --vision-warmup-steps 2 --sft-steps 4 --grpo-steps 2"
    budgets += " --batch-size 4 --num-generations 2"
    result = run_benchmark("learning_curve.py", "--out", str(out), *budgets.split(), timeout=280)
    for key in ("heldout_accuracy", "order_consistency", "sft_accuracy", "untrained_accuracy", "wall_s"):
        assert 0 <= result[key] <= (1 if key != "wall_s" else 280), key
    assert result["kinds"] == ["attribute", "count", "spatial"] and set(result["per_kind"]) <= set(result["kinds"])
    assert result["heldout_items"] == 8 and result["sft_steps"] == 4 and result["grpo_steps"] == 2
    assert Path(result["curves"]).is_file() and (out / "history.json").is_file()
