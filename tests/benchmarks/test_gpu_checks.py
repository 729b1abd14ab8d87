"""The GPU checks' own code, on the CPU: the whole run on tiny shapes, and the pieces it decides with.

`python -m benchmarks.gpu_checks --device cpu` runs the same parts as the H200 run (docs/gpu.md) on shapes that
take seconds, so the script cannot rot between the rare sessions that are lent a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_checks.kinds import same_kind, verdict_problems
from benchmarks.gpu_checks.plans import PARTS, PLANS, SETTINGS
from benchmarks.workers import run_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_cpu_mode_runs_every_part_and_writes_its_files(tmp_path):
    # ~55 s here with other jobs on the same 2 cores; the budget is the script's own guard, generous so a
    # loaded machine still finishes every part (it took 5 minutes under a load of 17).
    args = ("--device", "cpu", "--out", str(tmp_path), "--budget-s", "420")
    line = run_benchmark("gpu_checks", *args, timeout=460, stderr_tail=3000)
    assert line["benchmark"] == "gpu_checks" and line["device"] == "cpu"
    assert set(line["parts"]) == set(PARTS)
    failed = {name: part.get("error") for name, part in line["parts"].items() if not part["ok"]}
    assert not failed, (failed, (tmp_path / "log.txt").read_text()[-3000:])
    for name in ("gpu_checks.json", "log.txt", *(f"{part}.json" for part in PARTS)):
        assert (tmp_path / name).is_file(), name

    # 1. CUDA paths (here on the CPU): SFT, GRPO, `mrjudge judge` and the throughput at the forced length.
    assert line["cuda_paths"] == {"sft": True, "grpo": True, "judge_cli": True, "throughput": True}
    paths = json.loads((tmp_path / "cuda_paths.json").read_text())
    assert paths["sft"]["global_step"] == 1 and paths["sft"]["finite"] and paths["sft"]["model_device"] == "cpu"
    assert paths["grpo"]["rewards"] and "model.safetensors" in paths["grpo"]["files"]
    assert paths["judge_cli"]["verdicts"] == paths["judge_cli"]["items"] == 2
    assert line["judge_tokens_equal"] is True
    throughput = paths["throughput"]
    assert throughput["batched_tokens"] == throughput["single_tokens"] == throughput["expected_tokens"] == 4 * 2 * 8

    # 2. Hand-off: adapter_handoff.py's record, with the goal beside it (a tiny model on a CPU does not meet it).
    handoff = json.loads((tmp_path / "handoff.json").read_text())
    assert handoff["goal_time_ratio"] == 10 and handoff["measurement"]["model_shape"] == "small"
    assert line["time_ratio_measured"] == handoff["measurement"]["time_ratio_measured"] > 0
    assert line["handoff_goal_met"] == (line["time_ratio_measured"] >= 10)

    # 3. Long prompts: every method measured, replay fits at least as long a prompt, gradients agree.
    long = json.loads((tmp_path / "long_prompts.json").read_text())
    assert line["chunked_replay"] == "present"
    assert line["max_prompt_plain_g8"] > 0 and line["max_prompt_replay_g8"] > 0  # the ratio means something on a GPU
    assert line["replay_grad_cosine"] > 0.999999 and long["grad"]["replay_rel_l2"] < 1e-4
    probes = long["methods"]["replay"]["probes"]
    assert probes and all({"prompt", "peak_mib", "step_s"} <= set(p) for p in probes if p["ok"])


def test_same_kind_compares_keys_and_types_not_values():
    verdict = {"id": "a", "choice": 1, "probs": [0.4, 0.6], "votes": [1, 1], "raw": ["x"]}
    assert same_kind(verdict, {**verdict, "choice": 0, "raw": ["other text"]}) == []
    assert same_kind(verdict, {**verdict, "choice": None, "probs": None}) == []  # unparsed, no log-probs
    assert same_kind(verdict, {**verdict, "choice": "B"}) == [".choice: number vs str"]
    missing = same_kind(verdict, {k: v for k, v in verdict.items() if k != "votes"})
    assert missing and "votes" in missing[0]
    assert same_kind({"files": ["model.safetensors"]}, {"files": [1]}) == [".files[0]: str vs number"]


def test_verdict_problems_names_missing_keys_and_bad_probabilities():
    good = {"id": 1, "choice": 0, "probs": [0.25, 0.75], "consistent": True, "votes": [0, 0], "reasoning": "",
            "raw": ["", ""]}  # fmt: skip
    assert verdict_problems([good, {**good, "probs": None}]) == []
    assert verdict_problems([{**good, "probs": [0.5, 0.7]}]) == ["1: probs sum to 1.2"]
    assert "missing ['raw']" in verdict_problems([{k: v for k, v in good.items() if k != "raw"}])[0]


def test_each_device_plans_every_setting_within_the_budget():
    assert set(PLANS["cuda"]) == set(PLANS["cpu"]) == set(SETTINGS)
    assert PLANS["cuda"]["budget_s"] < 8 * 60  # the issue asks for under 8 minutes on the GPU
    for plan in PLANS.values():
        assert sum(plan["shares"].values()) < 1 and set(plan["shares"]) < set(PARTS)  # long_prompts: the rest
        assert plan["lp_search_start"] < plan["lp_search_limit"]


def test_what_the_gpu_run_imports_needs_no_server_packages():
    # The H200 image has no fastapi, uvicorn, starlette or openai (docs/gpu.md): the CLI's parser, the
    # training recipes and every module `benchmarks.gpu_checks` imports must load without them.
    code = """
import sys
for name in ("fastapi", "uvicorn", "starlette", "openai"):
    sys.modules[name] = None  # import fails as if it were not installed
from mrjudge.cli import build_parser
build_parser()
import benchmarks.adapter_handoff, benchmarks.gpu_checks.__main__, benchmarks.judge_throughput
import benchmarks.prefix_replay.__main__
import data_synthesis.pipeline, judge.backends.hf, training.grpo, training.replay, training.sft
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
