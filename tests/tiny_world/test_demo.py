"""`mrjudge demo --quick` end to end through the CLI: every stage, the summary files, resume, re-runs.

The quick preset runs every stage of the full demo (world → … → policy GRPO against the reward server on
loopback) on tiny budgets; one run is shared by the tests of this module (~25 s on 2 cores).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest
from mrjudge.cli import main

from tiny_world.demo.config import QUICK, DemoConfig, load_demo_config
from tiny_world.demo.runner import stage_hash
from tiny_world.demo.stages import STAGES

STAGE_NAMES = [stage.name for stage in STAGES]
ROOT = Path(__file__).resolve().parents[2]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _statuses(out: Path) -> dict[str, str]:
    return {name: record["status"] for name, record in _summary(out)["stages"].items()}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One quick demo, run through the CLI; yields its folder and wall time."""
    out = tmp_path_factory.mktemp("demo") / "run"
    start = time.perf_counter()
    assert main(["demo", "--out", str(out), "--quick"]) == 0
    return out, time.perf_counter() - start


def test_stages_are_in_pipeline_order():
    assert STAGE_NAMES == [
        "world",
        "negatives",
        "distill",
        "heldout",
        "untrained",
        "warmup",
        "sft",
        "pool",
        "grpo",
        "evaluate",
        "best_of_n",
        "policy",
    ]


def test_quick_demo_writes_the_summary(demo):
    out, wall_s = demo
    summary = _summary(out)
    for key in ("judge_heldout_accuracy", "total_wall_s", "headline", "stages", "config", "goal_met"):
        assert key in summary, key
    assert summary["config"]["quick"] is True
    assert set(summary["stages"]) == set(STAGE_NAMES)
    assert all(record["status"] == "ran" for record in summary["stages"].values())
    assert summary["total_wall_s"] == pytest.approx(sum(r["wall_s"] for r in summary["stages"].values()), abs=0.1)
    headline = summary["headline"]
    assert set(headline["heldout_accuracy"]) == {"untrained", "sft", "grpo"}
    assert headline["heldout_accuracy"]["grpo"] == summary["judge_heldout_accuracy"]
    # The breakdown that shows whether the judge looks at the picture: image flaws against text flaws.
    assert set(headline["heldout_per_evidence"]) == {"untrained", "sft", "grpo"}
    assert set(headline["heldout_per_evidence"]["grpo"]) <= {"image", "text"}
    assert sum(headline["heldout_flaw_counts"].values()) == QUICK["heldout_n"]
    assert set(headline["heldout_per_flaw"]) == set(headline["heldout_flaw_counts"])
    assert set(headline["best_of_n"]) == {"n", "first", "random", "judge", "oracle"}
    policy = headline["policy_exact"]
    assert 0 <= policy["exact_before"] <= 1 and 0 <= policy["exact_after"] <= 1 and policy["oracle_gain"] is not None
    assert headline["judge_grpo_gain"] == pytest.approx(
        headline["heldout_accuracy"]["grpo"] - headline["heldout_accuracy"]["sft"], abs=1e-4
    )
    assert summary["config"]["reasoner_style"] == "checks" and summary["config"]["shaded"] is True
    assert summary["stages"]["warmup"]["figures"]["steps"] == QUICK["vision_warmup_steps"]
    assert summary["stages"]["warmup"]["figures"]["frozen"] is True
    assert wall_s < 90, f"the quick demo took {wall_s:.0f} s; it should stay well under a minute"


def test_every_stage_writes_stage_json(demo):
    out, _ = demo
    for name in STAGE_NAMES:
        record = json.loads((out / name / "stage.json").read_text())
        assert record["stage"] == name and record["wall_s"] >= 0 and record["hash"]
        assert isinstance(record["figures"], dict) and record["figures"]


def test_stage_outputs_are_usable(demo):
    """The held-out set is VL-RewardBench format, the best-of-N set MM-Vet format; the server was used."""
    from eval.mmvet import load_mmvet
    from eval.vl_rewardbench import load_vl_rewardbench

    out, _ = demo
    items = load_vl_rewardbench(out / "heldout" / "vlrb_heldout.jsonl")
    assert len(items) == QUICK["heldout_n"] and {i.preferred for i in items} <= {0, 1}
    assert len(load_mmvet(out / "best_of_n" / "mm-vet" / "mm-vet.json")) == QUICK["bon_questions"]
    for stage, n in (("untrained", QUICK["untrained_heldout_n"]), ("sft", len(items)), ("evaluate", len(items))):
        metrics = json.loads((out / stage / "vlrb" / "metrics.json").read_text())
        assert metrics["n"] == n, stage
    policy = json.loads((out / "policy" / "stage.json").read_text())["figures"]
    assert policy["served_requests"] > 0
    assert (out / "grpo" / "model" / "model.safetensors").is_file()
    # Judge GRPO trained on its own pool (fresh records; tests/tiny_world/test_judge_pool.py: disjoint from SFT's).
    pool = json.loads((out / "pool" / "stage.json").read_text())["figures"]
    assert pool["file"] == "pool/rl.jsonl" and pool["items"] == 2 * pool["kept"] > 0
    assert len((out / "pool" / "rl.jsonl").read_text().splitlines()) == pool["items"]
    grpo = json.loads((out / "grpo" / "stage.json").read_text())["figures"]
    assert grpo["frac_reward_zero_std_first"] is not None and grpo["entropy_first"] is not None


