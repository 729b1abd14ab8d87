"""The report charts: one matplotlib setup, PNGs written where asked, the figure closed even on error."""

from __future__ import annotations

import pytest

from eval.plots import bar_chart, reward_curve, saved_figure, training_curves

PNG = b"\x89PNG"


def test_every_chart_writes_a_png(tmp_path):
    logs = [{"step": s, "loss": 2.0 / s, "reward": s / 10} for s in range(1, 6)]
    paths = [
        bar_chart(tmp_path / "a" / "bars.png", {"run": {"x": 50.0, "y": None}}, title="t"),
        training_curves(tmp_path / "curves.png", sft=logs, grpo=logs),
        training_curves(tmp_path / "loss.png", sft=logs),
        reward_curve(tmp_path / "reward.png", logs, before=0.2, after=0.4, window=3),
        reward_curve(tmp_path / "empty.png", [], before=0.2, after=0.4),
    ]
    for path in paths:
        assert path.read_bytes()[:4] == PNG, path


def test_a_failed_drawing_saves_nothing_and_closes_the_figure(tmp_path):
    import matplotlib.pyplot as plt

    before = len(plt.get_fignums())
    with pytest.raises(RuntimeError), saved_figure(tmp_path / "x.png", figsize=(3, 3)):
        raise RuntimeError("boom")
    assert not (tmp_path / "x.png").exists() and len(plt.get_fignums()) == before
    with saved_figure(tmp_path / "two.png", figsize=(6, 3), ncols=2) as (_, axes):
        assert len(axes) == 2
