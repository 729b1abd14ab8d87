"""The judge as a TRL reward function: grouping, planning, in-process judging, HTTP with its failures, and the
nested spec a recipe names one with (`judge.reward.trl.spec`).

The HTTP tests run a real server on loopback (FastAPI + uvicorn, `tests/support/reward_app.py`): a stand-in
for `mrjudge serve`'s `POST /v1/reward` that calls `judge.reward.scoring.compute_rewards` on a rule judge,
with switches to answer 503 to the first N calls, 500 to prompts carrying a marker, hold answers back, and
demand an API key. A group whose input the server or judge refuses raises `RewardRefused` at once; a group the
judge could not be reached for within the retries (an outage) gets `None`, counted and logged: never a made-up
reward, and never a crashed run for a judge restart.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import time

import pytest
from PIL import Image
from trl.trainer.utils import get_callable_name, is_async_callable

from judge.images import image_to_data_url
from judge.judging import Judge, JudgeConfig
from judge.reward import (
    AsyncHttpJudgeReward,
    AsyncJudgeRewardFunction,
    HttpJudgeReward,
    HttpRewardSpec,
    InProcessJudgeReward,
    InProcessRewardSpec,
    JudgeRewardFunction,
    reward_endpoint,
    reward_spec,
)
from judge.reward.wire import RetryPolicy, RewardRefused
from tests.support.reward_app import ALWAYS_500, fresh_state, make_reward_app, rule_judge
from tiny_world.rule_judge import RuleJudgeBackend, ScoredRuleBackend
from tiny_world.servers.openai_server import serve


class Metrics:
    """Stands in for TRL's `log_metric` keyword: records every (name, value)."""

    def __init__(self) -> None:
        self.logged: dict[str, list[float]] = {}

    def __call__(self, name: str, value: float) -> None:
        self.logged.setdefault(name, []).append(value)

    def last(self, name: str) -> float:
        return self.logged[name][-1]


# -- the stand-in reward server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    state = fresh_state()
    with serve(make_reward_app(state)) as url:
        yield url, state


@pytest.fixture
def reward_server(server):
    """The module's server with its switches and counters reset: (url, state)."""
    url, state = server
    state.update(fresh_state())
    return url, state


def _http(url: str, *, max_retries: int = 3, timeout_s: float = 10.0, **kwargs) -> HttpJudgeReward:
    return HttpJudgeReward(url, retry=RetryPolicy(max_retries, backoff_s=0.01, timeout_s=timeout_s), **kwargs)


@pytest.mark.parametrize(
    "url", ["http://j:8000", "http://j:8000/", "http://j:8000/v1", "http://j:8000/v1/", "http://j:8000/v1/reward"]
)
def test_reward_endpoint_accepts_any_root(url):
    assert reward_endpoint(url) == "http://j:8000/v1/reward"


