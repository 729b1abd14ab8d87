"""benchmarks.kit: percentiles of one meaning, a server that writes much to stderr does not block on it (nor
does a dead one make the wait last), the readings, and the JSON line rounded all the way down."""

from __future__ import annotations

import doctest
import json
import os
import sys

import pytest

import benchmarks.kit
from benchmarks.kit import (
    ServerNotReady,
    add_repeats_flag,
    cpu_seconds,
    emit,
    free_port,
    log_lines,
    log_text,
    peak_rss_mib,
    percentile,
    rss_mib,
    start_server,
    stop_server,
)

# Writes 256 KB to stderr (four times a pipe's buffer) before it serves `/health`: the fault run's server logs a
# line per unscored `/get_reward` sample, and with stderr on an unread pipe it stalled once 64 KB were written.
CHATTY_SERVER = """
import http.server, sys
for _ in range(4096):
    sys.stderr.write("x" * 63 + "\\n")
sys.stderr.flush()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        sys.stderr.write("request\\n")

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_the_doctests_pass():
    assert doctest.testmod(benchmarks.kit).failed == 0


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 0.99, 5.0),  # one value is every percentile
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),  # nearest rank: the lower middle, never an interpolation
        ([1.0, 2.0, 3.0, 4.0], 0.51, 3.0),  # just past half: the next rank
        ([float(x) for x in range(1, 101)], 0.07, 7.0),  # 0.07 * 100 is 7.000000000000001 in floats
        ([float(x) for x in range(1, 1001)], 0.99, 990.0),
        ([3.0, 1.0, 2.0], 0.0, 1.0),  # q = 0: the smallest
        ([3.0, 1.0, 2.0], 1.0, 3.0),  # q = 1: the largest
    ],
)
def test_percentile_is_the_nearest_rank(values, q, expected):
    assert percentile(values, q) == expected


def test_percentile_takes_a_fraction_not_a_percent():
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0, 2.0], 99)


def test_a_server_that_writes_much_to_stderr_comes_up_and_stops():
    port = free_port()
    process = start_server([sys.executable, "-c", CHATTY_SERVER, str(port)], port=port, timeout_s=60)
    try:
        assert process.poll() is None
        assert log_lines(process) >= 4096
    finally:
        stop_server(process)
    assert process.returncode is not None
    assert log_text(process).startswith("x" * 63 + "\n")  # the log outlives the server


def test_a_server_that_dies_while_starting_fails_the_wait_at_once_with_what_it_wrote():
    port = free_port()
    command = [sys.executable, "-c", "import sys; sys.stderr.write('no model here'); sys.exit(3)"]
    with pytest.raises(ServerNotReady, match="no model here"):
        start_server(command, port=port, timeout_s=60)


def test_a_server_that_never_answers_is_killed_after_the_timeout():
    port = free_port()
    with pytest.raises(ServerNotReady, match="did not answer"):
        start_server([sys.executable, "-c", "import time; time.sleep(60)"], port=port, timeout_s=0.5)


def test_readings_of_this_process_and_of_another():
    assert 1 < rss_mib() <= peak_rss_mib()
    assert rss_mib(os.getpid()) > 1
    spent = cpu_seconds()
    sum(i * i for i in range(300_000))
    assert cpu_seconds() > spent
    assert cpu_seconds(os.getpid()) > 0 and cpu_seconds(os.getpid(), thread=os.getpid()) > 0


def test_emit_prints_one_line_with_every_float_rounded_and_the_keys_in_order(capsys):
    emit({"b": 1 / 3, "a": {"p99": [2 / 3, (0.123456, 7)], "ok": True}, "none": None, "n": 3}, digits=3)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out) == {"b": 0.333, "a": {"p99": [0.667, [0.123, 7]], "ok": True}, "none": None, "n": 3}
    assert list(json.loads(out)) == ["b", "a", "none", "n"]


def test_repeats_flag_takes_one_or_more_and_refuses_zero(capsys):
    """Every benchmark that takes medians shares one `--repeats`; 0 is a usage error, not an empty median."""
    import argparse

    parser = argparse.ArgumentParser(prog="bench")
    add_repeats_flag(parser, 5, "runs of each side")
    assert parser.parse_args([]).repeats == 5
    assert parser.parse_args(["--repeats", "2"]).repeats == 2
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--repeats", bad])
    assert "argument --repeats: a whole number of at least 1, not 'two'" in capsys.readouterr().err
