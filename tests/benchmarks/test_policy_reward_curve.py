"""`benchmarks.policy_reward_curve` end to end on a tiny budget: every stage runs and the line carries its figures
(what they are on the real budget is docs/policy.md's)."""

from __future__ import annotations

import json

import pytest

from benchmarks.policy_reward_curve import answer_form
from benchmarks.workers import run_benchmark


def test_answer_forms_follow_the_templates_of_the_question_kind():
    assert answer_form("attribute", "The triangle at the bottom left is red.") == "complete"
    assert answer_form("attribute", " The triangle is at the bottom left. ") == "incomplete"
    assert answer_form("ocr", 'The word "cat" is written.') == "incomplete"
    assert answer_form("arithmetic", "The numbers are 3 and 4.") == "incomplete"
    assert answer_form("spatial", "in in in in") == "other"


@pytest.mark.slow
def test_every_stage_runs_and_the_line_has_its_figures(tmp_path):
    flags = ["--out", str(tmp_path), "--world-n", "60", "--heldout", "4", "--samples", "1", "--judge-sft-steps", "2"]
    flags += ["--policy-sft-steps", "2", "--grpo-steps", "2", "--batch-size", "4", "--num-generations", "2"]
    line = run_benchmark("policy_reward_curve", *flags, timeout=280)
    assert line["benchmark"] == "policy_reward_curve" and line["heldout_questions"] == 4
    assert set(line["judge_heldout_accuracy"]) == {"complete_vs_incomplete", "complete_vs_malformed"}
    for when in ("before", "after"):
        assert 0 <= line[f"reward_{when}"] <= 1 and sum(line[f"forms_{when}"].values()) == pytest.approx(1)
    assert line["batch"] == "2 prompts × 2 completions" and line["grpo_s"] > 0 and line["wall_s"] > line["grpo_s"]
    samples = json.loads((tmp_path / "heldout_samples.json").read_text())
    assert len(samples["before"]) == len(samples["after"]) == 4
    assert {s["form"] for s in samples["after"]} <= {"complete", "incomplete", "other"}
    assert set(json.loads((tmp_path / "history.json").read_text())) == {"judge_sft", "policy_sft", "grpo"}
    assert (tmp_path / "policy_reward_curve.png").is_file()
