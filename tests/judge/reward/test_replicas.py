"""Several judge replicas: groups spread whole over them, a dead one skipped and tried again later.

The choice itself (`judge.reward.wire.Replicas`, `Failover`) runs on a clock the test moves; every client
runs against real servers on loopback: the TRL reward against two stand-in reward servers
(`tests/support/reward_app.py`), the verl and OpenRLHF files against two reward servers around the rule judge,
the OpenAI backend and `mrjudge serve --model A,B` against two OpenAI-compatible rule-judge servers
(`tests/support/rule_openai.py`). A dead replica is a loopback port nobody listens on.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
from collections import Counter

import httpx
import pytest

from judge.backends.openai_http import OpenAIBackend
from judge.integrations import verl
from judge.judging import Judge, JudgeConfig
from judge.reward.trl.http import HttpJudgeReward
from judge.reward.trl.spec import reward_spec
from judge.reward.wire import Failover, Replicas, RetryPolicy, reward_server_urls, server_urls
from judge.types import MCItem
from reward_server.background import serve_in_thread
from tests.support.integration_files import load_openrlhf_file
from tests.support.reward_app import fresh_state, make_reward_app
from tests.support.reward_server import mrjudge_serve, running
from tests.support.rule_openai import rule_openai_server
from tiny_world.rule_judge import ScoredRuleBackend


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def dead_url() -> str:
    """A loopback address nobody listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


# -- the choice -------------------------------------------------------------------------------------------


def test_addresses_come_as_a_list_or_comma_separated(monkeypatch):
    assert server_urls(" http://a:1 ,http://b:2,") == ["http://a:1", "http://b:2"]
    assert server_urls(("http://a:1",)) == ["http://a:1"]
    monkeypatch.setenv("MRJUDGE_REWARD_URL", "http://a:1,http://b:2")
    assert reward_server_urls() == ["http://a:1", "http://b:2"]
    assert reward_server_urls(["http://c:3"]) == ["http://c:3"]
    monkeypatch.setenv("MRJUDGE_REWARD_URL", " , ")
    with pytest.raises(RuntimeError, match="or several comma-separated"):
        reward_server_urls()
    assert reward_spec({"url": "http://a:1,http://b:2"}).build().endpoints == [
        "http://a:1/v1/reward",
        "http://b:2/v1/reward",
    ]
    assert reward_spec({"url": ["http://a:1", "http://b:2/v1"]}).build().endpoints[1] == "http://b:2/v1/reward"
    with pytest.raises(ValueError, match="reward.url must say where the judge is"):
        reward_spec({"url": [" "]})


def test_whole_groups_go_to_the_replica_with_the_fewest_requests_outstanding():
    replicas = Replicas(["a", "b", "c"])
    firsts = [replicas.order()[0] for _ in range(6)]
    assert Counter(firsts) == {0: 2, 1: 2, 2: 2}  # nothing outstanding: taken in turn
    replicas.started(0)
    replicas.started(0)
    replicas.started(1)
    assert [replicas.order()[0] for _ in range(3)] == [2, 2, 2]
    replicas.finished(0, ok=True)
    replicas.finished(0, ok=True)
    assert replicas.order()[-1] == 1  # the busiest last


def test_a_failed_replica_cools_off_doubling_then_is_tried_again():
    clock = Clock()
    replicas = Replicas(["a", "b"], cooloff_s=5.0, max_cooloff_s=60.0, clock=clock)
    replicas.started(0)
    replicas.finished(0, ok=False)
    assert replicas.order() == [1] and replicas.live() == [False, True]
    clock.now += 5
    assert sorted(replicas.order()) == [0, 1]  # back after its cool-off
    replicas.started(0)
    replicas.finished(0, ok=False)  # twice in a row: 10 s
    clock.now += 9
    assert replicas.order() == [1]
    clock.now += 1
    assert 0 in replicas.order()
    replicas.started(1)
    replicas.finished(1, ok=False, retry_after=30.0)  # a Retry-After longer than the cool-off is kept
    replicas.started(0)
    replicas.finished(0, ok=False)
    assert replicas.order() == [0, 1]  # all cooling off: all are tried, the soonest back first
    replicas.started(0)
    replicas.finished(0, ok=True)
    assert replicas.failures[0] == 0 and replicas.live()[0]


