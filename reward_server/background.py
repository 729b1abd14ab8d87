"""Run an ASGI app (the reward server, a stand-in model server) with uvicorn in a background thread.

For programs that need a server for a while and then carry on: the demo's policy stage, tests, notebooks.
`mrjudge serve` runs uvicorn in the foreground instead.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["serve_in_thread"]


@contextmanager
def serve_in_thread(
    app: Any, host: str = "127.0.0.1", *, start_timeout_s: float = 30.0, port: int | None = None
) -> Iterator[str]:
    """Run `app` with uvicorn on `port` (default: a free one) of `host` in a daemon thread; yields its root URL.

    On exit the server is asked to stop (in-flight requests finish) and the thread joined.
    """
    import uvicorn

    if port is None:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="mrjudge-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
