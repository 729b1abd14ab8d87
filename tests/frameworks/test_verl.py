"""verl 0.9.1 as released, with `judge/integrations/verl.py` as its custom reward function, through verl's own
dataset → agent loop → reward loop → reward manager path (`tests/frameworks/verl_driver.py`, in a subprocess
with the cached install on its path; what it stands in for, and why, is in its docstring).

The judge behind the server is the rule judge with option log-probs (`ScoredRuleBackend`): a response's
listwise reward is the softmax of the `score=N` it carries over its group, so every value can be checked by
hand, and the backend records which candidates and which images each judge call saw.
"""

from __future__ import annotations

import re
import shlex
import socket

import pandas as pd
import pytest
from mrjudge.serve_cmd import reward_usage

from judge.reward.wire import RetryPolicy
from tests.frameworks.conftest import REPO, VERSIONS, run_driver
from tests.support.framework_rollouts import (
    IMAGES,
    RESPONSES,
    N,
    dead_port,
    image_colour,
    listwise_rewards,
    write_images,
)
from tests.support.reward_server import running
from tiny_world.rule_judge import ScoredRuleBackend

# One subprocess that imports verl and runs six rollouts: ~15 s on 2 cores, 4 s of it two judge outages
# (not `slow`: under ~30 s).

RESPONSE_LENGTH = 32
VERL_FILE = REPO / "judge" / "integrations" / "verl.py"
KILLED = RetryPolicy(max_retries=2, backoff_s=0.5, max_backoff_s=1.0)
"""Our retries in the outage runs (reward_kwargs), small: back-offs of 0.25–0.75 s and 0.5–1 s."""
HUNG = RetryPolicy(max_retries=1, backoff_s=0.2, max_backoff_s=0.2, timeout_s=1.0)
"""The same against a server that accepts and never answers: two tries of 1 s each, 0.1–0.2 s between."""
SLACK_S = 3.0
"""Scheduling on 2 shared cores, beyond what the retry settings add up to."""


def _retry_overrides(url: str, retry: RetryPolicy) -> list[str]:
    """Our compute_score's own reward_kwargs (server_url and the RetryPolicy keys), as verl overrides."""
    kwargs = {"server_url": url, **{k: getattr(retry, k) for k in RetryPolicy.keys()}}
    return [f"+reward.custom_reward_function.reward_kwargs.{k}={v}" for k, v in kwargs.items()]


def _rows(images: dict[str, str]) -> list[dict]:
    """verl rows as docs/rewards.md says: the question and the judge's images in extra_info, no reference."""
    return [
        {
            "data_source": "colours",
            "prompt": [{"role": "user", "content": question}],
            "reward_model": {"style": "model", "ground_truth": ""},
            "extra_info": {"question": question, "images": [images[question]], "index": i},
        }
        for i, question in enumerate(IMAGES)
    ]


