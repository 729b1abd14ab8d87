"""Fixtures of the reward server's adapter tests: a store of three judge revisions over the tiny VLM, and a
server over it whose backend a test wraps (to hold a generation or a load for as long as it wants)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from adapter_revisions import AdapterStore
from judge.judging import JudgeConfig
from tests.support.adapters import lora_model, served_copy
from tests.support.reward_server import serving


@pytest.fixture(scope="module")
def store(tiny_vlm_dir, tmp_path_factory) -> AdapterStore:
    """Three revisions of policy `judge` (seeds 1-3: each answers differently)."""
    store = AdapterStore(tmp_path_factory.mktemp("adapters"))
    for seed in (1, 2, 3):
        store.save("judge", lora_model(tiny_vlm_dir, seed), step=seed)
    return store


@pytest.fixture(scope="module")
def serve_store(store, tiny_vlm_dir) -> Callable[..., AbstractContextManager[tuple[str, Any]]]:
    """`serve_store(Wrapper, max_adapters=N, **server_config)`: the store served over `Wrapper(a fresh copy of
    the base)`; yields (URL, the wrapped backend)."""

    @contextmanager
    def serve(wrapper: Callable[[Any], Any], *, max_adapters: int, **config: Any) -> Iterator[tuple[str, Any]]:
        backend = wrapper(served_copy(tiny_vlm_dir))
        judge_config = JudgeConfig(orders=1, max_new_tokens=10, batch_size=16)
        limits = dict(adapter_store=str(store.root), max_adapters=max_adapters, max_wait_ms=5, **config)
        with serving(backend, judge_config, **limits) as url:
            yield url, backend

    return serve
