"""The audit on the reward path (`judge.reward.audit`): the seeded share, the reward untouched, a dead auditor
costing a counter, the figures in TRL's logged metrics and in `audit.jsonl`, and the guard's alarm."""

from __future__ import annotations

import json
import random

import pytest

from judge.reward import InProcessJudgeReward
from judge.reward.audit import AuditConfig, AuditedGroup, Guard, RewardAudit, WindowFigures, slope
from judge.reward.audit.auditors import normalized
from tests.judge.reward.test_trl import Metrics
from tests.support.reward_app import rule_judge


def broken_check(prompt: str, completion: str, reference: str) -> float:
    raise RuntimeError("the verifier is down")


def _groups(n: int) -> list[AuditedGroup]:
    return [
        AuditedGroup(f"Q{i}", [f"score={i % 3}", "right"], [0.75, 0.25], reference="right", images=[f"img/{i}.png"])
        for i in range(n)
    ]


def test_audited_groups_are_exactly_the_seeded_share(tmp_path):
    config = AuditConfig(auditor="answer_key", audit_rate=0.2, seed=7, window=5, path=str(tmp_path / "audit.jsonl"))
    audit = RewardAudit(config)
    for step in range(40):
        audit.submit(_groups(10)[step % 10 : step % 10 + 1] * 5, step)  # five groups a step
    audit.close()
    assert audit.summary()["worker_s"] > 0  # what the audit cost, measured by the audit itself
    expected = [k for k in range(200) if random.Random(f"7:{k}").random() < 0.2]
    assert audit.counts["groups"] == 200 and audit.counts["audited"] == len(expected) and 25 < len(expected) < 55
    rows = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(expected)  # one line per audited completion
    assert {"prompt", "images", "completion", "reward", "gold", "reasoning", "step", "auditor"} <= set(rows[0])
    assert [r["gold"] for r in rows[:2]] == [0.0, 1.0] and rows[0]["images"][0].startswith("img/")
    windows = [json.loads(line) for line in (tmp_path / "audit_windows.jsonl").read_text().splitlines()]
    assert [w["window"] for w in windows] == sorted({r["window"] for r in rows})
    first = windows[0]  # the judge paid every wrong answer above the reference and short-changed every right one
    assert first["overpay"] == 1.0 and first["underpay"] == 0.0 and first["agreement"] == 0.0
    assert first["gold_mean"] == 0.5 and first["judge_mean"] == 0.5


def test_the_reward_the_trainer_gets_is_the_same_with_the_audit_on_and_off(tmp_path):
    prompts = [f"P{i % 4}" for i in range(16)]
    completions = [f"score={(7 * i) % 5}" for i in range(16)]
    answers = ["score=3"] * 16
    plain = InProcessJudgeReward(rule_judge(), mode="pairwise", reference_column="answer")
    audit = {"auditor": "answer_key", "audit_rate": 1.0, "path": str(tmp_path / "audit.jsonl")}
    audited = InProcessJudgeReward(rule_judge(), mode="pairwise", reference_column="answer", audit=audit)
    expected = plain(prompts=prompts, completions=completions, answer=answers)
    assert audited(prompts=prompts, completions=completions, answer=answers) == expected
    audited.audit.flush()
    assert audited.audit.counts["audited"] == 4 and audited.audit.counts["completions"] == 16
    rows = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sorted(r["reward"] for r in rows) == sorted(expected)
    assert all(r["reasoning"] for r in rows)  # the judge's reasoning beside what it paid
    assert sum(r["gold"] for r in rows) == sum(c == "score=3" for c in completions)


@pytest.mark.parametrize(
    "auditor", ["answer_key:tests.judge.reward.test_audit:broken_check", "judge_url:http://127.0.0.1:9"]
)
def test_a_dead_auditor_costs_the_run_nothing_but_a_counter(auditor, caplog):
    prompts, completions, answers = ["P"] * 4, ["score=1", "score=2", "score=3", "score=4"], ["score=2"] * 4
    plain = InProcessJudgeReward(rule_judge(), reference_column="answer")
    expected = plain(prompts=prompts, completions=completions, answer=answers)
    config = {"auditor": auditor, "audit_rate": 1.0, "window": 100}
    reward = InProcessJudgeReward(rule_judge(), reference_column="answer", audit=config)
    if auditor.startswith("judge_url"):
        reward.audit.auditor.reward.retry = reward.audit.auditor.reward.retry.from_dict({"max_retries": 0})
    metrics = Metrics()
    for _ in range(3):
        assert reward(prompts=prompts, completions=completions, answer=answers, log_metric=metrics) == expected
    reward.audit.flush()
    assert reward.audit.counts["auditor_errors"] == 3 and reward.audit.counts["audited"] == 0
    assert len([r for r in caplog.records if "auditor" in r.message]) == 1  # logged once per window


