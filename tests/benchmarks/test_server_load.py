"""benchmarks/server_load.py's server start: a server that writes a lot to stderr must not block on it."""

from __future__ import annotations

import sys

from benchmarks.server_load import free_port, start_server, stop_server

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