@pytest.fixture(scope="module")
def verl_runs(frameworks_site, tiny_lm_dir, tmp_path_factory):
    """One driver process, four runs: as `mrjudge serve` prints (listwise), without the group size, with a
    missing image, and with the pre-0.7 spelling of the keys. Yields (driver output, backend)."""
    root = tmp_path_factory.mktemp("verl")
    allowed = write_images(root / "images")
    pd.DataFrame(_rows(IMAGES)).to_parquet(root / "train.parquet")
    pd.DataFrame(_rows({q: "nowhere/red.png" for q in IMAGES})).to_parquet(root / "typo.parquet")
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers: a hung server
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    with silent, running(ScoredRuleBackend(), allow_local_images=str(allowed), group_wait_s=30) as (url, backend):
        usage = reward_usage(url, keyed=False, group_size=N)
        printed = shlex.split(
            next(line for line in usage.splitlines() if "reward.custom_reward_function.path=" in line)
        )
        old = shlex.split(
            next(line for line in usage.splitlines() if line.strip().startswith("custom_reward_function"))
        )
        base = [
            f"actor_rollout_ref.model.path={tiny_lm_dir}",
            "actor_rollout_ref.rollout.name=vllm",  # mandatory in the config; no engine is started
            f"actor_rollout_ref.rollout.n={N}",
            "actor_rollout_ref.rollout.prompt_length=128",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "data.max_prompt_length=128",
            f"data.max_response_length={RESPONSE_LENGTH}",
        ]
        data = [f"data.train_files={root / 'train.parquet'}", f"data.val_files={root / 'train.parquet'}"]
        typo = [f"data.train_files={root / 'typo.parquet'}", f"data.val_files={root / 'typo.parquet'}"]
        killed = _retry_overrides(f"http://127.0.0.1:{dead_port()}", KILLED)
        hung = _retry_overrides(f"http://127.0.0.1:{silent.getsockname()[1]}", HUNG)
        spec = {
            "runs": [
                {"name": "printed", "overrides": [*printed, *base, *data], "responses": RESPONSES},
                {"name": "no_group", "overrides": [*printed[:2], *base, *data], "responses": RESPONSES},
                {"name": "missing_image", "overrides": [*printed, *base, *typo], "responses": RESPONSES},
                {"name": "old_spelling", "overrides": [*old, *base, *data], "responses": RESPONSES},
                {"name": "killed", "overrides": [*printed, *base, *data, *killed], "responses": RESPONSES},
                {"name": "hung", "overrides": [*printed, *base, *data, *hung], "responses": RESPONSES},
            ]
        }
        out, _ = run_driver(frameworks_site, "verl_driver.py", spec, root, env={"MRJUDGE_REWARD_URL": url})
        yield out, backend


def test_the_printed_overrides_are_the_keys_verl_0_9_1_reads(verl_runs):
    out, _ = verl_runs
    assert out["versions"]["verl"] == VERSIONS["verl"]
    read = out["runs"]["printed"]["config"]
    assert read["custom_reward_function"] == {
        "path": str(VERL_FILE),
        "name": "compute_score",
        "reward_kwargs": {"group_size": N},  # '${actor_rollout_ref.rollout.n}', resolved by verl's config
    }
    assert read["reward_manager"] == "naive" and read["rollout_n"] == N


def test_rewards_come_back_one_per_sample_on_the_last_token_judged_listwise_by_prompt(verl_runs):
    out, backend = verl_runs
    run = out["runs"]["printed"]
    assert "error" not in run, run.get("error")
    assert run["reward_manager"] == "NaiveRewardManager" and sum(run["worker_calls"]) == 2 * N  # one call per sample
    assert run["rm_scores_shape"] == [2 * N, RESPONSE_LENGTH]
    assert run["reward_extra_keys"] == ["score", "judge_scored", "judge_group_size"]
    groups: dict[str, list[dict]] = {}
    for row in run["rows"]:
        assert row["reward_positions"] == [row["valid_response_length"] - 1]  # the last response token only
        assert row["reward"] == pytest.approx(row["score"], abs=1e-6)  # float32 in rm_scores
        assert row["judge_scored"] == 1.0 and row["judge_group_size"] == N
        groups.setdefault(row["uid"], []).append(row)
    assert sorted(len(g) for g in groups.values()) == [N, N]
    for rows in groups.values():
        expected = listwise_rewards([r["response"] for r in rows])
        assert [r["score"] for r in rows] == pytest.approx(expected, abs=1e-6)  # one listwise verdict
    # Each judge call saw one prompt's four responses together, and that prompt's image from extra_info.
    calls = [c for c in backend.shown if len(c["candidates"]) == N]
    assert len(calls) == 2 * 2  # two prompts, two display orders each (the server's judge)
    for call in calls:
        assert call["image_colours"] == [image_colour(call["candidates"])]


def test_no_group_and_no_reference_is_refused_naming_the_fix(verl_runs):
    run = verl_runs[0]["runs"]["no_group"]
    assert run["config"]["custom_reward_function"].get("reward_kwargs") is None
    assert run["error_type"] == "ValueError"
    assert (
        "reward_kwargs.group_size=${actor_rollout_ref.rollout.n}" in run["error"]
        and "no training signal" in run["error"]
    )


