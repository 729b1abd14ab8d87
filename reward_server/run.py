"""Run the reward server in the foreground with a shutdown that ends within `shutdown_grace_s`.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and lets in-flight requests finish for the
grace less `SHUTDOWN_RESERVE_S`; past that it cancels them, which gives their judge work up (the batch
stops at its next backend call), and the batcher cancels what is still queued. A watchdog armed by the
signal ends the process at the grace whatever is still running (a backend call that never returns).

    run_server(create_app(judge, config), config, log_level="info")
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from typing import Any

from reward_server.config import ServerConfig

__all__ = ["SHUTDOWN_RESERVE_S", "run_server"]

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

    drain_s = max(0.5, config.shutdown_grace_s - SHUTDOWN_RESERVE_S)
    uvicorn_config = uvicorn.Config(
        app, host=config.host, port=config.port, log_level=log_level, timeout_graceful_shutdown=drain_s
    )
    BoundedServer(uvicorn_config).run(sockets=[sock] if sock is not None else None)


def _force_exit(grace_s: float) -> None:
    print(
        f"mrjudge serve: still running {grace_s:g} s after the exit signal (shutdown_grace_s); exiting", file=sys.stderr
    )
    sys.stderr.flush()
    os._exit(1)
