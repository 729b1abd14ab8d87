"""Policy GRPO with the judge as reward: prompt data, config checks and real GRPO steps (its recipes build in
test_recipes.py).

The steps run a tiny policy on the synthetic world with the judge in process (an untrained tiny judge,
so every completion of a group of 4 gets exactly 1/4: it never writes an answer) and over HTTP (the
stand-in reward server of `tests/judge/reward/test_trl.py`, a rule judge, failing its first call).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from mrjudge.cli import main
from transformers import TrainerCallback

from judge.reward import (
    AsyncHttpJudgeReward,
    HttpRewardSpec,
    InProcessJudgeReward,
    RetryPolicy,
)
from judge.types import DataError
from tests.support.reward_app import fresh_state, make_reward_app
from tests.support.training import CPU_GRPO_RECIPE
from tiny_world.servers.openai_server import serve
from training.config import load_config
from training.policy import JudgePolicyGRPOConfig, build_policy_trainer, load_prompt_dataset

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMALL = ["per_device_train_batch_size=8", "num_generations=4", "max_completion_length=8", "learning_rate=0.001"]


class Logs(TrainerCallback):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.rows.append(dict(logs or {}))

    def values(self, key: str) -> list[float]:
        return [row[key] for row in self.rows if key in row]


# -- data -------------------------------------------------------------------------------------------------


def test_world_records_become_prompts_with_images_and_references(world):
    data = load_prompt_dataset(world)
    row = data[0]
    first = json.loads(world.read_text().splitlines()[0])
    assert row["prompt"] == [{"role": "user", "content": first["question"]}]
    assert row["answer"] == first["answer"] and len(row["images"]) == 1 and row["images"][0].size == (56, 56)
    text_only = load_prompt_dataset(world, policy_sees_images=False)
    assert "images" not in text_only.column_names and len(text_only[0]["judge_images"]) == 1


def test_prompt_files_take_text_or_messages_and_explain_bad_rows(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        json.dumps({"prompt": "Name a prime.", "answer": 7}) + "\n"  # a number reference becomes text
        + json.dumps({"prompt": [{"role": "system", "content": "Terse."}, {"role": "user", "content": "Hi?"}]}) + "\n"
    )  # fmt: skip
    data = load_prompt_dataset(path)
    assert data.column_names == ["prompt", "answer"] and data["answer"] == ["7", None]
    assert data[1]["prompt"][0]["role"] == "system"
    path.write_text(json.dumps({"question": ""}) + "\n")
    with pytest.raises(DataError, match="line 1: field 'prompt'"):
        load_prompt_dataset(path)
    path.write_text(json.dumps({"prompt": "Q?", "image": "nowhere.png"}) + "\n")
    with pytest.raises(DataError, match="field 'image'.*not found"):
        load_prompt_dataset(path)


# -- config -----------------------------------------------------------------------------------------------


def _config(*overrides: str) -> JudgePolicyGRPOConfig:
    return load_config(
        JudgePolicyGRPOConfig,
        None,
        ["model_name_or_path=m", "train_file=t", "output_dir=o", *CPU_GRPO_RECIPE, *overrides],
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ([], r"set reward=\{transport: http, url: http://…\}"),  # no judge at all
        (["reward={url: http://j, model: j}"], "reward.transport must be one of"),  # two judges
        (["reward.model=j", "reward.mode=best"], "mode must be one of"),
        (["reward.model=j", "reward.mode=pairwise", "reward.reference_column=null"], "set reference_column"),
        (["reward={transport: http, url: http://j, judge: {orders: 2}}"], r"key\(s\) \['judge'\]"),  # not a server's
        (["reward=http://j"], r"set reward=\{transport: http.*got 'http://j'"),  # a url, not a mapping
    ],
)
def test_config_refuses_what_cannot_work(overrides, match):
    with pytest.raises(ValueError, match=match):
        _config(*overrides)


@pytest.fixture
def two_processes(monkeypatch):
    """Pretend to be one of 2 training processes: groups can then straddle them."""
    monkeypatch.setattr(JudgePolicyGRPOConfig, "world_size", property(lambda self: 2))


def test_groups_split_across_processes_are_refused_unless_pairwise(two_processes):
    split = ["reward.model=j", "per_device_train_batch_size=6", "num_generations=4"]  # 12 in all, 6 per process
    with pytest.raises(ValueError, match=r"\(6 × 1 = 6\) must be a multiple of num_generations \(4\)"):
        _config(*split)
    assert _config(*split, "reward.mode=pairwise").reward_spec.mode == "pairwise"  # each completion on its own


def test_config_builds_the_reward_function(monkeypatch):
    config = _config("reward.model=j", "reward.mode=pairwise", "reward.judge={orders: 4, max_new_tokens: 64}")
    reward = config.reward_function()
    assert type(reward) is InProcessJudgeReward and reward.mode == "pairwise" and reward.reference_column == "answer"
    assert reward.judge_config.orders == 4 and reward.judge_config.max_new_tokens == 64
    assert reward.backend == "hf" and reward.backend_kwargs == {"device": "cpu"}
    monkeypatch.setenv("MRJUDGE_SERVER_API_KEY", "k")
    remote = _config("reward.url=http://judge:8000", "reward.retry.max_retries=5").reward_function()
    assert isinstance(remote, AsyncHttpJudgeReward) and remote.api_key == "k" and remote.retry.max_retries == 5
    assert remote.endpoint == "http://judge:8000/v1/reward"


def test_dotted_overrides_go_into_the_recipes_reward():
    config = load_config(
        JudgePolicyGRPOConfig, CONFIGS / "policy_grpo_tiny.yaml", ["reward.judge.orders=1", *CPU_GRPO_RECIPE]
    )
    assert config.reward_spec.judge == {"orders": 1, "max_new_tokens": 96}  # the YAML's other key kept
    assert config.reward == config.reward_spec.to_dict()  # every key's final value, as the run folder saves it


def test_the_old_flat_judge_keys_still_work_with_a_warning():
    old = [
        "judge_server_url=http://judge:8000",
        "judge_max_new_tokens=1024",
        "judge_timeout_s=300",
        "judge_mode=pairwise",
    ]
    with pytest.warns(FutureWarning, match=r"judge_server_url → reward.url, .*\(ignored with transport http: judge"):
        config = _config(*old)  # an in-process budget beside a server's url was ignored before, and still is
    assert config.reward_spec == HttpRewardSpec(
        url="http://judge:8000", mode="pairwise", retry=RetryPolicy(timeout_s=300)
    )
    # The tiny recipe's in-process judge swapped for a server, as its header used to say.
    switch = ["judge_model=null", "judge_server_url=http://judge:8000", "judge_backoff_s=0.5", *CPU_GRPO_RECIPE]
    with pytest.warns(FutureWarning, match="judge_model → reward.model"):
        config = load_config(JudgePolicyGRPOConfig, CONFIGS / "policy_grpo_tiny.yaml", switch)
    assert config.reward_spec.url == "http://judge:8000" and config.reward_spec.retry.backoff_s == 0.5


def test_help_fields_lists_the_judge_fields(capsys):
    assert main(["train", "policy", "--help-fields"]) == 0
    out = capsys.readouterr().out
    assert "reward: The judge reward, nested: {transport: http, url:" in out and "Policy to train" in out
    assert (
        "in_process keys: mode, tournament, reference_column, max_options, cap_at_reference, retry, audit, model,"
        in out
    )


# -- GRPO steps -------------------------------------------------------------------------------------------


@pytest.mark.slow  # 37 s under load (7 agents on 2 cores)
def test_two_steps_with_the_judge_in_process_from_the_cli(tiny_vlm_dir, world, tmp_path, capsys):
    out = tmp_path / "policy"
    args = ["train", "policy", "--config", str(CONFIGS / "policy_grpo_tiny.yaml"), f"model_name_or_path={tiny_vlm_dir}",
            f"reward.model={tiny_vlm_dir}", "reward.judge.max_new_tokens=8", f"train_file={world}", f"output_dir={out}",
            "max_steps=2", "save_steps=2", *SMALL, *CPU_GRPO_RECIPE]  # fmt: skip
    assert main(args) == 0
    assert "trained 2 steps" in capsys.readouterr().out
    logs = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    rewards = [row["rewards/judge/mean"] for row in logs if "rewards/judge/mean" in row]
    # An untrained judge writes no answer: every completion is unscored (None, never a silent 1/4), which TRL
    # leaves out of its mean (logged as NaN, saved as null), and the reward function counts it.
    assert len(rewards) == 2 and all(r is None or math.isnan(r) for r in rewards)
    rows = [row for row in logs if "judge/unscored_frac" in row]
    assert rows and all(row["judge/unscored_frac"] == 1.0 and row["judge/failed_frac"] == 0.0 for row in rows)
    assert all(row["judge/latency_s"] > 0 for row in rows)
    assert (out / "model.safetensors").exists()
    saved = yaml.safe_load((out / "mrjudge_config.yaml").read_text())["reward"]
    assert saved["transport"] == "in_process" and saved["model"] == str(tiny_vlm_dir) and saved["judge"]["orders"] == 2


@pytest.mark.parametrize("policy", ["vlm", "lm"])
def test_two_steps_against_a_reward_server_that_fails_once(policy, tiny_vlm_dir, tiny_lm_dir, world, tmp_path):
    state = fresh_state()
    state["fail_first"] = 1  # the first request of the run is answered 503: retried, then judged
    model = tiny_vlm_dir if policy == "vlm" else tiny_lm_dir
    with serve(make_reward_app(state)) as url:
        config = load_config(
            JudgePolicyGRPOConfig,
            CONFIGS / "policy_grpo_qwen2_5_vl_7b.yaml",
            [f"model_name_or_path={model}", f"train_file={world}", f"eval_file={world}", f"output_dir={tmp_path}",
             f"reward.url={url}", "reward.retry.backoff_s=0.01", "max_steps=2", "save_strategy=no",
             "gradient_accumulation_steps=1", "eval_strategy=no", "freeze_vision=false", *SMALL, *CPU_GRPO_RECIPE],
        )  # fmt: skip
        logs = Logs()
        trainer = build_policy_trainer(config, callbacks=[logs])
        trainer.train()
    rewards = logs.values("rewards/judge/mean")
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    assert logs.values("judge/retries")[0] > 0 and logs.values("judge/failed_frac") == [0.0, 0.0]
    assert trainer.reward_funcs[0].totals["groups"] == 4  # 2 steps × 2 prompts, one request each
    # Each request carried its prompt's world image, also when the policy itself is text-only.
    assert len(state["bodies"]) == 4 and all(sizes == [(56, 56)] for sizes in state["image_sizes"])


def test_trl_row_dump_for_unscored_completions_is_dropped_other_messages_pass(caplog):
    """The judge reward counts its unscored verdicts itself; TRL's per-row dump (a raw PIL image in it) goes."""
    import logging

    from training.policy import _quiet_unscored_rows

    _quiet_unscored_rows()
    _quiet_unscored_rows()  # idempotent: one filter
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")
    assert len(trl_logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger="trl.trainer.grpo_trainer"):
        trl_logger.warning("[RANK 0] All reward functions returned None for the following kwargs:\n{}")
        trl_logger.warning("another TRL warning")
    assert [r.getMessage() for r in caplog.records] == ["another TRL warning"]
