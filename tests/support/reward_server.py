"""The reward server for tests: in this process on a free loopback port, or as `mrjudge serve` in a subprocess.

with running(max_wait_ms=5) as (url, backend): ...       # the rule judge (`tiny_world.rule_judge`), in a thread
with mrjudge_serve("--model", str(model_dir)) as url: ...  # the CLI; SIGTERM and a clean exit on the way out
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from PIL import Image

from judge.images import image_to_data_url
from judge.judging import Judge, JudgeConfig
from judge.loopback import free_port, wait_until_ready
from reward_server import ServerConfig, create_app
from reward_server.background import serve_in_thread
from tiny_world.rule_judge import SlowRuleBackend


@contextmanager
def serving(backend: Any, judge_config: JudgeConfig, **config: Any) -> Iterator[str]:
    """`create_app` around `backend` with `ServerConfig(**config)`, on a free loopback port; yields its root URL."""
    with serve_in_thread(create_app(Judge(backend, judge_config), ServerConfig(**config)), start_timeout_s=20) as url:
        yield url


@contextmanager
def running(
    backend: Any = None, *, batch_size: int = 64, max_pixels: int | None = None, **config: Any
) -> Iterator[tuple[str, Any]]:
    """A server around the rule judge (two display orders) on a free loopback port; yields (URL, backend)."""
    backend = backend or SlowRuleBackend()
    with serving(backend, JudgeConfig(orders=2, batch_size=batch_size, max_pixels=max_pixels), **config) as url:
        yield url, backend


def data_url(size: tuple[int, int] = (8, 8), colour: tuple[int, int, int] = (200, 30, 30)) -> str:
    return image_to_data_url(Image.new("RGB", size, colour))


def wait_healthy(process: subprocess.Popen, base: str, timeout_s: float = 120) -> None:
    """Return once `base/health` answers 200; fail with the process's output if it exits or never does."""

    def output() -> str:
        stream = process.stdout or process.stderr
        return stream.read().decode() if stream and process.poll() is not None else ""

    wait_until_ready(f"{base}/health", process=process, timeout_s=timeout_s, output=output)


@contextmanager
def mrjudge_serve(*args: str) -> Iterator[str]:
    """`mrjudge serve ARGS` on a free port, once healthy; yields its root URL. On the way out it is sent
    SIGTERM and must exit cleanly (uvicorn shuts down gracefully, then re-raises the signal it caught)."""
    port = free_port()
    command = [sys.executable, "-m", "mrjudge.cli", "serve", *args, "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(process, base)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=30) in (0, -signal.SIGTERM)
        finally:
            if process.poll() is None:
                process.kill()


ITEM = {
    "id": "q1",
    "question": "What colour is the image?",
    "candidates": ["It is red.", "It is blue."],
    "image": [data_url((84, 84))],
}


def ask(url: str, model: str | None = None, timeout: float = 120.0) -> tuple[str, list[str], dict[str, Any]]:
    """`ITEM` judged by the server at `url` (as the adapter revision `model`, when given): the `model` that
    answered, the verdict's raw outputs and the timing."""
    body = {"items": [ITEM], **({"model": model} if model else {})}
    response = httpx.post(f"{url}/v1/judge", json=body, timeout=timeout)
    assert response.status_code == 200, response.text
    payload = response.json()
    return payload["model"], payload["verdicts"][0]["raw"], payload["timing"]
