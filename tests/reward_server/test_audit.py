"""The reward audit on the server (`ServerConfig.audit`), on a real loopback port: the rewards are those of a
server without it, `/metrics` shows its figures, `audit.jsonl` holds every audited completion, and a broken
auditor (or a failing hand-over) costs a counter, never a request.

Rewards come from the rule judge with option log-probs (`tiny_world.rule_judge.ScoredRuleBackend`: a
candidate's probability is the softmax of its `score=N`), so a pairwise reward is a fraction; the gold is the
answer key (a response equal to the reference is right).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from judge.config import ConfigError, config_from_yaml
from judge.judging import Judge, JudgeConfig
from reward_server import ServerConfig, create_app
from reward_server.background import serve_in_thread
from reward_server.wire_images import audit_ref
from tests.support.reward_server import data_url
from tiny_world.rule_judge import ScoredRuleBackend

REFERENCE = "score=5"
REQUESTS = [
    {"prompt": "Which score?", "responses": ["score=5", "score=9", "score=1"]},
    {"prompt": "Which score, again?", "responses": ["score=2", "score=5"]},
    {"prompt": "And now?", "responses": ["score=7", "score=5", "score=5", "score=3"]},
]
COMPLETIONS = sum(len(r["responses"]) for r in REQUESTS)


def broken(prompt: str, completion: str, reference: str) -> float:
    """An answer-key check that fails on every call (`answer_key:tests.reward_server.test_audit:broken`)."""
    raise RuntimeError("this check is broken")


@contextmanager
def server(**config: Any) -> Iterator[tuple[str, Any]]:
    """A server around the scored rule judge with `ServerConfig(**config)`; yields (URL, its service)."""
    app = create_app(Judge(ScoredRuleBackend(), JudgeConfig(orders=2, batch_size=64)), ServerConfig(**config))
    with serve_in_thread(app, start_timeout_s=20) as url:
        yield url, app.state.service


def post_rewards(url: str, image: str) -> list[dict]:
    """Each of `REQUESTS` in pairwise mode against `REFERENCE`, one after another; the answers."""
    answers = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for body in REQUESTS:
            payload = {**body, "reference": REFERENCE, "mode": "pairwise", "images": [image]}
            response = client.post("/v1/reward", json=payload)
            assert response.status_code == 200, response.text
            answers.append(response.json())
    return answers


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(url: str, name: str, value: float, timeout_s: float = 20.0) -> dict[str, float]:
    """`/metrics` once `name` has reached `value` (the auditor runs on its own thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = metrics(url)
        if seen.get(name) == value:
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"{name} is {seen.get(name)}, not {value}, after {timeout_s} s: {seen}")
        time.sleep(0.02)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_audit_leaves_the_rewards_alone_and_shows_its_figures(tmp_path):
    image = data_url()
    with server() as (url, service):
        assert service.audit is None
        plain = post_rewards(url, image)
        assert not any(name.startswith("mrjudge_audit") for name in metrics(url))  # off: no audit series
    path = tmp_path / "audit.jsonl"
    audit = {"auditor": "answer_key", "audit_rate": 1.0, "window": 1, "path": str(path)}
    with server(audit=audit) as (url, service):
        audited = post_rewards(url, image)
        seen = wait_for(url, "mrjudge_audit_audited", len(REQUESTS))
        assert service.audit.steps == len(REQUESTS)
    # (a) the same rewards, verdicts and mode as without the audit
    for without, with_audit in zip(plain, audited):
        assert with_audit["rewards"] == without["rewards"]
        assert with_audit["verdicts"] == without["verdicts"]
        assert with_audit["mode"] == without["mode"] == "pairwise"
    # (b) the gauges: every group seen and audited; windows of one request each, so the first two have closed
    assert seen["mrjudge_audit_groups"] == len(REQUESTS)
    assert seen["mrjudge_audit_completions"] == COMPLETIONS
    assert seen["mrjudge_audit_dropped"] == seen["mrjudge_audit_auditor_errors"] == 0
    assert seen["mrjudge_audit_no_gold"] == 0
    assert seen["mrjudge_audit_alarm"] == 0
    assert seen["mrjudge_audit_submit_errors_total"] == 0
    second = REQUESTS[1]["responses"]  # the last closed window's
    assert seen["mrjudge_audit_gold_mean"] == pytest.approx(second.count(REFERENCE) / len(second))
    assert seen["mrjudge_audit_judge_mean"] == pytest.approx(sum(audited[1]["rewards"]) / len(second))
    for name in ("agreement", "overpay", "underpay"):
        assert 0 <= seen[f"mrjudge_audit_{name}"] <= 1
    # (c) one line per audited completion, with the reward the client got and the gold
    lines = read_jsonl(path)
    assert len(lines) == COMPLETIONS
    expected = [
        (step, body["prompt"], response, reward, float(response == REFERENCE))
        for step, (body, answer) in enumerate(zip(REQUESTS, audited))
        for response, reward in zip(body["responses"], answer["rewards"])
    ]
    assert [(x["step"], x["prompt"], x["completion"], x["reward"], x["gold"]) for x in lines] == expected
    assert all(x["reference"] == REFERENCE and x["auditor"] == "answer_key" for x in lines)
    assert all(x["images"] == [lines[0]["images"][0]] and x["images"][0].startswith("image:") for x in lines)
    assert all(x["reasoning"] and "highest score" in x["reasoning"][0] for x in lines)
    # the shutdown closed the last window: one figures line per request
    windows = read_jsonl(tmp_path / "audit_windows.jsonl")
    assert [w["window"] for w in windows] == [0, 1, 2]
    assert [w["n"] for w in windows] == [len(r["responses"]) for r in REQUESTS]