@pytest.mark.parametrize(
    ("make", "kwargs", "match"),
    [
        (InProcessJudgeReward, {"judge": None}, "needs a judge"),  # nowhere to judge
        (HttpJudgeReward, {"url": ""}, "needs the reward server's url"),
        (InProcessJudgeReward, {"judge": "j", "mode": "best"}, "mode must be one of"),
        (InProcessJudgeReward, {"judge": "j", "mode": "pairwise"}, "set reference_column"),  # no reference
        (InProcessJudgeReward, {"judge": "j", "tournament": "swiss"}, "tournament must be"),
        (InProcessJudgeReward, {"judge": "j", "max_options": 1}, "max_options"),
        (InProcessJudgeReward, {"judge": "j", "retry": {"max_retries": -1}}, "max_retries >= 0"),
        (InProcessJudgeReward, {"judge": "j", "retry": {"retries": 1}}, r"unknown retry key\(s\) \['retries'\]"),
        (HttpJudgeReward, {"url": "http://j", "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_configurations_fail_at_construction(make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(**kwargs)


def test_the_old_single_class_still_builds_the_right_transport_with_a_warning():
    with pytest.warns(FutureWarning, match=r"JudgeRewardFunction\(judge=…\) is now InProcessJudgeReward"):
        local = JudgeRewardFunction(judge="runs/judge", max_retries=0, backoff_s=0.5, max_pixels=None)
    assert type(local) is InProcessJudgeReward and local.retry == RetryPolicy(max_retries=0, backoff_s=0.5)
    with pytest.warns(FutureWarning, match=r"AsyncHttpJudgeReward\(url, …\)"):
        remote = AsyncJudgeRewardFunction(server_url="http://j:8000", timeout_s=5.0, max_concurrency=4)
    assert type(remote) is AsyncHttpJudgeReward and remote.retry.timeout_s == 5.0 and remote.max_concurrency == 4
    with pytest.raises(ValueError, match="exactly one of server_url"):
        JudgeRewardFunction("http://j", judge="runs/judge")  # two places


# -- in process -------------------------------------------------------------------------------------------


def test_listwise_groups_by_prompt_and_maps_rewards_back():
    reward = InProcessJudgeReward(rule_judge())
    prompts = ["P1", "P2", "P1", "P2", "P1"]  # interleaved: grouping must not rely on order
    completions = ["score=1", "score=4", "score=7", "score=2", "score=3"]
    metrics = Metrics()
    assert reward(prompts=prompts, completions=completions, log_metric=metrics) == [0.0, 1.0, 1.0, 0.0, 0.0]
    assert reward.totals["groups"] == 2 and reward.judge.backend.calls == 1  # both groups in one batch
    assert metrics.last("judge/failed_frac") == 0.0 and metrics.last("judge/unscored_frac") == 0.0
    assert metrics.last("judge/latency_s") >= 0.0 and get_callable_name(reward) == "judge"


def test_conversational_prompts_group_by_image_content():
    red, blue = Image.new("RGB", (28, 28), "red"), Image.new("RGB", (28, 28), "blue")
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}]
    completions = [[{"role": "assistant", "content": f"score={s}"}] for s in (1, 2, 5, 3)]
    images = [red, red.copy(), blue, blue.copy()]  # equal pixels in separate objects, as TRL's rows are
    reward = InProcessJudgeReward(rule_judge())
    assert reward([prompt] * 4, completions, image=images) == [0.0, 1.0, 1.0, 0.0]
    assert reward.totals["groups"] == 2


def test_a_lone_completion_is_judged_against_its_reference_or_gets_none():
    reward = InProcessJudgeReward(rule_judge(), reference_column="answer")
    metrics = Metrics()
    rewards = reward(
        prompts=["A", "B", "C"],
        completions=["score=9", "score=1", "score=9"],
        answer=["score=5", "score=5", None],  # C has no reference: nothing to compare with
        log_metric=metrics,
    )
    assert rewards == [1.0, 0.0, None]
    assert metrics.last("judge/unscored_frac") == pytest.approx(1 / 3) and metrics.last("judge/failed_frac") == 0.0


def test_pairwise_mode_judges_every_completion_against_the_reference():
    reward = InProcessJudgeReward(rule_judge(), mode="pairwise", reference_column="answer")
    rewards = reward(prompts=["Q"] * 3, completions=["score=1", "score=6", "score=9"], answer=["score=5"] * 3)
    assert rewards == [0.0, 1.0, 1.0]  # listwise would have given the 6 nothing


def test_cap_at_reference_pays_a_tie_in_full_and_nothing_more_for_beating_the_reference():
    # Option probabilities are the softmax of the scores: 4 against 5 is 0.269, a tie 0.5, 6 against 5 0.731.
    judge = Judge(ScoredRuleBackend(), JudgeConfig(orders=2))
    completions, answers = ["score=4", "score=5", "score=6"], ["score=5"] * 3
    plain = InProcessJudgeReward(judge, mode="pairwise", reference_column="answer")
    p = plain(prompts=["Q"] * 3, completions=completions, answer=answers)
    assert p == pytest.approx([0.2689, 0.5, 0.7311], abs=1e-4)
    capped = InProcessJudgeReward(judge, mode="pairwise", reference_column="answer", cap_at_reference=True)
    assert capped(prompts=["Q"] * 3, completions=completions, answer=answers) == pytest.approx([2 * p[0], 1.0, 1.0])
    spec = reward_spec({"url": "http://j", "mode": "pairwise", "cap_at_reference": True})
    assert spec.build().cap_at_reference and reward_spec(spec.to_dict()) == spec


def test_groups_above_the_option_limit_play_a_knockout():
    reward = InProcessJudgeReward(rule_judge(), max_options=8)
    completions = [f"score={(7 * i) % 10}" for i in range(10)]
    rewards = reward(prompts=["Q"] * 10, completions=completions)
    best = completions.index("score=9")
    # Rounds survived out of 4: the champion 1.0, the finalist 0.75; listwise would give one 1.0 and zeros.
    assert rewards[best] == 1.0 and sorted(rewards)[-2] == 0.75
    assert all(r in (0.0, 0.25, 0.5, 0.75, 1.0) for r in rewards)


class BrokenBackend(RuleJudgeBackend):
    def generate(self, requests, params):
        self.calls += 1
        raise RuntimeError("CUDA out of memory")


def test_in_process_failures_give_none_after_retries_and_are_counted(caplog):
    judge = Judge(BrokenBackend(), JudgeConfig(orders=2))
    reward = InProcessJudgeReward(judge, retry=RetryPolicy(max_retries=2, backoff_s=0.001))
    metrics = Metrics()
    with caplog.at_level(logging.ERROR, logger="judge.reward"):
        assert reward(["Q", "Q", "R", "R"], ["a", "b", "c", "d"], log_metric=metrics) == [None] * 4
    assert metrics.last("judge/failed_frac") == 1.0 and metrics.last("judge/failed_groups") == 2
    assert metrics.last("judge/retries") == 2 and reward.totals["failed"] == 4
    assert "CUDA out of memory" in caplog.text


def test_in_process_a_bad_image_is_refused_naming_it(tmp_path):
    """A mistyped image path must stop the step, not train on the other groups with this one left out."""
    reward = InProcessJudgeReward(rule_judge(), retry={"max_retries": 0})
    with pytest.raises(RewardRefused, match=r"1 of 2 groups got no reward.*missing\.png"):
        reward(
            ["Q", "Q", "R", "R"],
            ["score=1", "score=2", "score=2", "score=1"],
            images=[[], [], [str(tmp_path / "missing.png")], [str(tmp_path / "missing.png")]],
        )
    assert reward.totals["failed_groups"] == 1 and reward.totals["groups"] == 2


def test_configuration_pickles_without_its_runtime():
    reward = InProcessJudgeReward("runs/judge", judge_config={"orders": 2, "max_new_tokens": 4}, name="vqa_judge")
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.judge == "runs/judge" and get_callable_name(copy) == "vqa_judge" and copy._local_judge is None


# -- over HTTP --------------------------------------------------------------------------------------------


def test_http_gives_the_same_rewards_as_in_process_and_sends_images(reward_server):
    url, state = reward_server
    image = Image.new("RGB", (30, 20), "green")
    prompts = ["Q", "Q", "Q", "R", "R"]
    completions = ["score=2", "score=8", "score=5", "score=1", "score=0"]
    kwargs = {"image": [image, image.copy(), image.copy(), image_to_data_url(image), image_to_data_url(image)]}
    local = InProcessJudgeReward(rule_judge())(prompts, completions, **kwargs)
    remote = _http(url)
    assert remote(prompts, completions, **kwargs) == local == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert state["calls"] == 2 and state["image_sizes"] == [[(30, 20)], [(30, 20)]]
    assert {b["mode"] for b in state["bodies"]} == {"listwise"} and all("reference" in b for b in state["bodies"])
    copy = pickle.loads(pickle.dumps(remote))  # after a call: client and loop exist, and are not pickled
    assert copy(prompts, completions, **kwargs) == local
    remote.close()
    assert remote(prompts, completions, **kwargs) == local  # a closed function starts again on the next call


def test_http_retries_a_full_queue_then_succeeds(reward_server):
    url, state = reward_server
    state["fail_first"] = 2  # 503 + Retry-After: 0
    metrics = Metrics()
    rewards = _http(url, max_retries=3)(["Q", "Q"], ["score=1", "score=3"], log_metric=metrics)
    assert rewards == [0.0, 1.0]
    assert state["calls"] == 3 and metrics.last("judge/retries") == 2 and metrics.last("judge/failed_frac") == 0.0


def test_http_a_group_that_keeps_failing_gets_none_after_the_retries(reward_server, caplog):
    url, state = reward_server
    metrics = Metrics()
    reward = _http(url, max_retries=2)
    with caplog.at_level(logging.ERROR, logger="judge.reward"):
        rewards = reward(["ok", "ok", ALWAYS_500, ALWAYS_500], ["score=1", "score=3"] * 2, log_metric=metrics)
    assert rewards == [0.0, 1.0, None, None]  # the good group's rewards stand; the failed one is no signal
    assert "1 of 2 groups got no reward" in caplog.text
    assert state["calls"] == 1 + 3  # the good group once, the bad one 1 + max_retries times
    assert metrics.last("judge/failed_groups") == 1 and metrics.last("judge/failed_frac") == 0.5
    assert metrics.last("judge/retries") == 2 and reward.totals["failed"] == 2
    assert "HTTP 500: judge crashed" in caplog.text


def test_http_client_errors_raise_the_servers_message_at_once(reward_server):
    url, state = reward_server
    reward = _http(url, max_options=16)  # more than the server's 8: a listwise group of 10 is refused
    with pytest.raises(RewardRefused, match=r"HTTP 422 \(field 'responses'\)") as refused:
        reward(["Q"] * 10, [f"score={i}" for i in range(10)])
    assert refused.value.status == 422
    assert state["calls"] == 1 and reward.totals["retries"] == 0


def test_http_timeouts_and_refused_connections_are_retried_then_give_none(reward_server):
    url, state = reward_server
    state["delay_s"] = 1.0
    reward = _http(url, timeout_s=0.2, max_retries=1)
    assert reward(["Q", "Q"], ["score=1", "score=2"]) == [None, None]
    assert reward.totals["retries"] == 1 and state["calls"] == 2

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = _http(f"http://127.0.0.1:{port}", max_retries=2)
    assert refused(["Q", "Q"], ["a", "b"]) == [None, None]
    assert refused.totals["retries"] == 2


def test_http_sends_the_api_key(reward_server, monkeypatch):
    url, state = reward_server
    state["api_key"] = "s3cret"
    assert _http(url, api_key="s3cret")(["Q", "Q"], ["score=1", "score=2"]) == [0.0, 1.0]
    with pytest.raises(RewardRefused, match="HTTP 401"):  # a wrong key: not retried, and never a made-up reward
        _http(url, api_key="wrong")(["Q", "Q"], ["score=1", "score=2"])
    monkeypatch.setenv("MRJUDGE_SERVER_API_KEY", "s3cret")
    assert _http(url)(["Q", "Q"], ["score=1", "score=2"]) == [0.0, 1.0]


def test_async_variant_is_what_trl_awaits_and_sends_groups_concurrently(reward_server):
    url, state = reward_server
    state["delay_s"] = 0.3
    reward = AsyncHttpJudgeReward(url, retry={"backoff_s": 0.01})
    assert is_async_callable(reward) and not is_async_callable(_http(url))
    prompts = [p for p in "ABCD" for _ in range(2)]
    start = time.perf_counter()
    rewards = asyncio.run(reward(prompts=prompts, completions=["score=1", "score=2"] * 4))
    assert rewards == [0.0, 1.0] * 4
    assert state["max_in_flight"] == 4 and time.perf_counter() - start < 4 * 0.3


def test_backoff_doubles_with_jitter_and_honours_retry_after():
    retry = RetryPolicy(backoff_s=1.0, max_backoff_s=30.0)
    for attempt in range(4):
        assert 0.5 * 2**attempt <= retry.delay(attempt) <= 1.5 * 2**attempt
    assert retry.delay(0, retry_after=7.0) == 7.0  # the server knows best how long its queue needs
    assert retry.delay(10) == 30.0 and retry.delay(0, retry_after=600) == 30.0  # capped


def test_against_the_real_reward_server_with_a_key(monkeypatch):
    """The same rewards through `mrjudge serve`'s app as in process, sync and async, key from the environment."""
    from reward_server import ServerConfig, create_app

    image = Image.new("RGB", (30, 20), "green")
    prompts = ["Q", "Q", "Q", "R"]
    completions = ["score=2", "score=8", "score=5", "score=1"]
    kwargs = {"image": [image] * 4, "answer": ["score=4"] * 4}
    local = InProcessJudgeReward(rule_judge(), mode="pairwise", reference_column="answer")(
        prompts, completions, **kwargs
    )
    assert local == [0.0, 1.0, 1.0, 0.0]
    with serve(create_app(rule_judge(), ServerConfig(api_key="s3cret"))) as url:
        keyless = _http(url, mode="pairwise", reference_column="answer", max_retries=0)
        with pytest.raises(RewardRefused, match="HTTP 401"):  # 401 is not retried: no reward
            keyless(prompts, completions, **kwargs)
        monkeypatch.setenv("MRJUDGE_SERVER_API_KEY", "s3cret")
        remote = _http(url, mode="pairwise", reference_column="answer")
        assert remote(prompts, completions, **kwargs) == local
        async_remote = AsyncHttpJudgeReward(url, mode="pairwise", reference_column="answer", retry={"backoff_s": 0.01})
        assert asyncio.run(async_remote(prompts, completions, **kwargs)) == local
        remote.close()


# -- the nested spec a recipe names a transport with --------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (None, r"set reward=\{transport: http"),  # nowhere to judge
        ({"url": "http://j", "model": "runs/judge"}, "reward.transport must be one of"),  # two places, no transport
        ({"transport": "grpc", "url": "http://j"}, "reward.transport must be one of"),
        ({"transport": "http", "mode": "listwise"}, r"reward.url must say where the judge is \(transport http\)"),
        ({"transport": "http", "urll": "http://j"}, r"\(transport http\) key\(s\) \['urll'\]; valid keys: transport"),
        ({"transport": "in_process", "model": "j", "url": "http://j"}, r"key\(s\) \['url'\]"),  # the other's key
        ({"model": "j", "judge": {"order": 2}}, r"reward.judge \(JudgeConfig\) key\(s\) \['order'\]"),
        ({"url": "http://j", "retry": {"timeout_s": 0}}, r"timeout_s > 0 \(0\)"),
        ({"url": "http://j", "mode": "pairwise", "reference_column": None}, "set reference_column"),
        ({"url": "http://j", "cap_at_reference": True}, r"cap_at_reference .* set mode 'pairwise' \('listwise'\)"),
    ],
)
def test_reward_spec_names_what_is_wrong(values, match):
    with pytest.raises(ValueError, match=match):
        reward_spec(values)


def test_reward_spec_builds_one_class_per_transport(monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "k")
    http = reward_spec({"url": "http://j:8000", "api_key_env": "MY_JUDGE_KEY", "retry": {"max_retries": 5}})
    assert isinstance(http, HttpRewardSpec) and reward_spec(http.to_dict()) == http  # saved and read back alike
    reward = http.build(("images",), max_pixels=1003520)
    assert type(reward) is AsyncHttpJudgeReward and reward.api_key == "k" and reward.retry.max_retries == 5
    assert reward.endpoint == "http://j:8000/v1/reward" and reward.max_pixels == 1003520
    assert type(http.build(asynchronous=False)) is HttpJudgeReward
    local = reward_spec({"transport": "in_process", "model": "runs/judge", "judge": {"orders": 4}})
    assert isinstance(local, InProcessRewardSpec) and reward_spec(local.to_dict()) == local
    built = local.build(("judge_images",), device="cpu")
    assert type(built) is InProcessJudgeReward and built.judge_config.orders == 4
    assert built.backend == "hf" and built.backend_kwargs == {"device": "cpu"}
    assert built.image_columns == ("judge_images",)
    assert reward_spec({"model": "http://vllm:8000/v1"}).build().backend_kwargs == {}  # openai: no device
