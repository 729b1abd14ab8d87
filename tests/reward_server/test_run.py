"""`run_server`'s process settings: the GIL switch interval the judge thread and the event loop share, and the
cores torch leaves to the HTTP front."""

from __future__ import annotations

import sys

import pytest

from reward_server import ServerConfig
from reward_server.run import run_server


def test_the_server_process_gets_the_configured_switch_interval(monkeypatch):
    import uvicorn

    seen: list[float] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.append(sys.getswitchinterval()))
    monkeypatch.setattr("reward_server.run._log_to_stderr", lambda level, interval_s: None)  # logging left as is
    before = sys.getswitchinterval()
    try:
        run_server(object(), ServerConfig(switch_interval_ms=30.0, front_cores=0), log_level="warning")
        assert seen == [pytest.approx(0.030)]
    finally:
        sys.setswitchinterval(before)


def test_the_switch_interval_is_a_serve_flag_and_must_be_positive():
    from mrjudge.cli import build_parser
    from mrjudge.serve_cmd import server_config_from

    args = build_parser().parse_args(["serve", "--model", "m", "--switch-interval-ms", "50"])
    assert server_config_from(args).switch_interval_ms == 50.0
    assert ServerConfig().switch_interval_ms == 20.0
    with pytest.raises(ValueError, match=r"switch_interval_ms \(0\.0\) must be > 0"):
        ServerConfig(switch_interval_ms=0.0)


def test_a_judge_in_the_server_process_leaves_a_core_to_the_front(monkeypatch):
    """torch's intra-op threads are the cores less `front_cores`, unless OMP_NUM_THREADS chose a count."""
    import os

    import torch

    from reward_server.run import _leave_cores_to_the_front

    cores = len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        assert _leave_cores_to_the_front(1) == max(1, cores - 1) == torch.get_num_threads()
        assert _leave_cores_to_the_front(cores + 3) == 1  # never fewer than one thread
        torch.set_num_threads(before)
        assert _leave_cores_to_the_front(0) is None and torch.get_num_threads() == before
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert _leave_cores_to_the_front(1) is None and torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
    from mrjudge.cli import build_parser
    from mrjudge.serve_cmd import server_config_from

    args = build_parser().parse_args(["serve", "--model", "m", "--front-cores", "0"])
    assert server_config_from(args).front_cores == 0 and ServerConfig().front_cores == 1
    with pytest.raises(ValueError, match=r"front_cores \(-1\) must be >= 0"):
        ServerConfig(front_cores=-1)
