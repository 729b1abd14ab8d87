"""benchmarks/server_load.py: a server that writes a lot to stderr must not block on it, and the fault run's
server summarises its refusals in the log instead of writing a line per request."""

from __future__ import annotations

import argparse
import sys

from benchmarks.server_load import fault_run, free_port, start_server, stop_server

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


def test_a_server_that_writes_much_to_stderr_comes_up_and_stops():
    port = free_port()
    process = start_server([sys.executable, "-c", CHATTY_SERVER, str(port)], port, timeout_s=60)
    try:
        assert process.poll() is None
    finally:
        stop_server(process)
    assert process.returncode is not None


def test_the_fault_run_gets_a_4xx_for_every_bad_request_and_its_server_logs_a_summary_not_a_line_each():
    """The fault run's server logs at `mrjudge serve`'s default level (info); 300 requests (30 bad, 100 unscored
    `/get_reward` samples) leave a few summary lines in its log, not one per request."""
    args = argparse.Namespace(fault_requests=300, clients=8)
    faults = fault_run(args)
    assert faults["bad_4xx"] == faults["bad_total"] == 30 and faults["good_200"] == faults["good_total"] == 270
    assert faults["5xx"] == 0 and faults["alive"]
    # The timed run's lines: one summary per reason at shutdown (the first of each was logged in the warm-up),
    # and uvicorn's own shutdown lines.
    assert faults["log_lines"] <= 12
