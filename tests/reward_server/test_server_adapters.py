"""The reward server serving LoRA revisions over one resident base, on a real loopback port.

Each revision's expected answers are what the server gives when asked for that revision explicitly
(`judge@<id>`); the alias tests then check `judge@prod` gives exactly those bytes as it moves.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from judge.judging import JudgeConfig
from tests.support.adapters import lora_model, served_copy
from tests.support.reward_server import ITEM, ask, serving


class GatedBackend:
    """The transformers backend whose next `generate` waits for `release` (to hold a request in flight)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = "hf"
        self.loaded = inner.loaded
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def load_adapter(self, name, path):
        self.inner.load_adapter(name, path)

    def unload_adapter(self, name):
        self.inner.unload_adapter(name)

    def generate(self, requests, params):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        return self.inner.generate(requests, params)


@pytest.fixture(scope="module")
def server(serve_store):
    with serve_store(GatedBackend, max_adapters=2) as served:
        yield served


def answer(url, model=None):
    """The `model` that answered `ITEM` and the verdict's raw outputs."""
    return ask(url, model)[:2]


@pytest.fixture(scope="module")
def expected(server, store):
    url, _ = server
    answers = {"base": answer(url)[1]}
    for revision in store.revisions("judge"):
        model, raw = answer(url, revision.ref)
        assert model == revision.ref
        answers[revision.id] = raw
    assert len({tuple(a) for a in answers.values()}) == 4, "every revision must answer differently"
    return answers


def test_aliases_move_and_rollback_restores_byte_identical_answers(server, store, expected):
    url, _ = server
    first, second, _ = store.revisions("judge")
    store.promote(first.ref)
    assert answer(url, "judge@prod") == (first.ref, expected[first.id])
    store.promote(second.ref)  # hot: no restart, the next request resolves the new revision
    assert answer(url, "judge@prod") == (second.ref, expected[second.id])
    store.rollback("judge")
    assert answer(url, "judge@prod") == (first.ref, expected[first.id])
    assert answer(url) == ("base", expected["base"])


def test_a_request_in_flight_finishes_on_the_revision_it_started_with(server, store, expected):
    url, backend = server
    first, second, _ = store.revisions("judge")
    store.promote(first.ref)
    backend.entered.clear()
    backend.gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(answer, url, "judge@prod")
        assert backend.entered.wait(timeout=30)  # it is inside the model now
        store.promote(second.ref)
        backend.gate.set()
        assert in_flight.result() == (first.ref, expected[first.id])
    backend.gate = None
    assert answer(url, "judge@prod") == (second.ref, expected[second.id])


def test_concurrent_requests_during_hot_swaps_all_succeed_on_their_revision(server, store, expected):
    url, _ = server
    revisions = store.revisions("judge")
    stop = threading.Event()

    def swapper():
        i = 0
        while not stop.is_set():
            store.promote(revisions[i % 3].ref)
            i += 1
            stop.wait(0.05)

    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: answer(url, "judge@prod"), range(24)))
    finally:
        stop.set()
        thread.join()
    by_ref = {r.ref: r.id for r in revisions}
    assert all(raw == expected[by_ref[model]] for model, raw in answers)
    assert len({model for model, _ in answers}) >= 2  # the swaps really happened mid-run


def test_least_recently_used_adapters_are_unloaded_beyond_capacity(server, store, expected):
    url, _ = server
    for revision in store.revisions("judge") * 2:
        assert answer(url, revision.ref) == (revision.ref, expected[revision.id])
    listing = httpx.get(f"{url}/v1/adapters", timeout=10).json()
    assert len(listing["resident"]) == 2 and listing["capacity"] == 2
    assert listing["evictions"] >= 4 and all(r["pins"] == 0 for r in listing["resident"])


def test_refusals_name_the_model_field(server, store, tiny_vlm_dir, tmp_path):
    url, _ = server
    from tiny_world.model import build_tiny_model

    other = build_tiny_model(tmp_path / "other-base", kind="vlm", seed=7)
    foreign = store.save("foreign", lora_model(other, 1))
    cases = {
        "judge@staging": (404, "unknown_model", "no alias or revision 'staging'"),
        "nobody@prod": (404, "unknown_model", "unknown policy 'nobody'"),
        foreign.ref: (409, "base_mismatch", "retrain it over this one"),
        7: (422, "invalid_request", "must be a string"),
    }
    for model, (status, kind, words) in cases.items():
        response = httpx.post(f"{url}/v1/judge", json={"items": [ITEM], "model": model}, timeout=30)
        error = response.json()["error"]
        assert (response.status_code, error["type"], error["field"]) == (status, kind, "model")
        assert words in error["message"]
    assert answer(url, "judge@latest")[0].startswith("judge@")  # the server is fine afterwards


def test_a_server_without_a_store_refuses_model_names(tiny_vlm_dir):
    with serving(served_copy(tiny_vlm_dir), JudgeConfig(orders=1, max_new_tokens=4)) as url:
        response = httpx.post(f"{url}/v1/judge", json={"items": [ITEM], "model": "judge@prod"})
    assert response.status_code == 400 and "--adapter-store" in response.json()["error"]["message"]


def test_reward_endpoints_take_the_model_too(server, store):
    url, _ = server
    body = {"prompt": "Say hi.", "responses": ["hi", "bye"], "model": "judge@latest"}
    response = httpx.post(f"{url}/v1/reward", json=body, timeout=60)
    assert response.status_code == 200 and response.json()["model"] == store.resolve("judge").ref
    body = {"query": ["Say hi. hi", "Say hi. bye"], "prompts": ["Say hi.", "Say hi."], "model": "judge@latest"}
    response = httpx.post(f"{url}/get_reward", json=body, timeout=60)
    assert response.status_code == 200 and len(response.json()["rewards"]) == 2


def test_reserved_slots_are_built_at_start_and_every_load_goes_into_one(serve_store, store):
    """`--reserve-adapter-slots`: `max_adapters` slots exist before the first request; loads, evictions and
    reloads then reuse them, each revision answering as it does on its own."""
    with serve_store(lambda backend: backend, max_adapters=2, reserve_adapter_slots=True) as (url, backend):
        slots = set(backend.loaded.model.peft_config)
        assert len(slots) == 2 and backend.adapters == []
        revisions = store.revisions("judge")
        answers = {revision.ref: answer(url, revision.ref) for revision in revisions}  # the third evicts one
        assert all(model == ref for ref, (model, _) in answers.items())
        assert answer(url, revisions[0].ref) == answers[revisions[0].ref]
        assert set(backend.loaded.model.peft_config) == slots