def test_key_routing_ranks_replicas_the_same_in_every_process_and_spreads_keys():
    urls = ["http://j1:8000/get_reward", "http://j2:8000/get_reward", "http://j3:8000/get_reward"]
    here, there = Replicas(urls), Replicas(urls)
    there.started(0)
    there.finished(0, ok=False)  # another process's cool-offs and load do not change a key's ranking
    keys = [f"prompt {i}" for i in range(3000)]
    assert all(here.order(k) == there.order(k) for k in keys)
    firsts = Counter(here.order(k)[0] for k in keys)
    assert all(900 <= n <= 1100 for n in firsts.values()), firsts
    # Without replica 1, only the keys it ranked first move, each to its second choice: the rest stay put.
    fewer = Replicas([urls[0], urls[2]])
    for key in keys[:300]:
        ranked = [urls[i] for i in here.order(key) if i != 1]
        assert [fewer.urls[i] for i in fewer.order(key)] == ranked


def test_with_one_replica_failover_is_the_plain_retry_schedule():
    failover = Failover(Replicas(["a"]), RetryPolicy(max_retries=2, backoff_s=1.0), rng=random.Random(0))
    waits = []
    while (step := failover.next()) is not None:
        replica, wait_s = step
        assert replica == 0
        waits.append(wait_s)
        failover.started()
        failover.unreachable()
    assert waits[0] == 0 and 0.5 <= waits[1] <= 1.5 and 1.0 <= waits[2] <= 3.0 and len(waits) == 3
    assert str(failover.gave_up("ConnectError: refused")) == "ConnectError: refused (after 2 retries)"


def test_failover_passes_a_dead_replica_at_once_and_a_key_routed_request_stays_where_its_group_is():
    replicas = Replicas(["a", "b"])
    failover = Failover(replicas, RetryPolicy(max_retries=1, backoff_s=1.0))
    first, wait_s = failover.next()
    failover.started()
    failover.unreachable()
    second, wait_again = failover.next()
    assert second != first and wait_s == wait_again == 0  # the other replica, without waiting
    failover.started()
    failover.answered(200)
    assert replicas.live() == [first != 0, first != 1] and replicas.outstanding == [0, 0]

    keyed = Failover(replicas, RetryPolicy(max_retries=1, backoff_s=1.0), key="prompt 7")
    home, _ = keyed.next()
    keyed.started()
    keyed.answered(503, retry_after=2.0)  # reachable but busy: its group is there, so back off and ask it again
    again, wait_s = keyed.next()
    assert again == home and wait_s == 2.0
    keyed.started()
    keyed.unreachable()  # gone: every sample of its group moves on the same way, at once
    moved, wait_s = keyed.next()
    assert moved != home and wait_s == 0
    keyed.started()
    keyed.unreachable()
    assert keyed.next() is None and "3 tries over 2 replicas" in str(keyed.gave_up("x"))


# -- TRL: whole groups over two reward servers ----------------------------------------------------------


@pytest.fixture(scope="module")
def stand_ins():
    states = [fresh_state(), fresh_state()]
    with serve_in_thread(make_reward_app(states[0])) as one, serve_in_thread(make_reward_app(states[1])) as two:
        yield [one, two], states


@pytest.fixture
def two_servers(stand_ins):
    urls, states = stand_ins
    for state in states:
        state.update(fresh_state())
    return urls, states


def _groups(n: int) -> tuple[list[str], list[str]]:
    prompts = [f"prompt {g}" for g in range(n) for _ in range(4)]
    completions = [f"score={s}" for _ in range(n) for s in (3, 9, 1, 5)]
    return prompts, completions


def test_trl_groups_go_whole_to_the_replicas_and_a_dead_one_is_skipped(two_servers):
    urls, states = two_servers
    dead = dead_url()
    reward = HttpJudgeReward([urls[0], dead, urls[1]], retry=RetryPolicy(1, backoff_s=0.01), replica_cooloff_s=30)
    prompts, completions = _groups(12)
    assert reward(prompts, completions) == [0.0, 1.0, 0.0, 0.0] * 12  # every group judged, by the rule judge
    bodies = [b for state in states for b in state["bodies"]]
    assert sorted(b["prompt"] for b in bodies) == sorted(set(prompts))  # each group once, whole, on one replica
    assert all(b["responses"] == ["score=3", "score=9", "score=1", "score=5"] for b in bodies)
    assert all(len(state["bodies"]) >= 3 for state in states), [len(s["bodies"]) for s in states]
    assert reward.replicas.sent[1] >= 1 and not reward.replicas.live()[1]  # tried, failed, cooling off
    tried = reward.replicas.sent[1]
    assert reward(*_groups(4)) == [0.0, 1.0, 0.0, 0.0] * 4
    assert reward.replicas.sent[1] == tried  # skipped while it cools off
    assert reward.totals["failed"] == 0