def test_the_figures_appear_in_trls_logged_metrics():
    reward = InProcessJudgeReward(rule_judge(), reference_column="answer", audit={"auditor": "answer_key", "window": 1})
    metrics = Metrics()

    class State:
        global_step = 0

    for step in range(4):
        State.global_step = step
        reward(
            prompts=["P"] * 20, completions=["score=1", "score=2"] * 10, answer=["score=2"] * 20,
            log_metric=metrics, trainer_state=State,
        )  # fmt: skip
        reward.audit.flush()
    assert metrics.last("judge/audit/groups") == 4.0  # one group of 20 a step
    assert "judge/audit/alarm" in metrics.logged and "judge/audit/dropped" in metrics.logged


def test_a_full_queue_drops_work_and_counts_it():
    import threading

    gate = threading.Event()

    class Slow:
        name, gold_is = "slow", "truth"

        def __call__(self, prompt, images, completions, reference):
            gate.wait(5)
            return [1.0] * len(completions)

    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=1.0, queue_size=2), auditor=Slow())
    audit.submit(_groups(10), step=0)
    dropped = audit.counts["dropped"]
    gate.set()
    audit.close()
    assert 7 <= dropped <= 8 and audit.counts["audited"] + dropped == 10  # 1 in the auditor's hands, 2 queued


def _window(i: int, judge: float, gold: float, overpay: float | None = 0.2) -> WindowFigures:
    return WindowFigures(i, 10 * i, 10 * i + 9, 40, 0.8, overpay, 0.1, judge, gold)


def test_the_guard_fires_when_the_gold_falls_while_the_judge_rises():
    guard = Guard(AuditConfig(auditor="answer_key"))
    gold = [0.3, 0.4, 0.5, 0.55, 0.5, 0.45, 0.4, 0.35]
    judge = [0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75]
    windows = [_window(i, j, g) for i, (j, g) in enumerate(zip(judge, gold))]
    fired = [guard.check(windows[: i + 1]) for i in range(len(windows))]
    first = next(i for i, alarm in enumerate(fired) if alarm is not None)
    assert first == 6 and "gold fell" in fired[first].reason and fired[first].step == 69
    # The answer key as the reward: gold and reward one series, rising, dipping, recovering: no alarm.
    for series in ([0.3, 0.4, 0.5, 0.55, 0.57, 0.52, 0.58, 0.55], [0.20, 0.10, 0.05, 0.10, 0.15, 0.2, 0.12]):
        together = [_window(i, g, g) for i, g in enumerate(series)]
        assert all(guard.check(together[: i + 1]) is None for i in range(len(together)))


def test_the_guard_fires_when_overpay_rises_past_its_margin():
    guard = Guard(AuditConfig(auditor="answer_key", overpay_margin=0.15))
    paid = [0.3, 0.32, 0.31, 0.4, 0.5, 0.6]
    windows = [_window(i, 0.5, 0.5, p) for i, p in enumerate(paid)]
    assert guard.check(windows[:4]) is None and "overpay rose" in guard.check(windows).reason


def test_settings_are_checked_naming_the_field():
    with pytest.raises(ValueError, match="auditor must be one of"):
        AuditConfig(auditor="oracle")
    with pytest.raises(ValueError, match="judge_url needs a URL"):
        AuditConfig(auditor="judge_url:judge-node")
    with pytest.raises(ValueError, match="audit_rate"):
        AuditConfig(auditor="answer_key", audit_rate=0)
    with pytest.raises(ValueError, match="guard must be one of"):
        AuditConfig(auditor="answer_key", guard="panic")
    with pytest.raises(ValueError, match="unknown keys"):
        AuditConfig.from_value({"auditor": "answer_key", "rate": 0.1})
    assert AuditConfig(auditor="self", guard="keep_best").guard == "keep-best"
    assert normalized(" The  Cat.") == "the cat" and slope([1, 2, 3]) == 1.0


def test_a_lone_sample_of_a_larger_group_is_read_against_that_groups_even_share():
    """verl's and OpenRLHF's one-sample routes submit each sample of a group judged on the server alone."""
    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=1.0))
    lone = [AuditedGroup("Q", ["wrong"], [0.5], reference="right", group_size=4) for _ in range(3)]
    audit.submit(lone, step=0)
    audit.flush()
    assert audit.windows[0].overpay == 1.0  # 0.5 is twice the even share of 4; read against 1/1 it would be 0
