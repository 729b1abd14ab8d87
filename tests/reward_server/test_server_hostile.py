"""Hostile clients against a real reward server on loopback: small requests that must not take it down.

Each probe is sent on one keep-alive connection (`http.client`, which never reconnects silently) and must
get its 4xx naming the field, and a good request on the same socket must then succeed: a refusal never
resets the connection. Memory, cancellation, /health, shutdown and the bind rule are checked as a client
or an operator would see them. Bodies are encoded with `json.dumps` (ASCII escapes), so a lone surrogate
reaches the server as JSON allows it: `"\\ud800"`.
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from PIL import Image

from reward_server import ServerConfig
from tests.support.reward_server import free_port, running, wait_healthy
from tiny_world.rule_judge import SlowRuleBackend

ROOT = Path(__file__).resolve().parents[2]
LIMITS = dict(
    max_request_items=300,
    max_request_pixels=40_000_000,
    max_body_bytes=2 * 2**20,
    max_image_bytes=512 * 1024,
    body_timeout_s=1.0,
    max_json_values=50_000,
    max_wait_ms=5,
)


MAX_PIXELS = 1_003_520  # the judge's image size (1280 * 28 * 28): the server shrinks images to it as it decodes


@pytest.fixture(scope="module")
def hostile():
    with running(max_pixels=MAX_PIXELS, **LIMITS) as (url, backend):
        yield url, backend


class Connection:
    """One HTTP/1.1 keep-alive connection; `socket` tells whether the server kept it open."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.http = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        self.http.connect()
        self.socket = self.http.sock

    def post(self, path: str, body: dict | bytes) -> tuple[int, dict, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.http.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = self.http.getresponse()
        payload = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(payload)

    def get(self, path: str) -> tuple[int, dict]:
        self.http.request("GET", path)
        response = self.http.getresponse()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.http.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def encoded(image: Image.Image, fmt: str, **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


@functools.cache
def one_bit_png(width: int, height: int) -> str:
    """A ~9 KB one-bit PNG of a 16-megapixel canvas: the issue's bomb-like image (1 bit on the wire, 3 bytes
    a pixel once converted to RGB at full size)."""
    return "data:image/png;base64," + _b64(encoded(Image.new("1", (width, height), 1), "PNG"))


def small(fmt: str, mime: str | None = None, **save) -> str:
    mode = "P" if fmt == "GIF" else "RGB"
    data = encoded(Image.new(mode, (40, 30), 1 if mode == "P" else (200, 30, 30)), fmt, **save)
    return f"data:{mime or 'image/' + fmt.lower()};base64," + _b64(data)


def animated_gif() -> str:
    frames = [Image.new("RGB", (20, 20), c) for c in ("red", "blue", "green")]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    return "data:image/gif;base64," + _b64(buffer.getvalue())


def reward(**overrides) -> dict:
    return {"prompt": "Q?", "responses": ["score=1", "score=2"], **overrides}


def items(*rows: dict) -> dict:
    return {"items": [{"id": i, "question": "Q?", "candidates": ["a", "b"], **row} for i, row in enumerate(rows)]}


def get_reward(n: int = 2, **overrides) -> dict:
    return {"query": [f"P: score={i}" for i in range(n)], "prompts": ["P: "] * n, **overrides}


SURROGATE = "\ud800"
TIFF = "data:image/tiff;base64," + _b64(encoded(Image.new("RGB", (8, 8)), "TIFF"))
ICO = "data:image/x-icon;base64," + _b64(encoded(Image.new("RGB", (16, 16)), "ICO"))
EPS = "data:image/eps;base64," + _b64(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")

PROBES = [
    # (endpoint, body, status, field, words in the message)
    # 1. memory: 8 one-bit 16-megapixel PNGs; the budget is crossed at the third header, nothing decoded
    (
        "/v1/reward",
        reward(images=[one_bit_png(4000, 4000 - i) for i in range(8)]),
        413,
        "images[2]",
        "max_request_pixels",
    ),
    (
        "/v1/judge",
        items(*({"image": [one_bit_png(4000, 3990 - i)]} for i in range(4))),
        413,
        "items[2].image[0]",
        "max_request_pixels",
    ),
    (
        "/get_reward",
        get_reward(3, images=[[one_bit_png(4000, 3980 - i)] for i in range(3)]),
        413,
        "images[2][0]",
        "max_request_pixels",
    ),
    # 2. work: 200 queries sharing one prompt are a 19,900-item round robin
    ("/get_reward", get_reward(200, tournament="round_robin"), 413, "query", "19900 judge items"),
    (
        "/v1/reward",
        reward(responses=[f"r{i}" for i in range(30)], mode="tournament"),
        413,
        "responses",
        "max_request_items (300)",
    ),
    ("/v1/judge", items(*({} for _ in range(301))), 413, "items", "max_request_items"),
    # 4. text: a lone surrogate anywhere
    ("/v1/reward", reward(prompt=f"Q{SURROGATE}?"), 422, "prompt", "UTF-8"),
    ("/v1/reward", reward(responses=["a", SURROGATE]), 422, "responses[1]", "UTF-8"),
    ("/v1/reward", reward(responses=["a"], reference=SURROGATE), 422, "reference", "UTF-8"),
    ("/v1/reward", reward(id=SURROGATE), 422, "id", "UTF-8"),
    ("/v1/reward", reward(model=SURROGATE), 422, "model", "UTF-8"),
    ("/v1/reward", {**reward(), f"x{SURROGATE}": 1}, 422, "'x\\ud800'", "field name"),
    ("/v1/judge", items({"question": SURROGATE}), 422, "items[0].question", "UTF-8"),
    ("/v1/judge", items({"candidates": ["a", f"b{SURROGATE}"]}), 422, "items[0].candidates[1]", "UTF-8"),
    ("/v1/judge", items({"meta": {"note": SURROGATE}}), 422, "items[0].meta.note", "UTF-8"),
    ("/get_reward", get_reward(prompts=[f"P{SURROGATE}", "P: "]), 422, "prompts[0]", "UTF-8"),
    ("/get_reward", get_reward(labels=[None, SURROGATE]), 422, "labels[1]", "UTF-8"),
    # 6. formats: an allow-list, checked before any decoder runs; data URLs must say an image type
    ("/v1/reward", reward(images=[TIFF]), 415, "images[0]", "TIFF images are not accepted"),
    ("/v1/reward", reward(images=[ICO]), 415, "images[0]", "ICO images are not accepted"),
    ("/v1/reward", reward(images=[EPS]), 415, "images[0]", "EPS images are not accepted"),
    ("/v1/reward", reward(images=[small("PNG", "text/plain")]), 415, "images[0]", "'text/plain'"),
    ("/v1/judge", items({"image": small("PNG", "application/octet-stream")}), 415, "items[0].image", "image type"),
    # 7. echoes are short; unknown fields are refused everywhere
    ("/v1/reward", reward(mode="x" * 100_000), 422, "mode", "(100000 characters)"),
    ("/v1/judge", items({"colour": "red"}), 422, "items[0].colour", "unknown field"),
    ("/get_reward", get_reward(extra=1), 422, "extra", "unknown field"),
    # a body of many tiny values, refused before the parser (which holds the GIL) sees it
    ("/v1/reward", reward(padding=[0] * 60_000), 413, "body", "max_json_values (50000)"),
]


@pytest.mark.parametrize(("path", "body", "status", "field", "words"), PROBES, ids=[f"{p[0]}-{p[3]}" for p in PROBES])
def test_probe_gets_its_4xx_and_the_connection_stays_usable(hostile, path, body, status, field, words):
    url, _ = hostile
    connection = Connection(url)
    try:
        got, headers, answer = connection.post(path, body)
        assert got == status, answer
        error = answer["error"]
        assert error["field"] == field and words in error["message"], error
        assert len(error["message"]) <= 1000 and len(json.dumps(answer)) < 2000
        assert connection.post("/v1/reward", reward())[0] == 200
        assert connection.http.sock is connection.socket  # the same connection answered both
    finally:
        connection.close()


@pytest.mark.parametrize(
    "image",
    [
        small("PNG"),
        small("JPEG"),
        small("WEBP"),
        small("BMP"),
        small("GIF"),
        animated_gif(),
        small("JPEG", "image/jpg"),
    ],
    ids=["png", "jpeg", "webp", "bmp", "gif", "animated-gif", "jpg-mime"],
)
def test_allowed_formats_are_judged(hostile, image):
    url, _ = hostile
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.post("/v1/reward", json=reward(images=[image]))
    assert response.status_code == 200, response.text


def test_large_images_are_shrunk_as_decoded(hostile):
    url, backend = hostile
    big_jpeg = "data:image/jpeg;base64," + _b64(encoded(Image.new("RGB", (4000, 3000), "red"), "JPEG"))
    images = [one_bit_png(4000, 3000), big_jpeg]  # 24 megapixels: inside the request budget
    with httpx.Client(base_url=url, timeout=60) as client:
        before = len(backend.image_sizes)
        response = client.post("/v1/reward", json=reward(images=images))
    assert response.status_code == 200, response.text
    sizes = backend.image_sizes[before:]
    assert sizes and all(w * h <= MAX_PIXELS for w, h in sizes), sizes
    assert set(sizes) == {(1148, 840)}  # Qwen's rule: 4:3 kept, sides multiples of 28


def test_slow_body_gets_408_within_the_deadline(hostile):
    url, _ = hostile
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        start = time.monotonic()
        received = b""
        sock.settimeout(0.3)
        while b"\r\n\r\n" not in received and time.monotonic() - start < 10:
            try:
                sock.sendall(b" ")  # one byte every 0.3 s
                received += sock.recv(4096)
            except TimeoutError:
                continue
        elapsed = time.monotonic() - start
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert b"connection: close" in received.lower()
    assert elapsed < 1.0 + 2.0  # body_timeout_s, plus slack for a loaded machine


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def test_memory_after_50_bomb_like_requests_stays_within_200_mb(hostile):
    url, _ = hostile
    connection = Connection(url)
    try:
        assert connection.post("/v1/reward", reward(images=[one_bit_png(4000, 2000)]))[0] == 200  # warm-up
        start = _rss_mb()
        statuses = []
        for i in range(50):
            if i % 5 == 0:  # under the budget: two 16-megapixel canvases decoded (and shrunk) for real
                body = reward(images=[one_bit_png(4000, 4000 - i), one_bit_png(4000, 3999 - i)], id=str(i))
            else:  # the request: 8 of them, refused at the header of the third
                body = reward(images=[one_bit_png(4000, 4000 - j) for j in range(8)], id=str(i))
            statuses.append(connection.post("/v1/reward", body)[0])
        end = _rss_mb()
    finally:
        connection.close()
    assert statuses.count(200) == 10 and statuses.count(413) == 40
    assert end - start < 200, f"RSS grew {end - start:.0f} MB"


# -- cancellation and /health ----------------------------------------------------------------------------


def _metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=30).text


def _long_job(n: int = 12) -> bytes:
    """A round robin of `n` responses: n(n-1)/2 items, judged 2 per backend call."""
    return json.dumps(reward(responses=[f"score={i}" for i in range(n)], mode="tournament")).encode()


def test_disconnected_clients_job_stops():
    backend = SlowRuleBackend(delay_s=0.2)
    with running(backend, batch_size=2, max_pixels=MAX_PIXELS) as (url, _):
        parsed = urlparse(url)
        body = _long_job()  # 66 items: 33 backend calls, ~7 s of judging
        with socket.create_connection((parsed.hostname, parsed.port), timeout=10) as sock:
            head = f"POST /v1/reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            assert backend.started.wait(10)
        time.sleep(1.0)  # the next chunk boundary passes
        calls = len(backend.batches)
        time.sleep(0.6)
        assert len(backend.batches) == calls < 33  # stopped, and stays stopped
        text = _metrics(url)
        assert 'mrjudge_cancelled_requests_total{reason="disconnect"} 1' in text
        assert "mrjudge_stopped_batches_total 1" in text
        assert 'endpoint="/v1/reward",status="499"' in text and 'status="200"' not in text
        assert httpx.post(f"{url}/v1/reward", json=reward(), timeout=30).status_code == 200


def test_timed_out_job_stops_and_health_degrades():
    backend = SlowRuleBackend(delay_s=0.2)
    with running(backend, batch_size=2, max_pixels=MAX_PIXELS, request_timeout_s=0.5) as (url, _):
        response = httpx.post(f"{url}/v1/reward", content=_long_job(), timeout=30)
        assert response.status_code == 504 and "cancelled" in response.json()["error"]["message"]
        time.sleep(0.5)
        calls = len(backend.batches)
        assert calls < 10
        time.sleep(0.4)
        assert len(backend.batches) == calls
        assert 'mrjudge_cancelled_requests_total{reason="timeout"} 1' in _metrics(url)
        # One backend call longer than the request timeout: the worker is stuck, and /health says so.
        backend.delay_s = 2.0
        with httpx.Client(base_url=url, timeout=30) as client:
            client.post("/v1/reward", json=reward())  # 504 after 0.5 s; its single call runs on
            time.sleep(0.3)
            health = client.get("/health")
            assert health.status_code == 503 and health.json()["status"] == "degraded", health.text
            assert "request_timeout_s" in health.json()["reason"]
            time.sleep(1.5)
            backend.delay_s = 0.0
            health = client.get("/health")
            assert health.status_code == 200 and health.json()["status"] == "ok"


# -- shutdown and start-up ---------------------------------------------------------------------------------


def test_sigterm_with_a_long_job_exits_within_the_grace_period():
    port, grace = free_port(), 3.0
    command = [sys.executable, "-m", "tests.support.slow_server", str(port), "--grace", str(grace), "--delay", "0.5"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, base, timeout_s=60)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            body = _long_job(40)  # 780 items: 390 backend calls of 0.5 s, over 3 minutes of judging
            head = f"POST /v1/reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            time.sleep(1.0)
            start = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
            elapsed = time.monotonic() - start
            answer = sock.recv(4096)
    finally:
        if process.poll() is None:
            process.kill()
    assert elapsed < grace, f"exited {elapsed:.1f} s after SIGTERM"
    assert code == -signal.SIGTERM, process.stderr.read().decode()[-2000:]
    assert answer.startswith(b"HTTP/1.1 503 ") and b"shutting_down" in answer, answer  # told to retry


def _serve(*flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mrjudge.cli", "serve", "--model", "/no/such/model", *flags]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_network_address_without_a_key_refuses_to_start():
    refused = _serve("--host", "0.0.0.0")
    assert refused.returncode != 0 and "no API key is set" in refused.stderr
    assert "--allow-unauthenticated" in refused.stderr and "cannot load the judge" not in refused.stderr
    # Allowed on purpose: it goes on to load the model (which is missing here) after a loud warning.
    allowed = _serve("--host", "0.0.0.0", "--allow-unauthenticated")
    assert "WITHOUT an API key" in allowed.stderr and "cannot load the judge" in allowed.stderr


def test_a_key_from_the_environment_or_a_file_is_enough(tmp_path, monkeypatch):
    from mrjudge.cli import build_parser
    from mrjudge.serve_cmd import server_config_from

    def config(*flags: str) -> ServerConfig:
        return server_config_from(build_parser().parse_args(["serve", "--model", "m", "--host", "0.0.0.0", *flags]))

    monkeypatch.setenv("MRJUDGE_SERVER_API_KEY", "from-env")
    assert config().api_key == "from-env"
    (tmp_path / "key").write_text("from-file\n")
    assert config("--api-key-file", str(tmp_path / "key")).api_key == "from-file"  # the file wins over the env


def test_api_key_file(tmp_path):
    (tmp_path / "key").write_text("s3cret\n")
    assert ServerConfig(api_key_file=str(tmp_path / "key"), host="0.0.0.0").api_key == "s3cret"
    (tmp_path / "empty").write_text(" \n")
    with pytest.raises(ValueError, match="is empty"):
        ServerConfig(api_key_file=str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="not both"):
        ServerConfig(api_key="a", api_key_file=str(tmp_path / "key"))
    with pytest.raises(ValueError, match="no API key"):
        ServerConfig(host="10.1.2.3")
    assert ServerConfig(host="0.0.0.0", allow_unauthenticated=True).api_key is None
    assert re.search("api_key_file", ServerConfig.__dataclass_fields__["api_key"].metadata["help"])
