"""What the load's clients send: the throughput run's reward bodies, the fault run's good and bad requests, and
the hostile run's probes. Pure data: no sockets here."""

from __future__ import annotations

import base64
import io
import json
import random
import struct
import zlib

from PIL import Image

from judge.images import image_to_data_url

KEY = "bench-key"
"""The API key of the fault and hostile runs' server (`instant_server`)."""

BAD_KINDS = (
    "invalid_base64",
    "truncated_json",
    "wrong_types",
    "oversized_image",
    "decompression_bomb",
    "100_candidates",
    "missing_key",
    "wrong_key",
)
"""The fault run's bad requests, each a tenth of them; every one must get a 4xx."""


def data_url(size: int, seed: int) -> str:
    """A `size` x `size` PNG of one colour (drawn from `seed`), as a data URL."""
    return image_to_data_url(
        Image.new("RGB", (size, size), tuple(random.Random(seed).randrange(256) for _ in range(3)))
    )


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims `width` x `height` pixels: a decompression bomb's calling card."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


def reward_body(c: int, n: int, image: str) -> dict:
    """Client `c`'s `n`-th `/v1/reward` body: two responses to one question about `image` (one MC item)."""
    return {
        "prompt": "What colour is the image?",
        "images": [image],
        "responses": [f"It is colour {c}-{n}.", f"It is not colour {c}-{n}."],
    }


def good_request(i: int, image: str) -> tuple[str, bytes, dict]:
    """The `i`-th good request of the fault and hostile runs, `(path, body, headers)`: in turn a `/v1/reward`,
    a `/v1/judge` and a `/get_reward` (whose fourth sample, alone in its prompt, stays unscored)."""
    kind = i % 3
    if kind == 0:
        body = {"prompt": f"Q{i}?", "images": [image], "responses": [f"score={i % 7}", "score=3", "score=5"]}
        return "/v1/reward", json.dumps(body).encode(), {}
    if kind == 1:
        item = {"id": i, "question": "Q?", "image": image, "candidates": ["score=1", f"score={i % 5}"]}
        return "/v1/judge", json.dumps({"items": [item]}).encode(), {}
    prompts = [f"P{i}:"] * 3 + [f"P{i}b:"]
    body = {"query": [p + f"score={j}" for j, p in enumerate(prompts)], "prompts": prompts, "labels": [None] * 4}
    return "/get_reward", json.dumps(body).encode(), {}


def bad_request(kind: str, image: str, big_image: str) -> tuple[str, bytes, dict]:
    """A bad request of one of `BAD_KINDS`, `(path, body, headers)`; an empty `Authorization` means none."""
    good = {"prompt": "Q?", "images": [image], "responses": ["score=1", "score=2"]}
    if kind == "invalid_base64":
        return "/v1/reward", json.dumps({**good, "images": ["data:image/png;base64,%%%not-base64%%%"]}).encode(), {}
    if kind == "truncated_json":
        return "/v1/reward", json.dumps(good).encode()[:-7], {}
    if kind == "wrong_types":
        return "/v1/reward", json.dumps({**good, "responses": ["score=1", 2, None]}).encode(), {}
    if kind == "oversized_image":
        return "/v1/reward", json.dumps({**good, "images": [big_image]}).encode(), {}
    if kind == "decompression_bomb":
        bomb = "data:image/png;base64," + base64.b64encode(png_claiming(50_000, 50_000)).decode()
        return "/v1/reward", json.dumps({**good, "images": [bomb]}).encode(), {}
    if kind == "100_candidates":
        item = {"id": 1, "question": "Q?", "candidates": [f"c{j}" for j in range(100)]}
        return "/v1/judge", json.dumps({"items": [item]}).encode(), {}
    if kind == "missing_key":
        return "/v1/reward", json.dumps(good).encode(), {"Authorization": ""}
    assert kind == "wrong_key", f"unknown bad request kind {kind!r}"
    return "/v1/reward", json.dumps(good).encode(), {"Authorization": "Bearer not-the-key"}


def one_bit_png(width: int, height: int) -> str:
    return image_to_data_url(Image.new("1", (width, height), 1))


def hostile_bodies() -> dict[str, tuple[str, bytes]]:
    """The issue's probes, each `(path, body)`; every one must be refused with a 4xx."""
    bomb = [one_bit_png(4000, 4000 - i) for i in range(8)]  # ~9 KB each, 16 megapixels each
    tiff, eps = io.BytesIO(), b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    Image.new("RGB", (8, 8)).save(tiff, "TIFF")
    png = data_url(8, 2).split(",", 1)[1]
    reward = {"prompt": "Q?", "responses": ["score=1", "score=2"]}
    item = {"id": 1, "question": "Q?", "candidates": ["a", "b"]}
    bodies = {
        "bomb_images": ("/v1/reward", {**reward, "images": bomb}),
        "round_robin_19900": (
            "/get_reward",
            {"query": [f"P: {i}" for i in range(200)], "prompts": ["P: "] * 200, "tournament": "round_robin"},
        ),
        "surrogate_prompt": ("/v1/reward", {**reward, "prompt": "Q\ud800?"}),
        "surrogate_key": ("/v1/judge", {"items": [{**item, "\ud800": 1}]}),
        "surrogate_get_reward": ("/get_reward", {"query": ["P: a", "P: b"], "prompts": ["P\ud800", "P: "]}),
        "tiff": (
            "/v1/reward",
            {**reward, "images": ["data:image/tiff;base64," + base64.b64encode(tiff.getvalue()).decode()]},
        ),
        "eps": ("/v1/reward", {**reward, "images": ["data:image/eps;base64," + base64.b64encode(eps).decode()]}),
        "text_data_url": ("/v1/reward", {**reward, "images": ["data:text/plain;base64," + png]}),
        "long_mode": ("/v1/reward", {**reward, "mode": "x" * 100_000}),
        "unknown_item_field": ("/v1/judge", {"items": [{**item, "colour": "red"}]}),
        "json_10mb": ("/v1/reward", {**reward, "padding": [0] * 3_300_000}),
    }
    return {kind: (path, json.dumps(body).encode()) for kind, (path, body) in bodies.items()}


def hang_up_body() -> bytes:
    """A 60-response tournament (1,770 items): a long job for the client that hangs up on it."""
    return json.dumps({"prompt": "Q?", "responses": [f"score={i}" for i in range(60)], "mode": "tournament"}).encode()
