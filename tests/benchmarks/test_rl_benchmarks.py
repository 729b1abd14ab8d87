"""The two RL benchmarks end to end on a quick demo's world and judges: every arm runs and the JSON line
carries the keys the issue asks for (the figures themselves are docs/learning.md's, on real budgets)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    from tiny_world.demo.config import load_demo_config
    from tiny_world.demo.runner import run_stages

    out = tmp_path_factory.mktemp("rl") / "demo"
    run_stages(load_demo_config(quick=True), out, until="grpo")
    return out


@pytest.mark.slow
def test_judge_grpo_gain_runs_every_arm(quick_demo, tmp_path):
    result = _benchmark("judge_grpo_gain").main(
        ["--demo", str(quick_demo), "--out", str(tmp_path / "gain"), "--seeds", "0,1", "--pool-n", "30"]
        + ["--heldout-n", "12", "--grpo-max-steps", "1", "--num-generations", "2"]
        + ["--per-device-train-batch-size", "4", "--bootstrap", "50"]
    )
    for key in ("heldout_sft", "heldout_grpo", "heldout_sft_more", "grpo_gain", "grpo_gain_ci95_low"):
        assert key in result, key
    for key in ("image_flaws_grpo", "text_flaws_sft", "consistency_grpo", "frac_reward_zero_std_first", "wall_s"):
        assert key in result, key
    assert set(result["pool"]) >= {"n", "sft_accuracy", "kept", "image_share"} and result["seeds"] == [0, 1]
    assert result["grpo_gain_ci95_low"] <= result["grpo_gain"] <= result["grpo_gain_ci95_high"]
    assert result["grpo"]["loss_type"] == "grpo" and result["sft_more"]["train_s"] > 0
    assert (tmp_path / "gain" / "gain.png").is_file() and (tmp_path / "gain" / "curves.png").is_file()


@pytest.mark.slow
def test_judge_as_reward_runs_every_arm(quick_demo, tmp_path):
    module = _benchmark("judge_as_reward")
    result = module.main(
        ["--demo", str(quick_demo), "--out", str(tmp_path / "policy"), "--warmup-steps", "2", "--sft-max-steps", "2"]
        + ["--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "4", "--samples", "2"]
        + ["--agreement-questions", "2", "--bootstrap", "50", "--arms", ",".join(module.ARMS)]
    )
    arms = {"oracle", "judge", "judge_listwise", "random", "judge_capped", "oracle_noisy", "oracle_noisy_fixed"}
    assert set(module.DEFAULT_ARMS) == {"oracle", "judge", "judge_listwise", "random"}
    for key in ("exact_after", "gain", "gain_ci95_low", "gain_ci95_high"):
        assert set(result[key]) == arms, key
    for key in ("exact_before", "judge_gain_ratio", "agreement_start", "judge_overpaid_end", "wall_s"):
        assert key in result, key
    assert result["judge_underpaid_start"] is None or 0 <= result["judge_underpaid_start"] <= 1
    assert result["noise_rates"] == {
        "false_positive": result["judge_overpaid_start"] or 0.0,
        "false_negative": result["judge_underpaid_start"] or 0.0,
    }
    assert (tmp_path / "policy" / "exact.png").is_file() and (tmp_path / "policy" / "rewards.png").is_file()


@pytest.mark.slow
def test_reward_audit_runs_every_scenario(quick_demo, tmp_path, monkeypatch):
    """The three scenarios on tiny budgets (2 steps a run, windows of one step, every group audited): the keys
    the issue asks for, keep-best's kept checkpoint evaluated, and both over-optimisation curves drawn. The
    quick demo's judge leaves its verdicts unparsed (reward None), so under the blind spot's length bonus the
    served judge pays one half to every answer: its windows then have figures and keep-best names a checkpoint."""
    module = _benchmark("reward_audit")

    async def half(self, groups, call):
        return [None if g.request is None else [0.5] * len(g.responses) for g in groups]

    monkeypatch.setattr(module.LengthBonusReward, "_ajudge_groups", half)
    out = tmp_path / "audit"
    result = module.main(
        ["--demo", str(quick_demo), "--out", str(out), "--warmup-steps", "2", "--sft-max-steps", "2"]
        + ["--max-steps", "2", "--num-generations", "2", "--per-device-train-batch-size", "4", "--samples", "2"]
        + ["--agreement-questions", "2", "--bootstrap", "50", "--seeds", "0", "--window", "1"]
        + ["--audit-rate", "1.0", "--blind-audit-rate", "1.0", "--min-samples", "1", "--overpay-windows", "1"]
    )
    judge, blind, oracle = result["judge"], result["blind_spot"], result["oracle"]
    for key in ("audit_overpay_start", "audit_overpay_end", "judge_overpaid_start", "judge_overpaid_end"):
        assert key in judge, key
    assert set(judge["audit_overpay_ci95"]) == set(judge["judge_overpaid_ci95"]) == {"start", "end"}
    assert 0 <= judge["audit_cost_frac"] < 1 and set(judge["alarm"]) == {"fired", "step"}
    assert judge["audit"]["audited"] == judge["audit"]["groups"] > 0  # audit_rate 1: every group
    assert set(judge["gold_by_step"]) == set(judge["judge_reward_by_step"]) <= {"0", "1"}
    keys = ("judge_reward_by_step", "gold_by_step", "alarm", "gold_peak_step", "gold_peak_step_raw", "kept_step")
    for key in keys + ("alarm_after_raw_peak_frac",):
        assert set(blind[key]) == {"0"}, key
    assert blind["kept_step"]["0"] in (0, 1)  # keep-best named the checkpoint at a window's start
    assert blind["judge_reward_by_step"]["0"]
    audited = [json.loads(line) for line in (out / "arms" / "audit_blind_spot-seed0" / "audit.jsonl").open()]
    for row in audited:  # the audit saw the biased reward: the judge's one half plus the length bonus, rescaled
        assert row["reward"] == pytest.approx((0.5 + min(1.0, len(row["completion"].split()) / 16)) / 2)
    for key in ("gain_last", "gain_kept"):
        assert set(blind[key]["per_seed"]) == {"0"} and len(blind[key]["pooled"]["ci95"]) == 2, key
    low, high = blind["gain_kept_minus_last"]["ci95"]
    assert low <= blind["gain_kept_minus_last"]["diff"] <= high
    assert blind["bonus"]["bonus"] == 1.0 and set(blind["goals"]) == {
        "alarm_within_20pct_after_peak",
        "kept_beats_last_by_0.03",
    }
    assert oracle["alarm"] == {"fired": False, "step": None}
    assert oracle["gold_by_step"] == oracle["judge_reward_by_step"]  # the answer key is its own gold
    for name in ("judge", "blind_spot"):
        assert (out / f"overoptimisation_{name}.png").stat().st_size > 0
    assert (out / "result.json").is_file() and (out / "arms" / "audit_blind_spot-seed0" / "audit_best.json").is_file()


def test_gold_peak_is_the_smoothed_curves_peak_that_keep_best_keeps():
    """The alarm's lateness is read from the gold's peak as the guard smooths it (keep-best's window), not from
    one window's noise high: here a lone spike at step 69 after the curve peaked at step 29 (a run of this
    benchmark, seed 0)."""
    from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit

    module = _benchmark("reward_audit")
    gold = [0.0375, 0.0437, 0.0437, 0.0312, 0.0437, 0.0, 0.0563, 0.0125, 0.025, 0.025, 0.0063, 0.0187]
    windows = [{"window": i, "last_step": 10 * i + 9, "n": 160, "gold_mean": g} for i, g in enumerate(gold)]
    summary = {"windows": windows + [{"window": 12, "last_step": 129, "n": 3, "gold_mean": 1.0}]}  # too few: unread
    assert module.gold_peak_step(summary, min_samples=8) == 69
    assert module.gold_peak_step(summary, min_samples=8, trend_windows=module.TREND_WINDOWS) == 29
    assert module.gold_peak_step({"windows": []}, min_samples=8, trend_windows=3) is None
    assert module.after_peak({"fired": True, "step": 39}, 29, 120) == pytest.approx(10 / 120)
    assert module.after_peak({"fired": False, "step": None}, 29, 120) is None

    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=1.0, window=10, min_samples=8))
    for i, g in enumerate(gold):  # the audit's own best window over the same golds: keep-best's choice
        right = round(g * 160)
        completions = ["yes" if k < right else "no" for k in range(160)]
        audit.submit([AuditedGroup("Q", completions, [0.5] * 160, "yes", pairwise=True)], step=10 * i + 9)
    audit.submit([AuditedGroup("Q", ["no"], [0.5], "yes", pairwise=True)], step=10 * len(gold))  # closes the last
    audit.close()
    assert [round(w.gold_mean, 4) for w in audit.windows][: len(gold)] == pytest.approx(gold, abs=0.004)
    assert audit.best.last_step == 29


def test_judge_as_reward_serves_the_refreshed_judge(quick_demo, tmp_path):
    """`--refresh-steps`: the judge is refreshed on the start policy's wrong answers first, then served (to the
    pairwise arm and to the one capped at the reference's reward)."""
    result = _benchmark("judge_as_reward").main(
        ["--demo", str(quick_demo), "--out", str(tmp_path / "policy"), "--warmup-steps", "2", "--sft-max-steps", "2"]
        + ["--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "4", "--samples", "2"]
        + ["--agreement-questions", "2", "--bootstrap", "50", "--arms", "judge,judge_capped"]
        + ["--refresh-steps", "1", "--refresh-questions", "6"]
    )
    refresh = result["refresh"]
    assert refresh["questions"] == 6 and refresh["steps"] == 1 and refresh["pairs"] > 0
    assert refresh["policy_examples"] == 2 * refresh["pairs"] and refresh["own_examples"] > 0
    assert result["judge_model"] == refresh["model"] == str(tmp_path / "policy" / "refresh" / "model")
    assert set(result["gain"]) == set(result["judge_overpaid_end_by_arm"]) == {"judge", "judge_capped"}
    assert result["judge_overpaid_end"] == result["judge_overpaid_end_by_arm"]["judge"]


def test_judge_as_reward_picks_each_arms_step_on_dev(quick_demo, tmp_path):
    """`--select-every`: every saved step is scored on the dev questions (never the reported ones) and the
    chosen step's policy is reported beside the last step's."""
    result = _benchmark("judge_as_reward").main(
        ["--demo", str(quick_demo), "--out", str(tmp_path / "policy"), "--warmup-steps", "2", "--sft-max-steps", "2"]
        + ["--max-steps", "2", "--num-generations", "2", "--per-device-train-batch-size", "4", "--samples", "2"]
        + ["--agreement-questions", "2", "--bootstrap", "50", "--arms", "oracle,random", "--select-every", "1"]
    )
    selected = result["selected"]
    assert selected["every"] == 1 and set(selected["step"]) == {"oracle", "random"}
    for arm in ("oracle", "random"):
        by_step = selected["dev_exact_by_step"][arm]
        assert sorted(by_step) == [1, 2]  # checkpoint-1 and checkpoint-2 (the last step)
        assert selected["step"][arm] == max(sorted(by_step), key=by_step.get)
        assert selected["gain_ci95_low"][arm] <= selected["gain"][arm] <= selected["gain_ci95_high"][arm]
    assert (tmp_path / "policy" / "arms" / "oracle" / "checkpoint-1").is_dir()


def test_best_step_is_the_earliest_of_equals():
    best_step = _benchmark("judge_as_reward").best_step
    assert best_step({100: 0.2, 200: 0.3, 300: 0.3, 400: 0.1}) == 200
    assert best_step({600: 0.1}) == 600


def test_select_every_refuses_to_choose_on_the_reported_questions(tmp_path):
    with pytest.raises(SystemExit, match="--report val"):
        _benchmark("judge_as_reward").main(
            ["--demo", str(tmp_path / "missing"), "--report", "dev", "--select-every", "100", "--out", str(tmp_path)]
        )


def test_a_noise_rate_out_of_range_is_refused_before_any_training(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _benchmark("judge_as_reward").main(["--noise-false-positive", "38.5", "--out", str(tmp_path)])
    assert "--noise-false-positive (38.5) must be a probability in [0, 1]" in capsys.readouterr().err
