"""Servers on this machine: a free loopback port, and waiting until a started server answers.

Every place that starts a server of its own (`vllm serve`, `mrjudge serve`, the benchmarks' servers, the
tests') needs the same two things, and the waiting loop has one trap worth writing once: a server that
dies while starting must fail the wait at once with what it printed, not after the whole timeout.

    port = free_port()
    process = subprocess.Popen([..., "--port", str(port)], stderr=log)
    wait_until_ready(f"http://127.0.0.1:{port}/health", process=process, output=lambda: log_tail(log))
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

__all__ = ["ServerNotReady", "answers", "free_port", "wait_until_ready"]


class ServerNotReady(RuntimeError):
    """The server exited while starting, or did not answer in time; the message carries its output."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""A server on this machine is asked directly, whatever `$http_proxy` says."""


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """True when `GET url` answers 200 now; any connection error, timeout or other status is False."""
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return response.status == 200
    except (OSError, urllib.error.HTTPError):
        return False


def wait_until_ready(
    url: str,
    *,
    process: subprocess.Popen | None = None,
    timeout_s: float = 300.0,
    interval_s: float = 0.2,
    output: Callable[[], str] | None = None,
) -> float:
    """Block until `GET url` answers 200; returns the seconds it took.

    Args:
        url: the readiness URL (`…/health` for the reward server, `…/v1/models` for `vllm serve`).
        process: the server's process; when it exits first, the wait fails at once.
        timeout_s: how long to wait in all.
        interval_s: the pause between tries.
        output: what the server printed so far (a log's tail), put in the error.

    Raises:
        ServerNotReady: the process exited, or `url` did not answer within `timeout_s`.
    """
    start = time.monotonic()
    while True:
        if process is not None and process.poll() is not None:
            said = output() if output else ""
            raise ServerNotReady(f"the server exited with {process.returncode} while starting:\n{said}".rstrip())
        if answers(url):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            said = output() if output else ""
            raise ServerNotReady(f"{url} did not answer within {timeout_s:.0f} s:\n{said}".rstrip())
        time.sleep(interval_s)
