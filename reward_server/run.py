"""Run the reward server in the foreground with a shutdown that ends within `shutdown_grace_s`.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and lets in-flight requests finish for the
grace less `SHUTDOWN_RESERVE_S`; past that it cancels them, which gives their judge work up (the batch
stops at its next backend call), and the batcher cancels what is still queued. A watchdog armed by the
signal ends the process at the grace whatever is still running (a backend call that never returns).

    run_server(create_app(judge, config), config, log_level="info")
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
import socket
import sys
import threading
from typing import Any

from reward_server.config import ServerConfig

__all__ = ["SHUTDOWN_RESERVE_S", "run_server", "server_protocols"]

SHUTDOWN_RESERVE_S = 2.0
"""Seconds of the grace kept back from uvicorn's drain for cancelling, closing and exiting."""

log = logging.getLogger("mrjudge.server")


def run_server(app: Any, config: ServerConfig, *, log_level: str = "info", sock: socket.socket | None = None) -> None:
    """Serve `app` on `config.host:config.port` (or on `sock`, already bound) until a signal; returns after a
    graceful shutdown."""
    import uvicorn

    class BoundedServer(uvicorn.Server):
        """uvicorn's server with a watchdog: the first exit signal arms an `os._exit` at the grace."""

        watchdog: threading.Timer | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if self.watchdog is None:
                self.watchdog = threading.Timer(config.shutdown_grace_s, _force_exit, (config.shutdown_grace_s,))
                self.watchdog.daemon = True
                self.watchdog.start()

    # The judge thread and the event loop share one GIL; at Python's 5 ms a thread waiting for it makes the
    # holder drop it within 5 ms, so every wake-up of the loop cut into the judge's Python-bound batches.
    sys.setswitchinterval(config.switch_interval_ms / 1000)
    # A served judge keeps hundreds of thousands of objects the collector tracks alive for good (~370,000 for the
    # tiny one: the model's modules and parameters, the tokenizer, the libraries' own). Under load, full
    # collections came every few seconds and each walked them all, 165-210 ms holding the GIL: a stall for every
    # request in flight and for the judge thread. Frozen after one last collection, they leave the collector's
    # generations (full passes 4-7 ms); what a request allocates is still collected.
    gc.collect()
    gc.freeze()
    drain_s = max(0.5, config.shutdown_grace_s - SHUTDOWN_RESERVE_S)
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=config.access_log,
        timeout_graceful_shutdown=drain_s,
        **server_protocols(),
    )
    _log_to_stderr(log_level, config.log_interval_s)
    BoundedServer(uvicorn_config).run(sockets=[sock] if sock is not None else None)


def server_protocols() -> dict[str, str]:
    """uvicorn's HTTP parser and event loop: httptools and uvloop (C; dependencies of mr-judge) where installed,
    else h11 and asyncio (pure Python). Named rather than left to uvicorn's "auto", so a test can hold it.

    Why: with a Python-bound judge the event loop's work is taken from the judge (one GIL, the same cores). With
    the tiny judge at saturation the loop used 0.58 and 0.79 ms of CPU a judgment on these, 0.88 and 0.89 on h11
    and asyncio, side by side (docs/reward-server.md); vLLM's server runs on them too.
    """
    has = importlib.util.find_spec
    return {"http": "httptools" if has("httptools") else "h11", "loop": "uvloop" if has("uvloop") else "asyncio"}


def _log_to_stderr(level: str, interval_s: float) -> None:
    """The server's own lines (`mrjudge.*`: refusal and unscored summaries, failures; `judge.reward.audit`: the
    reward audit's) on stderr at `level`, as uvicorn's are, and uvicorn's per-connection warnings rate-limited
    (`RateLimitFilter`): neither can be made to write a line per request. A logger the embedding program has
    configured (or its root logger) is left alone."""
    from reward_server.log_summary import RateLimitFilter

    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, RateLimitFilter) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(RateLimitFilter(interval_s))
    if logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("mrjudge", "judge.reward.audit"):  # the reward audit's own lines: a failing auditor, its alarm
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level.upper())


def _force_exit(grace_s: float) -> None:
    print(
        f"mrjudge serve: still running {grace_s:g} s after the exit signal (shutdown_grace_s); exiting", file=sys.stderr
    )
    sys.stderr.flush()
    os._exit(1)