def test_a_broken_auditor_is_counted_and_every_request_is_answered(tmp_path):
    audit = {"auditor": "answer_key:tests.reward_server.test_audit:broken", "audit_rate": 1.0, "window": 1}
    with server(audit={**audit, "path": str(tmp_path / "audit.jsonl")}) as (url, _):
        answers = post_rewards(url, data_url())
        seen = wait_for(url, "mrjudge_audit_auditor_errors", len(REQUESTS))
    assert all(len(a["rewards"]) == len(b["responses"]) for a, b in zip(answers, REQUESTS))
    assert seen["mrjudge_audit_audited"] == 0 and seen["mrjudge_audit_groups"] == len(REQUESTS)
    assert "mrjudge_audit_gold_mean" not in seen  # no window has closed: no figures, rather than zeros
    assert not (tmp_path / "audit.jsonl").exists()


def test_a_failing_hand_over_is_counted_and_the_request_answered():
    with server(audit={"auditor": "answer_key"}) as (url, service):

        def fail(groups, step):
            raise RuntimeError("the audit is broken")

        service.audit.audit.submit = fail
        answers = post_rewards(url, data_url())
        seen = metrics(url)
    assert [len(a["rewards"]) for a in answers] == [len(r["responses"]) for r in REQUESTS]
    assert seen["mrjudge_audit_submit_errors_total"] == len(REQUESTS)


def test_get_reward_groups_are_audited_with_their_label(tmp_path):
    path = tmp_path / "audit.jsonl"
    with server(audit={"auditor": "answer_key", "audit_rate": 1.0, "path": str(path)}) as (url, service):
        body = {"query": ["Q? score=4", "Q? score=5"], "prompts": ["Q? ", "Q? "], "labels": [REFERENCE] * 2}
        response = httpx.post(f"{url}/get_reward", json=body, timeout=30)
        assert response.status_code == 200, response.text
        lone = {"query": ["Alone? score=3"], "prompts": ["Alone? "], "labels": [""]}  # no reference: not judged
        assert httpx.post(f"{url}/get_reward", json=lone, timeout=30).status_code == 200
        wait_for(url, "mrjudge_audit_audited", 1)
        assert service.audit.steps == 1
    lines = read_jsonl(path)
    expected = [("score=4", 0.0, REFERENCE), ("score=5", 1.0, REFERENCE)]
    assert [(x["completion"], x["gold"], x["reference"]) for x in lines] == expected
    assert [x["reward"] for x in lines] == response.json()["rewards"]


def test_image_references_are_kept_as_sent_and_bare_base64_as_a_data_url(tmp_path):
    url = data_url()
    assert audit_ref(url, None) == url
    bare = url.partition(",")[2]
    assert audit_ref(bare, None) == f"data:image/png;base64,{bare}"
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(12)).decode()
    assert audit_ref(jpeg, None).startswith("data:image/jpeg;base64,")
    assert audit_ref("cats/a.png", str(tmp_path)) == str(tmp_path.resolve() / "cats" / "a.png")


@pytest.mark.parametrize(
    ("audit", "says"),
    [
        ({"auditor": "self"}, "self is not available on the reward server"),
        ({"audit_rate": 0.5}, "audit.auditor is not set"),
        ({"auditor": "answer_key", "guard": "stop"}, "the server can only warn"),
        ({"auditor": "answer_key", "answer_column": "answer"}, "drop answer_column"),
        ({"auditor": "answer_key", "rate": 0.5}, "unknown keys ['rate']"),
        ({"auditor": "answer_key", "audit_rate": 0}, "audit: audit_rate (0) must be in (0, 1]"),
    ],
)
def test_a_server_audit_it_cannot_run_is_refused_naming_the_field(audit, says):
    with pytest.raises(ConfigError, match="audit") as error:
        config_from_yaml(ServerConfig, None, {"audit": audit})
    assert says in str(error.value)


def test_serve_flags_fill_the_audit_over_the_yaml_block(tmp_path, monkeypatch):
    from mrjudge.cli import build_parser
    from mrjudge.serve_cmd import server_config_from

    monkeypatch.delenv("MRJUDGE_SERVER_API_KEY", raising=False)
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("audit:\n  auditor: answer_key\n  seed: 3\n  audit_rate: 0.2\n")
    argv = ["serve", "--model", "m", "--server-config", str(yaml), "--audit-rate", "0.5", "--audit-path", "a.jsonl"]
    audit = server_config_from(build_parser().parse_args(argv)).audit
    assert (audit.auditor, audit.seed, audit.audit_rate, audit.path) == ("answer_key", 3, 0.5, "a.jsonl")
    assert audit.window == 10
    argv = ["serve", "--model", "m", "--audit-auditor", "judge_url:http://127.0.0.1:9", "--audit-window", "4"]
    audit = server_config_from(build_parser().parse_args(argv)).audit
    assert (audit.auditor, audit.window, audit.audit_rate) == ("judge_url:http://127.0.0.1:9", 4, 0.05)
    assert server_config_from(build_parser().parse_args(["serve", "--model", "m"])).audit is None
