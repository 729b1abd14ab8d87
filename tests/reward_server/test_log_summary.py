"""Logs a flood cannot multiply: refusals and unscored samples are counted in `/metrics` and summarised in the log
at most once per interval per reason (`reward_server.log_summary`), never a line each.

The summary's arithmetic runs on a clock the test moves; the server's, on a real loopback server taking a
burst of bad requests and unscored `/get_reward` samples.
"""

from __future__ import annotations

import logging

import httpx
import pytest

from reward_server.log_summary import LogSummary, RateLimitFilter
from tests.support.reward_server import running


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def summary(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="test.summary")
    return LogSummary(logging.getLogger("test.summary"), interval_s=10.0, clock=clock), clock


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.summary"]


def test_the_first_of_a_reason_is_logged_at_once_then_one_line_per_interval(summary, caplog):
    log, clock = summary
    for i in range(1000):
        log.note("refused 422 invalid_request", f"bad request {i}")
    assert _lines(caplog) == ["refused 422 invalid_request: bad request 0 [more of these: one line per 10 s]"]
    assert log.flush() == 0 and log.counts() == {"refused 422 invalid_request": 999}  # the interval is not over
    clock.now += 10
    assert log.flush() == 1
    assert _lines(caplog)[-1] == "refused 422 invalid_request: 999 more in the last 10 s (last: bad request 999)"
    clock.now += 1
    log.note("refused 422 invalid_request", "one more")  # within the next interval: counted, not written
    assert len(_lines(caplog)) == 2 and log.flush() == 0
    clock.now += 9
    assert log.flush() == 1 and _lines(caplog)[-1].startswith("refused 422 invalid_request: 1 more in the last 10 s")
    clock.now += 30  # a quiet spell: the next one is news again, logged at once
    log.note("refused 422 invalid_request", "after a pause")
    assert _lines(caplog)[-1].startswith("refused 422 invalid_request: after a pause")


def test_reasons_are_summarised_apart_and_forced_out_at_shutdown(summary, caplog):
    log, clock = summary
    for _ in range(5):
        log.note("refused 401 unauthorized", "wrong API key")
        log.note("unscored /get_reward no_reference", "4 of 4 samples unscored", 4)
    assert len(_lines(caplog)) == 2  # one per reason
    clock.now += 1
    assert log.flush(force=True) == 2
    assert _lines(caplog)[2:] == [
        "refused 401 unauthorized: 4 more in the last 1 s (last: wrong API key)",
        "unscored /get_reward no_reference: 16 more in the last 1 s (last: 4 of 4 samples unscored)",
    ]
    assert log.counts() == {}


def test_a_burst_of_bad_requests_is_counted_by_reason_and_logged_in_a_few_lines(caplog):
    caplog.set_level(logging.INFO, logger="mrjudge")
    with running(max_wait_ms=5, api_key="k", log_interval_s=60) as (url, _):
        headers = {"Authorization": "Bearer k"}
        with httpx.Client(base_url=url, timeout=30, headers=headers) as client:
            for i in range(100):
                client.post("/v1/reward", content=b'{"prompt": ')  # 400 invalid_json
                client.post("/v1/reward", json={"prompt": "Q?", "responses": ["a", 2]})  # 422 invalid_request
                client.post("/v1/reward", json={}, headers={"Authorization": "Bearer wrong"})  # 401
                lone = {"query": [f"P{i}: score=1"], "prompts": [f"P{i}: "], "labels": [None]}
                assert client.post("/get_reward", json=lone).status_code == 200  # unscored: no reference
            metrics = client.get("/metrics").text
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("mrjudge")]
    # One line per reason at its first event, and the rest in one summary each at shutdown.
    assert len(lines) == 8, lines
    for reason, count in [("refused 400 invalid_json", 99), ("refused 422 invalid_request", 99),
                          ("refused 401 unauthorized", 99), ("unscored /get_reward no_reference", 99)]:  # fmt: skip
        assert sum(line.startswith(f"{reason}:") for line in lines) == 2, reason
        assert any(line.startswith(f"{reason}: {count} more in the last") for line in lines), reason
    assert any("/v1/reward from 127.0.0.1: responses[1]: expected a string" in line for line in lines)
    for status, reason in [("400", "invalid_json"), ("422", "invalid_request"), ("401", "unauthorized")]:
        assert f'mrjudge_refused_requests_total{{reason="{reason}",status="{status}"}} 100.0' in metrics
    assert 'mrjudge_rewards_total{endpoint="/get_reward",outcome="no_reference"} 100.0' in metrics


def test_uvicorns_own_warnings_are_rate_limited_per_message(caplog):
    clock = Clock()
    logger = logging.getLogger("test.uvicorn")
    logger.addFilter(RateLimitFilter(interval_s=10.0, clock=clock))
    with caplog.at_level(logging.WARNING, logger="test.uvicorn"):
        for _ in range(500):
            logger.warning("Invalid HTTP request received.")
        logger.warning("Unsupported upgrade request.")  # another message: its own allowance
        clock.now += 10
        logger.warning("Invalid HTTP request received.")
    assert [r.getMessage() for r in caplog.records] == [
        "Invalid HTTP request received.",
        "Unsupported upgrade request.",
        "Invalid HTTP request received. [499 more like it in the last 10 s]",
    ]
