"""The reward audit in a real TRL run: its figures in TRL's logs, `audit.jsonl` beside the checkpoints, and the
guard's `keep-best` (the checkpoint it names survives the Trainer's rotation) and `stop`."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest
import torch
from mrjudge.train_cmd import _audit_report
from safetensors.torch import load_file
from transformers import TrainerControl, TrainerState, TrainingArguments

from judge.reward.audit import Alarm, AuditConfig, RewardAudit
from tests.support.reward_app import fresh_state, make_reward_app
from tests.support.training import CPU_GRPO_RECIPE
from tests.training.test_policy import SMALL, Logs
from tiny_world.servers.openai_server import serve
from training.config import load_config
from training.policy import JudgePolicyGRPOConfig, build_policy_trainer
from training.reward_audit import RewardAuditCallback

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
_lock = threading.Lock()
_gold = {"calls": itertools.count(), "right_step": 1}


def one_step_is_right(prompt: str, completion: str, reference: str) -> float:
    """A verifiable task's check whose gold is 1 for one step's completions only (8 a step; `_gold`)."""
    with _lock:
        n = next(_gold["calls"])
    return float(n // 8 == _gold["right_step"])


def _weights(folder: Path) -> dict:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("right_step", [1, 0])
def test_a_policy_run_logs_the_audit_and_keep_best_keeps_the_checkpoint_it_names(
    tiny_vlm_dir, world, tmp_path, right_step, monkeypatch
):
    """Window w's answers are written by the policies of its steps, the first of them checkpoint-w: the best
    window's gold is credited to it. When the first window is the best, the kept checkpoint is the start policy."""
    monkeypatch.setitem(_gold, "calls", itertools.count())
    monkeypatch.setitem(_gold, "right_step", right_step)
    out = tmp_path / "policy"
    with serve(make_reward_app(fresh_state())) as url:
        config = load_config(
            JudgePolicyGRPOConfig,
            CONFIGS / "policy_grpo_qwen2_5_vl_7b.yaml",
            [f"model_name_or_path={tiny_vlm_dir}", f"train_file={world}", f"eval_file={world}", f"output_dir={out}",
             f"reward.url={url}",
             "max_steps=4", "save_strategy=no", "save_total_limit=1", "gradient_accumulation_steps=1",
             "eval_strategy=no", "freeze_vision=false",
             "reward.audit.auditor=answer_key:tests.training.test_reward_audit:one_step_is_right",
             "reward.audit.audit_rate=1.0", "reward.audit.window=1", "reward.audit.guard=keep-best",
             "reward.audit.min_samples=1", *SMALL, *CPU_GRPO_RECIPE],
        )  # fmt: skip
        logs = Logs()
        trainer = build_policy_trainer(config, callbacks=[logs])
        trainer.train()
    assert logs.values("judge/audit/groups") and logs.values("judge/audit/audited")[-1] >= 2
    assert (out / "audit.jsonl").is_file() and (out / "audit_windows.jsonl").is_file()
    best = json.loads((out / "audit_best.json").read_text())
    named = out / f"checkpoint-{right_step}"
    assert best["window"] == right_step and best["gold_mean"] == 1.0 and best["checkpoint"] == str(named)
    assert trainer.state.best_model_checkpoint == best["checkpoint"]
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    assert kept == [named.name]  # save_total_limit 1: the Trainer keeps the best one alone at the end
    start, named_weights = _weights(Path(tiny_vlm_dir)), _weights(named)
    moved = [k for k in named_weights if not torch.equal(named_weights[k], start[k])]
    assert bool(moved) == (right_step > 0)  # checkpoint-0 is the start policy, weight for weight
    summary = json.loads((out / "audit_summary.json").read_text())
    assert summary["kept"] == best and len(summary["windows"]) == 4 and summary["alarm"]["fired"] is False
    _audit_report(out)  # what `mrjudge train policy` does after such a run: the curve, and one line
    assert (out / "overoptimisation.png").stat().st_size > 0


def test_stop_ends_training_at_the_step_after_the_alarm(tmp_path):
    audit = RewardAudit(AuditConfig(auditor="answer_key", guard="stop"))
    callback, state, control = RewardAuditCallback(audit, tmp_path), TrainerState(), TrainerControl()
    state.global_step = 3
    assert not callback.on_step_end(None, state, control).should_training_stop
    audit.alarm = Alarm(window=0, step=3, reason="the audited gold fell")
    state.global_step = 4
    assert callback.on_step_end(None, state, control).should_training_stop and callback.stopped_at == 4


def test_keep_best_saves_no_start_checkpoint_from_sharded_weights(tmp_path, caplog):
    """Under FSDP (or ZeRO-3) a callback cannot gather the weights: no checkpoint-0, and the log says why."""
    audit = RewardAudit(AuditConfig(auditor="answer_key", guard="keep-best"))
    callback, state = RewardAuditCallback(audit, tmp_path), TrainerState()
    args = TrainingArguments(output_dir=str(tmp_path), fsdp="full_shard", report_to=[])
    with caplog.at_level("WARNING"):
        callback.on_train_begin(args, state, TrainerControl(), model=None)
    assert not (tmp_path / "checkpoint-0").exists() and "sharded weights" in caplog.text
