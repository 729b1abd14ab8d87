"""`POST /get_reward` as OpenRLHF calls it, one sample per request: groups are held until whole, on loopback.

Exact rewards come from the rule judge (`tiny_world.rule_judge`: the candidate with the highest
`score=N` wins; `abstain` makes it write no answer, an unparsed verdict).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from judge.judging import JudgeConfig
from tests.support.reward_server import serving
from tiny_world.rule_judge import RuleJudgeBackend

PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Best?<|im_end|>\n<|im_start|>assistant\n"


def query(response: str, pads: int = 8) -> str:
    return PROMPT.replace("<|image_pad|>", "<|image_pad|>" * pads) + response + "<|im_end|>"


WAIT_S = 2.0
"""How long the server holds a partial group: long enough that four requests posted at once arrive within it
on a loaded machine (at 0.5 s, one test run on two busy workers judged one of four such requests alone)."""


@pytest.fixture(scope="module")
def url():
    with serving(RuleJudgeBackend(), JudgeConfig(orders=2), group_size=4, group_wait_s=WAIT_S) as base:
        yield base


def one_sample_requests(url: str, rows: list[tuple[str, str, str]]) -> list[dict]:
    """Post each (query, prompt, label) as its own request, all at once, as OpenRLHF's executor does."""

    def post(row):
        body = {"query": [row[0]], "prompts": [row[1]], "labels": [row[2]]}
        response = httpx.post(f"{url}/get_reward", json=body, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    with ThreadPoolExecutor(len(rows)) as pool:
        return list(pool.map(post, rows))


def test_four_one_sample_requests_are_judged_as_one_listwise_group(url):
    start = time.monotonic()
    got = one_sample_requests(url, [(query(f"score={s}"), PROMPT, "") for s in (3, 9, 1, 5)])
    assert [g["rewards"] for g in got] == [[0.0], [1.0], [0.0], [0.0]]
    assert all(g["extra_logs"]["judge_group_size"] == [4.0] for g in got)
    assert time.monotonic() - start < WAIT_S + 5  # whole at once: no wait for the timer


def test_a_partial_group_is_judged_after_the_wait(url):
    got = one_sample_requests(url, [(query("score=2"), PROMPT, ""), (query("score=7"), PROMPT, "")])
    assert [g["rewards"] for g in got] == [[0.0], [1.0]]
    assert all(g["extra_logs"]["judge_group_size"] == [2.0] for g in got)


def test_labels_split_groups_and_a_lone_empty_label_is_unscored(url):
    rows = [(query("score=4"), PROMPT, "score=6"), (query("score=4"), PROMPT, "")]
    with_reference, alone = one_sample_requests(url, rows)
    assert with_reference["rewards"] == [0.0] and with_reference["extra_logs"]["judge_scored"] == [1.0]  # pairwise
    assert alone["rewards"] == [0.5] and alone["extra_logs"]["judge_scored"] == [0.0]
    assert any("no other response" in note for note in alone["notes"])


def test_an_unparsed_verdict_is_unscored_and_counted(url):
    before = httpx.get(f"{url}/metrics").text
    got = one_sample_requests(url, [(query(r), PROMPT, "") for r in ("score=1", "abstain", "score=3", "score=2")])
    assert all(g["extra_logs"]["judge_group_size"] == [4.0] for g in got)  # one group, not split by the wait
    assert [g["rewards"] for g in got] == [[0.5]] * 4  # nothing parsed: neutral, not 1/4, and flagged
    assert all(g["extra_logs"]["judge_scored"] == [0.0] for g in got)
    line = 'mrjudge_rewards_total{endpoint="/get_reward",outcome="unparsed"}'
    count = lambda text: sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line))  # noqa: E731
    assert count(httpx.get(f"{url}/metrics").text) == count(before) + 4


def test_a_label_image_outside_the_allowed_folder_is_refused(url):
    body = {"query": [query("score=1")], "prompts": [PROMPT], "labels": ['{"images": ["/etc/passwd.png"]}']}
    response = httpx.post(f"{url}/get_reward", json=body, timeout=30)
    assert response.status_code == 422 and response.json()["error"]["field"] == "labels[0].images[0]"


def test_a_request_names_its_own_group_size(url):
    """verl's per-sample calls send `group_size` (its rollout.n): the server holds that many, whatever its own."""
    rows = [(query(f"score={s}"), PROMPT, "") for s in (3, 9)]

    def post(row):
        body = {"query": [row[0]], "prompts": [row[1]], "labels": [row[2]], "group_size": 2}
        return httpx.post(f"{url}/get_reward", json=body, timeout=30).json()

    start = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(post, rows))
    assert [g["rewards"] for g in got] == [[0.0], [1.0]]
    assert all(g["extra_logs"]["judge_group_size"] == [2.0] for g in got)
    assert time.monotonic() - start < WAIT_S  # whole at two, not after the server's wait for four
    # One sample with group_size 1 and a reference: judged at once, pairwise.
    body = {"query": [query("score=4")], "prompts": [PROMPT], "labels": ["score=6"], "group_size": 1}
    assert httpx.post(f"{url}/get_reward", json=body, timeout=30).json()["rewards"] == [0.0]


@pytest.mark.parametrize(("size", "status"), [(0, 422), (-2, 422), (True, 422), (513, 413)])
def test_a_bad_group_size_is_refused_naming_the_field(url, size, status):
    body = {"query": [query("score=1")], "prompts": [PROMPT], "labels": [""], "group_size": size}
    response = httpx.post(f"{url}/get_reward", json=body, timeout=30)
    assert response.status_code == status and response.json()["error"]["field"] == "group_size"
