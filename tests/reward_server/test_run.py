"""`run_server`'s process settings: the GIL switch interval the judge thread and the event loop share, and the
judge's long-lived objects frozen out of the collector's full collections."""

from __future__ import annotations

import gc
import sys

import pytest

from reward_server import ServerConfig
from reward_server.run import run_server, server_protocols


def test_the_server_process_gets_the_configured_switch_interval(monkeypatch):
    import uvicorn

    seen: list[float] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.append(sys.getswitchinterval()))
    monkeypatch.setattr("reward_server.run._log_to_stderr", lambda level, interval_s: None)  # logging left as is
    before = sys.getswitchinterval()
    try:
        run_server(object(), ServerConfig(switch_interval_ms=30.0), log_level="warning")
        assert seen == [pytest.approx(0.030)]
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()


def test_what_is_alive_when_the_server_starts_is_frozen_out_of_full_collections(monkeypatch):
    """A served judge's modules and parameters are alive for good; a full collection walking them held the GIL
    165-210 ms under load (docs/reward-server.md). What a request allocates later is still collected."""
    import uvicorn

    judge_like = [{"weights": [float(i)] * 100} for i in range(100)]
    frozen: list[int] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: frozen.append(gc.get_freeze_count()))
    monkeypatch.setattr("reward_server.run._log_to_stderr", lambda level, interval_s: None)
    before = sys.getswitchinterval()
    try:
        gc.unfreeze()
        run_server(judge_like, ServerConfig(), log_level="warning")
        assert frozen and frozen[0] > 0
        # frozen objects sit in the permanent generation, which no collection (and gc.get_objects) walks
        assert not any(o is judge_like for o in gc.get_objects())
        request_like: list = []
        request_like.append(request_like)  # a cycle made while serving is still the collector's
        assert any(o is request_like for o in gc.get_objects())
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()


def test_the_switch_interval_is_a_serve_flag_and_must_be_positive():
    from mrjudge.cli import build_parser
    from mrjudge.serve_cmd import server_config_from

    args = build_parser().parse_args(["serve", "--model", "m", "--switch-interval-ms", "50"])
    assert server_config_from(args).switch_interval_ms == 50.0
    assert ServerConfig().switch_interval_ms == 20.0
    with pytest.raises(ValueError, match=r"switch_interval_ms \(0\.0\) must be > 0"):
        ServerConfig(switch_interval_ms=0.0)


def test_the_server_runs_on_uvicorns_c_parser_and_loop_where_installed(monkeypatch):
    """httptools and uvloop are dependencies: `mrjudge serve` uses them, and falls back to h11 and asyncio (what
    uvicorn needs nothing more for) where they are missing, e.g. uvloop on Windows."""
    import importlib.util

    import uvicorn

    used: list[tuple[str, str]] = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self, sockets=None: used.append((self.config.http, self.config.loop))
    )
    monkeypatch.setattr("reward_server.run._log_to_stderr", lambda level, interval_s: None)
    before = sys.getswitchinterval()
    try:
        run_server(object(), ServerConfig(), log_level="warning")
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()
    assert used == [("httptools", "uvloop")]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name in ("httptools", "uvloop") else find_spec(name)
    )
    assert server_protocols() == {"http": "h11", "loop": "asyncio"}
