"""Cold adapter loads are scheduled work: a slow load must not hold up requests for resident adapters.

A real loopback server over the tiny model; the backend's `stage_adapter` (the part of a load that reads
files, run by the pool's background loader) waits on a gate, so a load is "slow" for exactly as long as
the test wants. No timing thresholds: resident requests must finish while the cold load is still held.
"""

from __future__ import annotations

import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from adapter_revisions import AdapterStore
from judge.judging import Judge, JudgeConfig
from reward_server import ServerConfig, create_app
from tests.reward_server.test_server_adapters import ITEM
from tests.support.adapters import lora_model, served_copy
from tiny_world.servers.openai_server import serve


class SlowStagingBackend:
    """The transformers backend, with each load's staging held until `gate` is set."""

    def __init__(self, inner):
        self.inner = inner
        self.name = "hf"
        self.loaded = inner.loaded
        self.gate = threading.Event()
        self.gate.set()
        self.staging = threading.Event()
        self.staged_on: list[str] = []

    def stage_adapter(self, name, path):
        self.staged_on.append(threading.current_thread().name)
        self.staging.set()
        assert self.gate.wait(timeout=60), "the test never released the load"
        return self.inner.stage_adapter(name, path)

    def install_adapter(self, name, path, staged):
        self.inner.install_adapter(name, path, staged)

    def load_adapter(self, name, path):
        self.inner.load_adapter(name, path)

    def unload_adapter(self, name):
        self.inner.unload_adapter(name)

    def generate(self, requests, params):
        return self.inner.generate(requests, params)


@pytest.fixture(scope="module")
def store(tiny_vlm_dir, tmp_path_factory):
    store = AdapterStore(tmp_path_factory.mktemp("cold-adapters"))
    for seed in (4, 5, 6):
        store.save("judge", lora_model(tiny_vlm_dir, seed), step=seed)
    return store


@pytest.fixture(scope="module")
def server(store, tiny_vlm_dir):
    backend = SlowStagingBackend(served_copy(tiny_vlm_dir))
    judge = Judge(backend, JudgeConfig(orders=1, max_new_tokens=10, batch_size=16))
    app = create_app(judge, ServerConfig(adapter_store=str(store.root), max_adapters=4, max_wait_ms=5))
    with serve(app) as url:
        yield url.removesuffix("/v1"), backend


def ask(url, model=None):
    body = {"items": [ITEM], **({"model": model} if model else {})}
    response = httpx.post(f"{url}/v1/judge", json=body, timeout=120)
    assert response.status_code == 200, response.text
    payload = response.json()
    return payload["model"], payload["verdicts"][0]["raw"], payload["timing"]


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_a_slow_cold_load_does_not_delay_resident_adapters(server, store):
    url, backend = server
    resident, cold, _ = store.revisions("judge")
    warm = ask(url, resident.ref)  # loads it (the gate is open): resident from now on
    assert warm[0] == resident.ref and warm[2]["adapter_load_ms"] > 0
    backend.gate.clear()
    backend.staging.clear()
    with ThreadPoolExecutor(1) as waiting:
        cold_answer = waiting.submit(ask, url, cold.ref)
        assert backend.staging.wait(timeout=60)  # the loader is inside the slow load now
        for _ in range(3):  # resident and base requests are answered meanwhile, without a load wait
            model, raw, timing = ask(url, resident.ref)
            assert (model, raw) == warm[:2] and timing["adapter_load_ms"] == 0
            assert ask(url)[0] == "base"
        assert not cold_answer.done()
        text = httpx.get(f"{url}/metrics", timeout=10).text
        assert metric(text, "mrjudge_adapter_load_waiting") == 1
        assert metric(text, 'mrjudge_adapters{state="loading"}') == 1
        backend.gate.set()
        model, raw, timing = cold_answer.result(timeout=120)
    assert model == cold.ref and timing["adapter_load_ms"] > 0
    assert (model, raw) == ask(url, cold.ref)[:2]  # now resident, the same answer
    assert set(backend.staged_on) == {"mrjudge-adapter-loader_0"}  # loads ran on the loader thread
    text = httpx.get(f"{url}/metrics", timeout=10).text
    assert metric(text, 'mrjudge_adapters{state="resident"}') == 2
    assert metric(text, 'mrjudge_adapter_requests_total{state="cold"}') == 2
    assert metric(text, 'mrjudge_adapter_requests_total{state="resident"}') >= 4
    assert metric(text, 'mrjudge_queue_wait_seconds_count{cause="adapter_load"}') == 2
    assert metric(text, 'mrjudge_queue_wait_seconds_count{cause="batch"}') >= 9
    assert metric(text, "mrjudge_adapter_load_seconds_count") == 2


def test_a_failed_load_is_a_503_naming_the_model_and_the_next_try_loads(server, store):
    url, _ = server
    *_, broken = store.revisions("judge")
    aside = broken.path.with_name(f".aside.{broken.id}")
    shutil.move(broken.path, aside)  # the folder vanished under the index (a disk fault, a hand-made mess)
    try:
        response = httpx.post(f"{url}/v1/judge", json={"items": [ITEM], "model": broken.ref}, timeout=60)
        error = response.json()["error"]
        assert (response.status_code, error["type"], error["field"]) == (503, "adapter_load_failed", "model")
        assert broken.ref in error["message"]
    finally:
        shutil.move(aside, broken.path)
    assert ask(url, broken.ref)[0] == broken.ref
    assert httpx.get(f"{url}/v1/adapters", timeout=10).json()["load_failures"] == 1
