"""The verl and OpenRLHF files against the reward server in this process (the rule judge): grouping of verl's
per-sample calls, and loud errors: a refused request raises the server's message, an unreachable server raises
after the retries, a configuration with no signal is refused, and only unscored verdicts are filled.

The same files through the frameworks' own code: tests/frameworks (verl 0.9.1, OpenRLHF 0.11.2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import socket

import pytest
from PIL import Image

from judge.integrations import verl
from judge.reward.planner import NEUTRAL_REWARD
from judge.reward.wire import RewardRefused, RewardUnavailable
from tests.support.integration_files import load_openrlhf_file
from tests.support.reward_server import running
from tiny_world.rule_judge import ScoredRuleBackend

QUESTION = "What colour is the picture?"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    allowed = tmp_path_factory.mktemp("allowed")
    Image.new("RGB", (28, 28), (220, 20, 20)).save(allowed / "red.png")
    backend = ScoredRuleBackend()
    with running(backend, allow_local_images=str(allowed), group_wait_s=1.0) as (url, _):
        yield url, backend


@pytest.fixture
def env(server, monkeypatch):
    url, backend = server
    monkeypatch.setenv("MRJUDGE_REWARD_URL", url)
    backend.shown.clear()
    return url, backend


def _verl(solution: str, images=("red.png",), ground_truth: str = "", **kwargs):
    extra = {"question": QUESTION, "images": list(images)}
    return verl.compute_score(
        data_source="d", solution_str=solution, ground_truth=ground_truth, extra_info=extra, **kwargs
    )


async def _gather(*calls):
    return await asyncio.gather(*calls)


def test_verl_per_sample_calls_are_judged_as_one_group_on_the_server(env):
    _, backend = env
    scores = [9, 2, 5, 7]
    got = asyncio.run(_gather(*(_verl(f"answer score={s}", group_size=4) for s in scores)))
    weights = [math.exp(s - 9) for s in scores]
    assert [g["score"] for g in got] == pytest.approx([w / sum(weights) for w in weights], abs=1e-6)
    assert all(g["judge_scored"] == 1.0 and g["judge_group_size"] == 4.0 for g in got)
    assert [len(c["candidates"]) for c in backend.shown] == [4, 4]  # one listwise item, two display orders
    assert all(c["image_colours"] == [(220, 20, 20)] for c in backend.shown)


def test_verl_a_lone_sample_with_a_reference_is_judged_pairwise_at_once(env):
    [got] = asyncio.run(_gather(_verl("score=8", ground_truth="score=3")))
    # The response's probability of beating the reference: softmax over (8, 3).
    assert got == {
        "score": pytest.approx(1 / (1 + math.exp(-5)), abs=1e-6),
        "judge_scored": 1.0,
        "judge_group_size": 1.0,
    }


def test_verl_no_group_and_no_reference_is_refused_before_any_request(env):
    _, backend = env
    with pytest.raises(ValueError, match=r"reward_kwargs\.group_size=\$\{actor_rollout_ref\.rollout\.n\}"):
        asyncio.run(_verl("score=8"))
    with pytest.raises(ValueError, match="Got group_size=1"):
        asyncio.run(_verl("score=8", group_size=1))
    assert backend.shown == []


def test_verl_a_missing_image_raises_the_servers_refusal(env):
    with pytest.raises(RewardRefused, match=r"HTTP 422 \(field 'labels\[0\]\.images\[0\]'\).*nowhere\.png") as refused:
        asyncio.run(_verl("score=8", images=("nowhere.png",), ground_truth="score=2"))
    assert refused.value.status == 422


def test_verl_an_unparsed_verdict_is_the_only_thing_filled(env):
    got = asyncio.run(_gather(*(_verl(text, group_size=2) for text in ("abstain", "score=3"))))
    assert [g["score"] for g in got] == [NEUTRAL_REWARD, NEUTRAL_REWARD]
    assert [g["judge_scored"] for g in got] == [0.0, 0.0]


def test_verl_an_unreachable_server_raises_after_the_retries(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MRJUDGE_REWARD_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(RewardUnavailable, match=r"ConnectError.*after 2 retries"):
        asyncio.run(_verl("score=1", ground_truth="score=2", max_retries=2, backoff_s=0.01))


def test_verl_unknown_reward_kwargs_name_the_valid_ones(env):
    with pytest.raises(
        ValueError, match=r"unknown compute_score reward_kwargs key\(s\) \['mode'\]; valid keys: group_size"
    ):
        asyncio.run(_verl("score=1", ground_truth="score=2", mode="listwise"))
    # verl's own keywords (a reward model's router) are not ours and pass.
    [got] = asyncio.run(_gather(_verl("score=1", ground_truth="score=2", reward_router_address=None)))
    assert got["judge_scored"] == 1.0


def test_verl_batch_with_a_lone_rollout_and_no_reference_is_refused(env):
    with pytest.raises(ValueError, match=r"1 of 2 prompts .*actor_rollout_ref\.rollout\.n >= 2"):
        verl.compute_score_batch(
            data_sources=["d"] * 3, solution_strs=["score=1", "score=2", "score=3"], ground_truths=[""] * 3,
            extra_infos=[{"question": "A?"}, {"question": "A?"}, {"question": "B?"}],
        )  # fmt: skip


def test_openrlhf_file_raises_a_refusal_loudly(env, caplog):
    module = load_openrlhf_file()
    with caplog.at_level(logging.ERROR, logger="mrjudge.openrlhf"):
        with pytest.raises(module.wire.RewardRefused, match=r"HTTP 422 \(field 'labels\[0\]\.images\[0\]'\)"):
            module.reward_func(["Q score=1"], ["Q"], ['{"images": ["nowhere.png"], "reference": "score=2"}'])
    assert "no reward for 1 samples" in caplog.text and "nowhere.png" in caplog.text


def test_openrlhf_file_raises_when_the_server_stays_unreachable(monkeypatch):
    module = load_openrlhf_file()
    monkeypatch.setattr(module, "RETRY", dataclasses.replace(module.RETRY, max_retries=1, backoff_s=0.01))
    monkeypatch.setenv("MRJUDGE_REWARD_URL", "http://127.0.0.1:9")  # discard port: connection refused
    with pytest.raises(module.wire.RewardUnavailable, match="after 1 retries"):
        module.reward_func(["Q score=1"], ["Q"], [""])
