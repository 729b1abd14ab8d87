"""VL-RewardBench as the pairwise runner runs it: a run folder refuses to resume under other judge settings."""

from __future__ import annotations

import json

import pytest

from eval import vl_rewardbench as vlrb


class _AlwaysA:
    """A backend that answers every MC prompt with option A."""

    name = "always-a"

    def generate(self, requests, params):
        from judge.backends.base import Generation

        return [Generation(text="<think>A.</think><answer>A</answer>") for _ in requests]


def test_a_run_refuses_to_resume_with_other_judge_settings(tmp_path, items):
    from eval.run import Scoring, run_pairwise_benchmark
    from eval.workers import JudgeSpec
    from jobs.resumable import SettingsChanged
    from judge.backends.spec import ModelSpec
    from judge.judging import JudgeConfig

    def judge(**config):
        spec = ModelSpec("always-a")
        spec._built = _AlwaysA()  # the backend, already built: no model to load
        return JudgeSpec(spec, JudgeConfig(**config))

    out = tmp_path / "run"
    run = dict(scoring=Scoring(), out=out, judge_name="always-a", show_progress=False)
    run_pairwise_benchmark(vlrb, items, judge=judge(orders=2), **run)
    before = (out / "predictions.jsonl").read_bytes()
    with pytest.raises(SettingsChanged, match="judge.orders: 2 → 1"):
        run_pairwise_benchmark(vlrb, items, judge=judge(orders=1), **run)
    assert (out / "predictions.jsonl").read_bytes() == before
    run_pairwise_benchmark(vlrb, items, judge=judge(orders=1), overwrite=True, **run)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(items) and all(len(row["raw"]) == 1 for row in rows)
