"""The reward server on a real loopback port: endpoints, auth, limits, batching, overload, shutdown.

Exact rewards come from the rule judge (`tiny_world.rule_judge`: it picks the candidate with the
highest `score=N` tag); the end-to-end tests go through the tiny parrot judge and `mrjudge serve`.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.server_load.bodies import png_claiming
from judge.judging import Judge, JudgeConfig
from reward_server import ServerConfig, create_app
from tests.support.reward_server import data_url, free_port, mrjudge_serve, running, serving
from tiny_world.rule_judge import SlowRuleBackend

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def server():
    with running(max_wait_ms=5) as (url, backend):
        yield url


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server, timeout=30) as c:
        yield c


# -- endpoints ------------------------------------------------------------------------------------------


def test_judge_endpoint_returns_verdicts(client):
    items = [
        {"id": "a", "question": "Q?", "candidates": ["score=1", "score=7"], "image": data_url()},
        {"id": 2, "question": "Q?", "candidates": ["score=9", "score=2", "score=3"], "image": [data_url()]},
    ]
    response = client.post("/v1/judge", json={"items": items})
    assert response.status_code == 200, response.text
    verdicts = response.json()["verdicts"]
    assert [v["id"] for v in verdicts] == ["a", 2]
    assert [v["choice"] for v in verdicts] == [1, 0]
    assert verdicts[0]["votes"] == [1, 1] and verdicts[0]["consistent"] is True
    assert set(response.json()["timing"]) >= {"queue_ms", "judge_ms", "total_ms"}


@pytest.mark.parametrize(
    ("body", "rewards", "n_verdicts"),
    [
        # listwise: the best gets all the probability mass (votes, the rule judge has no log-probs)
        ({"responses": ["score=1", "score=5", "score=2"], "mode": "listwise"}, [0.0, 1.0, 0.0], 1),
        # no mode: listwise for 2..max_candidates responses
        ({"responses": ["score=4", "score=3"]}, [1.0, 0.0], 1),
        # pairwise: each response against the reference
        ({"responses": ["score=1", "score=9"], "reference": "score=5", "mode": "pairwise"}, [0.0, 1.0], 2),
        # round robin: share of games won; 3 players, 3 games
        ({"responses": ["score=2", "score=3", "score=1"], "mode": "tournament"}, [0.5, 1.0, 0.0], 3),
        # knock-out of 4: champion 1.0, finalist 0.5, first-round losers 0.0
        (
            {"responses": ["score=4", "score=3", "score=2", "score=1"], "mode": "tournament", "tournament": "knockout"},
            None,
            3,
        ),
    ],
)
def test_reward_modes(client, body, rewards, n_verdicts):
    response = client.post("/v1/reward", json={"prompt": "Q?", "images": [data_url()], **body})
    assert response.status_code == 200, response.text
    got = response.json()
    if rewards is None:
        assert got["rewards"][0] == 1.0 and sorted(got["rewards"]) == [0.0, 0.0, 0.5, 1.0]
    else:
        assert got["rewards"] == pytest.approx(rewards)
    assert len(got["verdicts"]) == n_verdicts
    assert {"queue_ms", "judge_ms", "total_ms"} <= set(got["timing"])


def test_reward_without_mode_plays_a_tournament_above_the_option_limit(client):
    responses = [f"score={i}" for i in range(10)]
    got = client.post("/v1/reward", json={"prompt": "Q?", "responses": responses}).json()
    assert got["mode"] == "tournament" and got["rewards"] == pytest.approx([i / 9 for i in range(10)])


def test_get_reward_groups_by_prompt_and_images(client):
    red, blue = data_url(colour=(255, 0, 0)), data_url(colour=(0, 0, 255))
    big = [f"score={(3 * i) % 10}" for i in range(10)]
    rows = [
        ("P1:", "score=2", None, [red]),
        ("P2:", "score=1", "score=5", []),  # alone, with a label: pairwise against it
        ("P1:", "score=8", None, [red]),
        ("P3:", "score=9", "", []),  # alone, empty label (OpenRLHF's "none"): unscored, neutral 0.5, a note
        ("P1:", "score=8", None, [blue]),  # same prompt, other image: another group (alone, no label)
        ("P1:", "score=3", None, [red]),
        *[("P4:", r, None, None) for r in big],  # 10 > 8 options: round-robin tournament
    ]
    body = {
        "query": [p + r for p, r, _, _ in rows],
        "prompts": [p for p, _, _, _ in rows],
        "labels": [label for _, _, label, _ in rows],
        "images": [imgs for _, _, _, imgs in rows],
        "tournament": "round_robin",
    }
    response = client.post("/get_reward", json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    expected = [0.0, 0.0, 1.0, 0.5, 0.5, 0.0] + [((3 * i) % 10) / 9 for i in range(10)]
    assert got["rewards"] == pytest.approx(expected)
    assert got["scores"] == got["rewards"]
    logs = got["extra_logs"]
    assert logs["judge_scored"][:6] == [1, 1, 1, 0, 0, 1]
    assert logs["judge_group_size"][:6] == [3, 1, 3, 1, 1, 3] and logs["judge_group_size"][6] == 10
    assert any("no other response" in note for note in got["notes"])
    metrics = client.get("/metrics").text
    assert 'mrjudge_rewards_total{endpoint="/get_reward",outcome="no_reference"} 2' in metrics


def test_health_is_open_and_metrics_count_requests(client):
    assert client.get("/health").json()["status"] == "ok"
    client.post("/v1/reward", json={"prompt": "Q?", "responses": ["score=1", "score=2"]})
    client.post("/v1/reward", content=b'{"prompt": ')
    text = client.get("/metrics").text
    assert 'mrjudge_requests_total{endpoint="/v1/reward",status="200"}' in text
    assert 'mrjudge_requests_total{endpoint="/v1/reward",status="400"}' in text
    assert 'mrjudge_errors_total{kind="invalid_json"}' in text
    assert "mrjudge_batch_items_bucket" in text and "mrjudge_queue_depth 0" in text
    assert 'mrjudge_request_latency_seconds_bucket{endpoint="/v1/reward",le="+Inf"}' in text


METRICS = {
    # family (as prometheus_client's parser names it: a counter without `_total`) -> type
    "mrjudge_requests": "counter",
    "mrjudge_errors": "counter",
    "mrjudge_refused_requests": "counter",
    "mrjudge_cancelled_requests": "counter",
    "mrjudge_stopped_batches": "counter",
    "mrjudge_judgments": "counter",
    "mrjudge_rewards": "counter",
    "mrjudge_reward_images": "counter",
    "mrjudge_queue_depth": "gauge",
    "mrjudge_batch_items": "histogram",
    "mrjudge_batch_requests": "histogram",
    "mrjudge_request_latency_seconds": "histogram",
    "mrjudge_queue_wait_seconds": "histogram",
}


def test_metrics_parse_as_prometheus_text_with_their_names(client):
    assert client.post("/v1/reward", json={"prompt": "Q?", "responses": ["score=1", "score=2"]}).status_code == 200
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert {name: f.type for name, f in families.items()} == METRICS
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples["mrjudge_requests_total", (("endpoint", "/v1/reward"), ("status", "200"))] >= 1
    assert samples["mrjudge_judgments_total", ()] >= 1 and samples["mrjudge_queue_depth", ()] == 0
    assert samples["mrjudge_batch_items_bucket", (("le", "+Inf"),)] == samples["mrjudge_batch_items_count", ()]


REWARD_ENDPOINTS = {
    "/v1/judge": ("JudgeRequest", "JudgeResponse"),
    "/v1/reward": ("RewardRequestBody", "RewardResponse"),
    "/get_reward": ("GetRewardRequest", "GetRewardResponse"),
}


def _refs(node) -> set[str]:
    if isinstance(node, dict):
        return {node["$ref"]} if "$ref" in node else set().union(*(_refs(v) for v in node.values()))
    return set().union(*(_refs(v) for v in node)) if isinstance(node, list) else set()


def test_openapi_shows_the_reward_endpoints_contracts(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert _refs(spec) <= {f"#/components/schemas/{name}" for name in schemas}  # every reference resolves
    for path, (request, response) in REWARD_ENDPOINTS.items():
        post = spec["paths"][path]["post"]
        json_schema = lambda part: part["content"]["application/json"]["schema"]  # noqa: E731
        assert json_schema(post["requestBody"]) == {"$ref": f"#/components/schemas/{request}"}, path
        assert json_schema(post["responses"]["200"]) == {"$ref": f"#/components/schemas/{response}"}, path
        for status in ("413", "422", "503"):
            assert json_schema(post["responses"][status]) == {"$ref": "#/components/schemas/ErrorResponse"}
        for name in (request, response):
            assert all(field.get("description") for field in schemas[name]["properties"].values()), name
    reward = schemas["RewardRequestBody"]
    assert set(reward["properties"]) == {
        "prompt",
        "images",
        "responses",
        "reference",
        "mode",
        "tournament",
        "id",
        "model",
    }
    assert reward["required"] == ["prompt", "responses"] and reward["additionalProperties"] is False
    assert reward["properties"]["responses"]["items"]["type"] == "string"
    assert set(schemas["RewardResponse"]["properties"]) == {"rewards", "verdicts", "mode", "model", "timing"}
    assert set(schemas["Verdict"]["properties"]) >= {"id", "choice", "probs", "votes", "raw"}
    assert schemas["JudgeRequest"]["properties"]["items"]["items"] == {"$ref": "#/components/schemas/JudgeItem"}
    assert set(schemas["GetRewardRequest"]["required"]) == {"query", "prompts"}
    assert client.get("/docs").status_code == 200


# -- auth -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_server():
    with running(api_key=KEY) as (url, _):
        yield url


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),  # no key
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": f"Basic {KEY}"}, 401),  # right secret, wrong scheme
        ({"Authorization": f"Bearer {KEY}"}, 200),
    ],
)
@pytest.mark.parametrize("path", ["/v1/reward", "/metrics"])
def test_api_key_guards_every_endpoint_but_health(keyed_server, headers, status, path):
    with httpx.Client(base_url=keyed_server, timeout=30) as c:
        if path == "/metrics":
            response = c.get(path, headers=headers)
        else:
            response = c.post(path, json={"prompt": "Q?", "responses": ["score=1", "score=2"]}, headers=headers)
        assert response.status_code == status
        if status == 401:
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "unauthorized"
        assert c.get("/health").status_code == 200


# -- bad input ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_server():
    limits = dict(max_body_bytes=300_000, max_image_bytes=50_000, max_text_chars=1000, max_responses=16)
    with running(**limits) as (url, _):
        yield url


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _reward(**overrides):
    return {"prompt": "Q?", "responses": ["score=1", "score=2"], **overrides}


def _item(**overrides):
    return {"items": [{"id": 1, "question": "Q?", "candidates": ["a", "b"], **overrides}]}


BAD_INPUTS = [
    # (endpoint, body: dict or raw bytes, status, field, words in the message)
    ("/v1/reward", b'{"prompt": "Q?", "responses": ["a"', 400, "body", "malformed JSON"),  # truncated
    ("/v1/reward", b"\xff\xfe not utf-8", 400, "body", "malformed JSON"),
    ("/v1/reward", b"[1, 2]", 422, "body", "JSON object"),
    ("/v1/reward", {"responses": ["a", "b"]}, 422, "prompt", "missing"),
    ("/v1/reward", _reward(responses="score=1"), 422, "responses", "array"),  # wrong type
    ("/v1/reward", _reward(responses=["a", 5]), 422, "responses[1]", "string"),
    ("/v1/reward", _reward(prompt=None), 422, "prompt", "string"),
    ("/v1/reward", _reward(mode="best"), 422, "mode", "listwise"),
    ("/v1/reward", _reward(mode="pairwise"), 422, "reference", "missing"),
    ("/v1/reward", _reward(responses=["a"] * 9, mode="listwise"), 422, "responses", "tournament"),
    ("/v1/reward", _reward(responses=["a"] * 100), 413, "responses", "max_responses"),
    ("/v1/reward", _reward(respones=["a", "b"]), 422, "respones", "unknown field"),
    ("/v1/reward", _reward(prompt="x" * 1001), 413, "prompt", "1001 characters"),
    ("/v1/reward", _reward(images=["not base64!"]), 422, "images[0]", "invalid base64"),
    ("/v1/reward", _reward(images=["data:image/png;base64,@@@@"]), 422, "images[0]", "invalid base64"),
    ("/v1/reward", _reward(images=[_b64(b"hello world!")]), 422, "images[0]", "not a decodable image"),
    ("/v1/reward", _reward(images=[5]), 422, "images[0]", "data URL"),
    ("/v1/reward", _reward(images=["/etc/passwd"]), 422, "images[0]", "--allow-local-images"),
    ("/v1/reward", _reward(images=["../../secret.png"]), 422, "images[0]", "--allow-local-images"),
    ("/v1/reward", _reward(images=[_b64(os.urandom(60_000))]), 413, "images[0]", "max_image_bytes"),
    ("/v1/reward", _reward(images=[_b64(png_claiming(100_000, 100_000))]), 413, "images[0]", "decompression bomb"),
    ("/v1/reward", _reward(images=[_b64(png_claiming(5000, 5000))]), 413, "images[0]", "max_image_pixels"),
    ("/v1/reward", _reward(prompt="x" * 400_000), 413, "body", "max_body_bytes"),
    ("/v1/judge", _item(candidates=[f"c{i}" for i in range(100)]), 413, "items[0].candidates", "100 candidates"),
    ("/v1/judge", _item(candidates=["only one"]), 422, "items[0].candidates", "2 to"),
    ("/v1/judge", _item(question=7), 422, "items[0].question", "string"),
    ("/v1/judge", _item(image="C:\\x.png"), 422, "items[0].image", "--allow-local-images"),
    ("/v1/judge", {"items": ["not an item"]}, 422, "items[0]", "object"),
    ("/v1/judge", {"items": []}, 422, "items", "at least 1"),
    ("/get_reward", {"query": ["a"], "prompts": ["a", "b"]}, 422, "prompts", "one per query"),
    ("/get_reward", {"query": [1], "prompts": ["a"]}, 422, "query[0]", "string"),
    ("/get_reward", {"query": ["a"], "prompts": ["a"], "images": [["%%%"]]}, 422, "images[0][0]", "base64"),
]


@pytest.mark.parametrize(("path", "body", "status", "field", "words"), BAD_INPUTS)
def test_bad_input_is_a_4xx_naming_the_field(strict_server, path, body, status, field, words):
    with httpx.Client(base_url=strict_server, timeout=30) as c:
        if isinstance(body, bytes):
            response = c.post(path, content=body, headers={"Content-Type": "application/json"})
        else:
            response = c.post(path, json=body)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["field"] == field and words in error["message"], error
        # The worker is still there for the next good request.
        assert c.post("/v1/reward", json=_reward()).status_code == 200


def test_chunked_body_over_the_limit_is_refused(strict_server):
    def chunks():
        for _ in range(40):
            yield b"x" * 10_000

    with httpx.Client(base_url=strict_server, timeout=30) as c:
        response = c.post("/v1/reward", content=chunks())
        assert response.status_code == 413 and response.json()["error"]["field"] == "body"


def test_local_images_only_inside_the_allowed_folder(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    (tmp_path.parent / "outside.png").write_bytes((tmp_path / "ok.png").read_bytes())
    with running(allow_local_images=str(tmp_path)) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        assert c.post("/v1/reward", json=_reward(images=["ok.png"])).status_code == 200
        assert c.post("/v1/reward", json=_reward(images=[str(tmp_path / "ok.png")])).status_code == 200
        refused = c.post("/v1/reward", json=_reward(images=["../outside.png"]))
        assert refused.status_code == 422 and "outside the folder" in refused.json()["error"]["message"]


# -- batching, overload, timeouts, shutdown --------------------------------------------------------------


def _concurrent(url: str, bodies: list[dict], path: str = "/v1/reward") -> list[httpx.Response]:
    with httpx.Client(base_url=url, timeout=60) as c, ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: c.post(path, json=body), bodies))


def test_concurrent_requests_are_merged_into_batches():
    backend = SlowRuleBackend(delay_s=0.3)
    with running(backend, max_batch_items=32, max_wait_ms=100) as (url, _):
        bodies = [_reward(responses=[f"score={2 * i + 1}", "score=10"], id=str(i)) for i in range(12)]
        responses = _concurrent(url, bodies)
    assert all(r.status_code == 200 for r in responses)
    assert [r.json()["rewards"] for r in responses] == [[float(i >= 5), float(i < 5)] for i in range(12)]
    assert len(backend.batches) < 12 and max(backend.batches) >= 2 * 3  # ≥ 3 requests (2 orders each) merged
    assert sum(backend.batches) == 12 * 2


def test_without_batching_each_batch_is_one_request():
    backend = SlowRuleBackend(delay_s=0.05)
    with running(backend, max_batch_items=1) as (url, _):
        responses = _concurrent(url, [_reward(id=str(i)) for i in range(6)])
    assert all(r.status_code == 200 for r in responses)
    assert backend.batches == [2] * 6  # one listwise item, two display orders, per backend call


def test_full_queue_answers_503_with_retry_after():
    backend = SlowRuleBackend(delay_s=0.6)
    with running(backend, max_batch_items=1, max_queue=1) as (url, _):
        responses = _concurrent(url, [_reward(id=str(i)) for i in range(6)])
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 1 and 503 in codes and set(codes) <= {200, 503}
    refused = next(r for r in responses if r.status_code == 503)
    assert int(refused.headers["Retry-After"]) >= 1 and refused.json()["error"]["type"] == "overloaded"


def test_slow_judging_answers_504_and_the_server_recovers():
    backend = SlowRuleBackend(delay_s=0.8)
    with running(backend, request_timeout_s=0.3) as (url, _), httpx.Client(base_url=url, timeout=30) as c:
        response = c.post("/v1/reward", json=_reward())
        assert response.status_code == 504 and response.json()["error"]["type"] == "timeout"
        backend.delay_s = 0.0
        time.sleep(0.9)  # the abandoned batch finishes
        assert c.post("/v1/reward", json=_reward()).status_code == 200


def test_graceful_shutdown_finishes_in_flight_requests():
    backend = SlowRuleBackend(delay_s=1.0)
    app = create_app(Judge(backend, JudgeConfig(orders=2)), ServerConfig())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"http://127.0.0.1:{port}/v1/reward", json=_reward(), timeout=30)
        assert backend.started.wait(10)
        server.should_exit = True  # what SIGTERM does
        response = pending.result()
    thread.join(timeout=20)
    assert response.status_code == 200 and response.json()["rewards"] == [0.0, 1.0]
    assert not thread.is_alive()


# -- end to end ------------------------------------------------------------------------------------------


def test_parrot_judge_end_to_end(parrot_loaded):
    from judge.backends.hf import TransformersBackend

    backend = TransformersBackend(parrot_loaded)
    with (
        serving(backend, JudgeConfig(orders=2, max_new_tokens=48)) as url,
        httpx.Client(base_url=url, timeout=120) as c,
    ):
        body = {"prompt": "What colour?", "images": [data_url((28, 28))], "responses": ["It is red.", "It is blue."]}
        response = c.post("/v1/reward", json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    assert len(got["rewards"]) == 2 and sum(got["rewards"]) == pytest.approx(1.0)
    assert any("<answer>" in raw for raw in got["verdicts"][0]["raw"])


def test_mrjudge_serve_subprocess_with_api_key(parrot_dir):
    flags = ["--model", str(parrot_dir), "--device", "cpu", "--api-key", KEY, "--max-new-tokens", "32"]
    with mrjudge_serve(*flags) as base:
        body = {"query": ["Q: colour? A: red", "Q: colour? A: blue"], "prompts": ["Q: colour? A: "] * 2}
        assert httpx.post(f"{base}/get_reward", json=body, timeout=60).status_code == 401
        response = httpx.post(f"{base}/get_reward", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        assert response.status_code == 200, response.text
        assert sum(response.json()["rewards"]) == pytest.approx(1.0)