def test_report_embeds_plots_that_exist(demo):
    out, _ = demo
    report = (out / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert len(images) >= 5, images
    for image in images:
        assert (out / image).is_file(), image
    expected_plots = ("grpo/curves.png", "evaluate/heldout_by_stage.png", "evaluate/heldout_by_flaw.png")
    for expected in (*expected_plots, "policy/reward_curve.png", "policy/exact_answers.png"):
        assert expected in images
    assert any(i.startswith("best_of_n/") for i in images)
    for link in re.findall(r"\]\(([^)]+\.md)\)", report):
        assert (out / link).is_file(), link


def test_rerun_resumes_every_stage(demo, capsys):
    out, _ = demo
    before = {name: (out / name / "stage.json").stat().st_mtime_ns for name in STAGE_NAMES}
    capsys.readouterr()
    start = time.perf_counter()
    assert main(["demo", "--out", str(out), "--quick"]) == 0
    wall_s = time.perf_counter() - start
    printed = capsys.readouterr().out
    assert set(_statuses(out).values()) == {"done earlier"}
    assert printed.count("done earlier") >= len(STAGE_NAMES)
    assert "mr-judge demo: summary" in printed
    assert {name: (out / name / "stage.json").stat().st_mtime_ns for name in STAGE_NAMES} == before
    assert wall_s < 10, f"a resumed demo should do no stage work, took {wall_s:.1f} s"


def test_changed_budget_reruns_only_the_stages_it_affects(demo, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(demo[0], out)  # a copy, so the other tests see the demo as it was
    args = ["demo", "--out", str(out), "--quick", "--bon-n", "2", "policy_samples=1"]  # a flag, and key=value
    assert main(args) == 0
    assert {n for n, s in _statuses(out).items() if s == "ran"} == {"best_of_n", "policy"}
    assert _summary(out)["headline"]["best_of_n"]["n"] == 2

    # A stage killed mid-way has no stage.json: it is wiped and run again, and stale files do not leak in.
    (out / "best_of_n" / "stage.json").unlink()
    (out / "best_of_n" / "stale.txt").write_text("from a killed run")
    assert main(args) == 0
    assert {n for n, s in _statuses(out).items() if s == "ran"} == {"best_of_n"}
    assert not (out / "best_of_n" / "stale.txt").exists()


@pytest.mark.slow
def test_the_paths_the_quick_preset_skips_read_only_hashed_fields(tmp_path):
    """Every stage reads the config through a window that refuses a field its hash does not cover
    (`tiny_world.demo.stages.hashed`). The quick demo takes most paths; these are the rest: the full demo's
    judge budget (the trace layout's, which reads `reasoner_style`; `diff`'s is the shortest) and each
    skipped warm-up, pool, judge GRPO and policy GRPO."""
    out = tmp_path / "run"
    layout = ["judge_max_new_tokens=null", "reasoner_style=diff"]
    skips = ["vision_warmup_steps=0", "pool_n=0", "grpo_max_steps=0", "policy_max_steps=0", "policy_oracle_arm=false"]
    assert main(["demo", "--out", str(out), "--quick", *layout, *skips]) == 0
    assert set(_statuses(out).values()) == {"ran"}
    figures = {name: record["figures"] for name, record in _summary(out)["stages"].items()}
    assert figures["warmup"]["steps"] == 0 and figures["pool"]["skipped"] and figures["grpo"]["skipped"]
    assert figures["policy"]["steps"] == 0 and figures["policy"]["oracle_gain"] is None
    assert _summary(out)["headline"]["judge_grpo_gain"] == 0  # no GRPO: the SFT judge is evaluated


def test_a_stage_hash_covers_everything_upstream():
    """Changing the SFT budget invalidates SFT and every stage that reads its output, nothing before it."""

    def hashes(config: DemoConfig) -> dict[str, str]:
        out: dict[str, str] = {}
        for stage in STAGES:
            out[stage.name] = stage_hash(stage, config, out)
        return out

    base = load_demo_config(quick=True)
    old, new = hashes(base), hashes(replace(base, sft_max_steps=base.sft_max_steps + 1))
    changed = [name for name in STAGE_NAMES if old[name] != new[name]]
    assert changed == ["sft", "pool", "grpo", "evaluate", "best_of_n", "policy"]
    warm = hashes(replace(base, vision_warmup_steps=base.vision_warmup_steps + 1))
    assert [name for name in STAGE_NAMES if old[name] != warm[name]] == STAGE_NAMES[STAGE_NAMES.index("warmup") :]
    assert hashes(replace(base, threads=1, wall_budget_s=1.0)) == old  # run settings change no output


def test_config_precedence_and_errors(tmp_path):
    from judge.config import ConfigError

    assert load_demo_config(ROOT / "configs" / "demo.yaml") == DemoConfig()
    assert ROOT.joinpath("configs", "demo.yaml").read_text().startswith("#")
    quick = load_demo_config(overrides={"sft_max_steps": 7}, quick=True)
    assert quick.sft_max_steps == 7 and quick.world_n == QUICK["world_n"] and quick.quick
    path = tmp_path / "demo.yaml"
    path.write_text("quick: true\nbon_n: 3\n")
    from_yaml = load_demo_config(path)
    assert from_yaml.bon_n == 3 and from_yaml.sft_max_steps == QUICK["sft_max_steps"]
    with pytest.raises(ConfigError, match="unknown DemoConfig field"):
        load_demo_config(overrides={"sft_step": 3})
    with pytest.raises(ConfigError, match="multiple of"):
        load_demo_config(overrides={"per_device_train_batch_size": 6})
    with pytest.raises(ConfigError, match="kinds"):
        load_demo_config(overrides={"kinds": ["colour"]})


def test_bad_override_is_a_usage_error(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--quick", "sft_max_steps"]) == 2
    assert "key=value" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path), "--quick", "--sft-max-steps", "0"]) == 2  # refused before any stage
    assert "sft_max_steps (0) must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "world").exists()
