"""The benchmarks' one kit: a server to start and stop, percentiles, CPU and RSS readings, the JSON line.

Every benchmark measures something and prints one JSON line; these are the pieces more than one of them needs,
written once so that "p99" means one thing and a server is waited for in one way:

    from benchmarks.kit import emit, percentile, start_server, stop_server
    process = start_server([sys.executable, "-m", "mrjudge.cli", "serve", ..., "--port", str(port)], port=port)
    try:
        latencies = ...
    finally:
        stop_server(process)
    emit({"benchmark": "x", "p99_ms": percentile(latencies, 0.99)}, digits=1)

Readings come from /proc (Linux), as the benchmarks have always taken them: no dependency beyond the standard
library and `judge.loopback`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from judge.loopback import ServerNotReady, answers, free_port, wait_until_ready

__all__ = [
    "ROOT",
    "ServerNotReady",
    "add_names_flag",
    "add_repeats_flag",
    "answers",
    "cpu_seconds",
    "emit",
    "free_port",
    "known_names",
    "log_lines",
    "log_text",
    "median_run",
    "peak_rss_mib",
    "percentile",
    "reset_peak_rss",
    "rounded",
    "rss_mib",
    "spread",
    "start_server",
    "stop_server",
]

ROOT = Path(__file__).resolve().parent.parent  # the repository root: servers start here
T = TypeVar("T")


# -- percentiles -----------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least a fraction `q` of `values` at or below it.

    Args:
        values: the measurements, in any order.
        q: a fraction in [0, 1] (p99 is `percentile(xs, 0.99)`, the median `percentile(xs, 0.5)`).

    Returns:
        One of `values` (never an interpolation between two); NaN when there are none.

    >>> xs = [float(x) for x in range(1, 101)]
    >>> percentile(xs, 0.99), percentile(xs, 0.5), percentile(xs, 0.0), percentile(xs, 1.0)
    (99.0, 50.0, 1.0, 100.0)
    >>> percentile([3.0, 1.0, 2.0, 4.0], 0.5)
    2.0
    >>> percentile([], 0.5)
    nan
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q is a fraction in [0, 1], got {q}")
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(round(q * len(ordered), 9))  # round: 0.07 * 100 is 7.000000000000001, rank 7 not 8
    return ordered[max(rank, 1) - 1]


def median_run(runs: Sequence[T], key: Callable[[T], float]) -> T:
    """The run whose `key` is the median of the runs' (the upper one of an even count), as pyperf reports a
    short benchmark repeated: the run itself, so its other figures stay consistent with each other.

    >>> median_run([(1, 5.0), (2, 3.0), (3, 4.0)], key=lambda run: run[1])
    (3, 4.0)
    """
    return sorted(runs, key=key)[len(runs) // 2]


def spread(values: Sequence[float]) -> float:
    """(max − min) / median of repeated runs' figures: 0.1 means they span 10 % of their median.

    >>> round(spread([4.5, 5.0, 5.5]), 3)
    0.2
    """
    return (max(values) - min(values)) / sorted(values)[len(values) // 2]


# -- a server in a subprocess -------------------------------------------------------------------------------------


def start_server(
    command: Sequence[str],
    *,
    port: int,
    health_path: str = "/health",
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300,
) -> subprocess.Popen:
    """Start a server and wait until `GET http://127.0.0.1:{port}{health_path}` answers 200.

    Its stderr goes to a temporary file (`log_text`, `log_lines`), its stdout nowhere. Not a pipe: nobody reads
    a pipe while the load runs, and a server that once logged a line per refused request (and per unscored
    `/get_reward` sample) blocked once 64 KB of them filled it (the fault run stalled between 1,000 and 2,000
    requests).

    Args:
        command: the server's command line (it must listen on `port`).
        port: the loopback port it listens on (`free_port()`).
        health_path: the path that answers 200 once it is ready (`/v1/models` for `vllm serve`).
        cwd: where it runs (default: the repository root).
        env: its environment (default: this process's).
        timeout_s: how long it may take to come up.

    Raises:
        ServerNotReady: it exited while starting, or did not answer in time (then it is killed); the message
            ends with the last 2,000 characters it wrote to stderr.
    """
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        list(command),
        cwd=ROOT if cwd is None else cwd,
        env=None if env is None else dict(env),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    process.log = log  # type: ignore[attr-defined]
    try:
        wait_until_ready(
            f"http://127.0.0.1:{port}{health_path}",
            process=process,
            timeout_s=timeout_s,
            output=lambda: log_text(process)[-2000:],
        )
    except ServerNotReady:
        if process.poll() is None:
            process.kill()
            process.wait()
        raise
    return process


def log_text(process: subprocess.Popen) -> str:
    """What a `start_server` server has written to stderr so far (read with `pread`: the file offset is shared
    with the server, so a seek here would move where it writes)."""
    fd = process.log.fileno()  # type: ignore[attr-defined]
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


def log_lines(process: subprocess.Popen) -> int:
    """How many lines a `start_server` server has written to stderr so far."""
    return log_text(process).count("\n")


def stop_server(process: subprocess.Popen, timeout_s: float = 60) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`; its log stays readable."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# -- readings -------------------------------------------------------------------------------------------------------


def _status_kib(pid: int | None, field: str) -> int:
    status = Path(f"/proc/{'self' if pid is None else pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no {field} in /proc/{pid or 'self'}/status")
    return int(found.group(1))


def rss_mib(pid: int | None = None) -> float:
    """Resident memory now (VmRSS) of process `pid` (default: this one), in MiB."""
    return _status_kib(pid, "VmRSS") / 1024


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident memory (VmHWM) of process `pid` (default: this one) since it started or since
    `reset_peak_rss`, in MiB."""
    return _status_kib(pid, "VmHWM") / 1024


def reset_peak_rss() -> bool:
    """Restart this process's peak (VmHWM) from its RSS now, so a peak leaves the set-up out; Linux does it when
    5 is written to /proc/self/clear_refs. False where that is refused (then the peak includes the set-up)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int | None = None, thread: int | None = None) -> float:
    """CPU seconds (user + system) used so far by process `pid` (default: this one): all its threads, or only
    `thread` (a thread id; `pid` itself is the main thread, where `mrjudge serve` runs its event loop)."""
    if pid is None and thread is None:
        return time.process_time()
    pid = os.getpid() if pid is None else pid
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- flags ---------------------------------------------------------------------------------------------------------


def add_names_flag(
    parser: argparse.ArgumentParser, flag: str, known: Sequence[str], default: Sequence[str] | None = None
) -> None:
    """A comma-separated flag naming which of `known` to run (`--arms`, `--scenarios`), all of them unless
    `default` says otherwise; `known_names` reads it back."""
    parser.add_argument(
        flag,
        default=",".join(known if default is None else default),
        help=f"{flag[2:]} to run, comma-separated ({', '.join(known)})",
    )


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return value


def add_repeats_flag(parser: argparse.ArgumentParser, default: int, help: str) -> None:  # noqa: A002 - argparse's
    """`--repeats N` (N ≥ 1, else a usage error): how many times a benchmark runs each side, in turns, so that
    its figures are medians (`median_run`) and its spread can be read."""
    parser.add_argument("--repeats", type=_at_least_one, default=default, help=help)


def known_names(parser: argparse.ArgumentParser, flag: str, value: str, known: Sequence[str]) -> list[str]:
    """A comma-separated flag's names in order (blanks dropped); one not in `known` is a usage error naming
    the known ones (`--arms`, `--scenarios`, `--parts`)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {', '.join(known)}")
    return names


# -- the JSON line --------------------------------------------------------------------------------------------------


def rounded(value: Any, digits: int = 4) -> Any:
    """`value` with every float in it rounded to `digits` decimals, through nested dicts, lists and tuples
    (tuples become lists, as JSON writes them); everything else as it is, and keys in their order. A float
    smaller than the last decimal keeps `digits` significant figures instead: a small difference (a curve's
    float noise, a logit's drift) must not read as 0.

    >>> rounded({"p99_ms": 12.34567, "runs": [{"s": 0.123456}, 3], "ok": True}, 2)
    {'p99_ms': 12.35, 'runs': [{'s': 0.12}, 3], 'ok': True}
    >>> rounded([3.14159e-06, 0.0, float("inf")], 4)
    [3.142e-06, 0.0, inf]
    """
    if isinstance(value, float):
        if value and abs(value) < 10**-digits:
            return float(f"{value:.{digits}g}")
        return round(value, digits)
    if isinstance(value, Mapping):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item, digits) for item in value]
    return value


def emit(result: Mapping[str, Any], *, digits: int = 4) -> None:
    """Print `result` as the benchmark's one JSON line on stdout, every float rounded to `digits` decimals
    (`rounded`); a figure that needs other rounding is rounded by the caller first."""
    print(json.dumps(rounded(result, digits)), flush=True)