def test_trl_a_replica_that_comes_back_gets_groups_again_after_its_cooloff(two_servers):
    urls, states = two_servers
    gone = dead_url()
    port = int(gone.rsplit(":", 1)[1])
    reward = HttpJudgeReward([urls[0], gone], retry=RetryPolicy(1, backoff_s=0.01), replica_cooloff_s=0.2)
    assert reward(*_groups(4)) == [0.0, 1.0, 0.0, 0.0] * 4
    assert len(states[0]["bodies"]) == 4 and reward.replicas.failures[1] >= 1
    back = fresh_state()
    with serve_in_thread(make_reward_app(back), port=port):
        asyncio.run(asyncio.sleep(0.5))  # past its cool-off
        assert reward(*_groups(8)) == [0.0, 1.0, 0.0, 0.0] * 8
    assert len(back["bodies"]) >= 2 and reward.replicas.failures[1] == 0


def test_trl_all_replicas_down_gives_none_after_the_retries(two_servers):
    reward = HttpJudgeReward([dead_url(), dead_url()], retry=RetryPolicy(2, backoff_s=0.01))
    assert reward(*_groups(2)) == [None] * 8
    assert reward.totals["failed_groups"] == 2 and reward.replicas.sent == [6, 6]  # 3 rounds over both, per group


# -- verl and OpenRLHF: one-sample calls meet on one replica ----------------------------------------------


@pytest.fixture(scope="module")
def judges():
    backends = [ScoredRuleBackend(), ScoredRuleBackend()]
    with running(backends[0], group_wait_s=5.0) as (one, _), running(backends[1], group_wait_s=5.0) as (two, _):
        yield [one, two], backends


@pytest.fixture
def two_judges(judges):
    urls, backends = judges
    for backend in backends:
        backend.shown.clear()
    return urls, backends


