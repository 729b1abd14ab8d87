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
from prometheus_client.parser import text_string_to_metric_families

from tests.support.reward_server import ITEM, ask

ADAPTER_METRICS = {  # a server with an adapter store adds these families to /metrics
    "mrjudge_adapters": "gauge",
    "mrjudge_adapter_load_waiting": "gauge",
    "mrjudge_adapter_requests": "counter",
    "mrjudge_adapter_load_seconds": "histogram",
}


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
def server(serve_store):
    with serve_store(SlowStagingBackend, max_adapters=4) as served:
        yield served


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
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert {name: families.get(name) for name in ADAPTER_METRICS} == ADAPTER_METRICS


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