def test_a_missing_image_stops_the_rollout_with_the_servers_message(verl_runs):
    run = verl_runs[0]["runs"]["missing_image"]
    assert run["error_type"] == "RewardRefused"
    assert "HTTP 422" in run["error"] and "labels[0].images[0]" in run["error"] and "nowhere/red.png" in run["error"]


def test_the_pre_0_7_spelling_composes_but_is_never_read(verl_runs):
    """What issue 37 found: verl 0.9.1's main_ppo does not move the old keys, so its default reward runs."""
    run = verl_runs[0]["runs"]["old_spelling"]
    assert run["config"]["custom_reward_function"]["path"] is None
    assert run["error_type"] == "NotImplementedError" and "not implemented for data_source=" in run["error"]


def _verl_adds_no_bound(site) -> None:
    """verl 0.9.1 puts no timeout and no retry of its own around a custom reward function: the naive manager's
    `run_single` awaits it, and the agent loop's `_compute_score` awaits the reward-loop worker's call (the
    `_post_request` retries in reward_loop.py are for verl's reward-model router, not this path)."""
    naive = (site / "verl" / "experimental" / "reward_loop" / "reward_manager" / "naive.py").read_text()
    agent = (site / "verl" / "experimental" / "agent_loop" / "agent_loop.py").read_text()
    run_single = naive[naive.index("async def run_single") :]
    compute = agent[agent.index("async def _compute_score") : agent.index("async def _compute_teacher_logprobs")]
    assert "result = await self.compute_score(" in run_single
    assert "await selected_reward_loop_worker_handle.compute_score.remote(data)" in compute
    for code in (run_single, compute):
        assert not re.search(r"timeout|wait_for|retr(y|ies)|except", code), "verl wraps the reward call now: read it"


@pytest.mark.parametrize(
    ("name", "retry", "failed"),
    [("killed", KILLED, "ConnectError"), ("hung", HUNG, "ReadTimeout")],
    ids=["killed", "hung"],
)
def test_a_judge_outage_stops_the_rollout_in_bounded_time_with_reward_unavailable(
    verl_runs, frameworks_site, name, retry, failed
):
    """The reward server killed (its port refuses connections), or hung (it accepts and never answers), under
    verl 0.9.1's own reward loop: our compute_score retries as its reward_kwargs say, then raises
    RewardUnavailable, which verl propagates out of `generate_sequences` (the rollout stops). verl adds no
    time of its own, so the bound is ours: the back-offs (`RetryPolicy.max_wait_s()`) plus, when hung,
    `(1 + max_retries) x timeout_s`."""
    _verl_adds_no_bound(frameworks_site)
    # A refused connection fails at once; a hung server holds each try for its timeout (one server, one try a round).
    tries_s = (1 + retry.max_retries) * retry.timeout_s if name == "hung" else 0.0
    least = tries_s + sum(min(0.5 * retry.backoff_s * 2**i, retry.max_backoff_s) for i in range(retry.max_retries))
    most = tries_s + retry.max_wait_s()
    run = verl_runs[0]["runs"][name]
    assert run["config"]["custom_reward_function"]["reward_kwargs"]["max_retries"] == retry.max_retries
    assert run["error_type"] == "RewardUnavailable"
    assert failed in run["error"] and f"(after {retry.max_retries} retries)" in run["error"]
    unavailable = [c for c in run["reward_calls"] if c["end"].startswith("RewardUnavailable:")]
    assert unavailable, run["reward_calls"]
    for call in unavailable:
        assert least <= call["s"] <= most + SLACK_S, call
    # The first one ends the rollout; the other samples' calls are cancelled with it.
    assert {c["end"].split(":")[0] for c in run["reward_calls"]} <= {"RewardUnavailable", "CancelledError"}
    assert least <= run["first_reward_call_to_end_s"] <= most + SLACK_S