def _spread(endpoints: list[str], live: list[str], key_of, n: int) -> list[int]:
    """`n` prompt numbers whose keys reach each live replica equally often (by the ranking every worker computes),
    so that what the test checks does not depend on which replicas the loopback ports happen to favour."""
    replicas = Replicas(endpoints)
    wanted, chosen = dict.fromkeys(live, n // len(live)), []
    for number in range(1000):
        first = next(endpoints[i] for i in replicas.order(key_of(number)) if endpoints[i] in live)
        if wanted[first]:
            wanted[first] -= 1
            chosen.append(number)
            if len(chosen) == n:
                return chosen
    raise AssertionError("no spread found")


def _question(p: int) -> str:
    return f"What is shown in picture {p}?"


async def _verl_samples(server_url: str, prompts: list[int]) -> list[dict]:
    options = {"group_size": 4, "server_url": server_url, "max_retries": 1, "backoff_s": 0.01}
    calls = [
        verl.compute_score("d", f"answer score={s}", "", {"question": _question(p)}, **options)
        for s in (9, 2, 5, 7)
        for p in prompts  # interleaved: a prompt's samples arrive apart, as from different workers
    ]
    return await asyncio.gather(*calls)


@pytest.mark.parametrize("with_a_dead_replica", [False, True])
def test_verl_samples_of_a_prompt_meet_on_one_replica(two_judges, with_a_dead_replica):
    urls, backends = two_judges
    named = [urls[0], dead_url(), urls[1]] if with_a_dead_replica else urls
    endpoints, live = [verl.get_reward_endpoint(u) for u in named], [verl.get_reward_endpoint(u) for u in urls]
    prompts = _spread(endpoints, live, lambda p: verl.group_key(_question(p), None, [], 4), 8)
    got = asyncio.run(_verl_samples(",".join(named), prompts))
    assert all(g["judge_group_size"] == 4.0 and g["judge_scored"] == 1.0 for g in got)  # never a split group
    weights = [math.exp(s - 9) for s in (9, 2, 5, 7)]
    expected = [w / sum(weights) for w in weights for _ in range(8)]
    assert [g["score"] for g in got] == pytest.approx(expected, abs=1e-6)
    shown = [len(c["candidates"]) for b in backends for c in b.shown]
    assert shown == [4] * 16  # 8 prompts × 2 display orders, each a whole group
    assert [len(b.shown) for b in backends] == [8, 8]  # each replica the 4 prompts ranked to it


def test_openrlhf_file_sends_each_prompts_samples_to_one_replica_and_skips_a_dead_one(two_judges, monkeypatch):
    urls, backends = two_judges
    module = load_openrlhf_file()
    named = [urls[0], dead_url(), urls[1]]
    endpoints, live = (
        [module.wire.get_reward_endpoint(u) for u in named],
        [module.wire.get_reward_endpoint(u) for u in urls],
    )
    numbers = _spread(endpoints, live, lambda p: module._sample_key(f"P{p}: ", ""), 8)
    monkeypatch.setenv("MRJUDGE_REWARD_URL", ",".join(named))
    prompts = [f"P{p}: " for _ in range(2) for p in numbers]
    queries = [f"{prompt}score={3 + 4 * j}" for j in range(2) for prompt in prompts[:8]]
    got = module.reward_func(queries, prompts, [""] * 16)
    assert got["extra_logs"]["judge_group_size"].tolist() == [2.0] * 16  # each prompt's pair judged together
    assert got["extra_logs"]["judge_scored"].tolist() == [1.0] * 16
    high = 1 / (1 + math.exp(-4))  # softmax over (score=3, score=7)
    assert got["rewards"].tolist() == pytest.approx([1 - high] * 8 + [high] * 8, abs=1e-6)
    assert [len(b.shown) for b in backends] == [8, 8]  # each replica the 4 prompts ranked to it, 2 orders each


# -- several OpenAI-compatible judge endpoints behind one judge --------------------------------------------


@pytest.fixture(scope="module")
def endpoints():
    with rule_openai_server() as (one, first), rule_openai_server() as (two, second):
        yield [one, two], [first, second]


def _items(n: int) -> list[MCItem]:
    return [MCItem(id=i, question="Q?", candidates=["score=1", f"score={2 * (i % 4)}", "score=3"]) for i in range(n)]


def test_openai_backend_spreads_requests_and_moves_off_a_failing_endpoint(endpoints):
    urls, states = endpoints
    backend = OpenAIBackend([urls[0], dead_url() + "/v1", urls[1]], max_retries=1, timeout=10, replica_cooloff_s=30)
    judge = Judge(backend, JudgeConfig(orders=2, batch_size=16))
    before = [s["requests"] for s in states]
    verdicts = judge.select(_items(12))
    assert [v.choice for v in verdicts] == [2 if i % 4 < 2 else 1 for i in range(12)]
    served = [s["requests"] - b for s, b in zip(states, before)]
    assert sum(served) == 24 and min(served) >= 6, served  # 12 items × 2 orders, spread
    states[0]["fail"] = True  # the first endpoint answers 503: its requests move to the other
    try:
        before = [s["requests"] for s in states]
        assert [v.choice for v in judge.select(_items(6))] == [2 if i % 4 < 2 else 1 for i in range(6)]
        assert states[1]["requests"] - before[1] == 12 and not backend.replicas.live()[0]
    finally:
        states[0]["fail"] = False


def test_openai_backend_holds_max_concurrency_per_server_when_one_takes_all(endpoints):
    """`max_concurrency` is per server: with the other endpoint failing, the one left gets no more at once."""
    urls, states = endpoints
    backend = OpenAIBackend(urls, max_retries=1, timeout=10, replica_cooloff_s=30, max_concurrency=2)
    states[0]["fail"] = True
    states[1].update(delay_s=0.05, peak=0)
    try:
        verdicts = Judge(backend, JudgeConfig(orders=2, batch_size=16)).select(_items(8))
        assert [v.choice for v in verdicts] == [2 if i % 4 < 2 else 1 for i in range(8)]
        assert states[1]["peak"] == 2  # 16 requests, 2 at a time (a shared gate let 4 in)
    finally:
        states[0]["fail"] = False
        states[1].update(delay_s=0)


def test_mrjudge_serve_over_two_endpoints_spreads_the_judge_calls(endpoints):
    urls, states = endpoints
    before = [s["requests"] for s in states]
    with mrjudge_serve("--model", ",".join(urls), "--orders", "2") as base:
        bodies = [{"prompt": f"Q{i}?", "responses": ["score=2", "score=6", "score=4"]} for i in range(8)]
        with httpx.Client(base_url=base, timeout=60) as client:
            for body in bodies:
                response = client.post("/v1/reward", json=body)
                assert response.status_code == 200, response.text
                assert response.json()["rewards"] == [0.0, 1.0, 0.0]
    served = [s["requests"] - b for s, b in zip(states, before)]
    assert sum(served) == 16 and min(served) >= 4, served
