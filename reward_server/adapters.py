"""LoRA revisions over the resident base: the pool a server's adapter store gives, a request's lease on the
revision it names, and the wait for a cold one to load.

A request's `"model": "judge@prod"` (or `judge@<revision>`) is resolved when it arrives and the revision is
pinned until it is answered, so promoting or rolling back never changes the revision of a request in flight.
A cold revision is loaded by the pool's background loader while resident ones keep being served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from adapter_revisions.pool import AdapterPool
from adapter_revisions.store import AdapterStore, AdapterStoreError, BaseMismatchError, Revision
from judge.judging import Judge
from reward_server.batching import JobTimeout
from reward_server.config import ServerConfig
from reward_server.errors import WireError
from reward_server.metrics import Metrics

__all__ = ["adapter_lease", "adapter_ready", "make_pool", "model_name"]


def make_pool(judge: Judge, config: ServerConfig, metrics: Metrics | None = None) -> AdapterPool | None:
    """The adapter pool over `judge`'s backend when the config names a store (checked at start-up)."""
    if config.adapter_store is None:
        return None
    backend = judge.backend
    if not hasattr(backend, "load_adapter"):
        raise ValueError(f"the {getattr(backend, 'name', type(backend).__name__)} backend cannot load adapters")
    fingerprint = config.base_fingerprint
    if fingerprint is None:
        loaded = getattr(backend, "loaded", None)
        if loaded is None:
            raise ValueError(
                "serving adapters through a remote engine needs base_fingerprint: run `mrjudge adapters "
                "fingerprint MODEL` on the engine's base model and pass --base-fingerprint"
            )
        from adapter_revisions.fingerprint import base_fingerprint

        fingerprint = base_fingerprint(loaded.model)
    return AdapterPool(
        backend,
        AdapterStore(config.adapter_store),
        base_fingerprint=fingerprint,
        capacity=config.max_adapters,
        on_load=metrics.adapter_loaded if metrics is not None else None,
    )


@contextmanager
def adapter_lease(pool: AdapterPool | None, ref: str | None) -> Iterator[Revision | None]:
    """Pin the revision `ref` names (None: the base) for the duration of the request."""
    if ref is None:
        yield None
        return
    if pool is None:
        raise WireError(
            400, "model", "this server has no adapter store; start it with --adapter-store DIR", "no_adapters"
        )
    try:
        revision = pool.resolve(ref)
    except BaseMismatchError as exc:
        raise WireError(409, "model", str(exc), "base_mismatch") from None
    except AdapterStoreError as exc:
        raise WireError(404, "model", str(exc), "unknown_model") from None
    with pool.pinned(revision):
        yield revision


def model_name(adapter: Revision | None) -> str:
    """The `model` a response was answered with: the adapter revision, or `base`."""
    return adapter.ref if adapter else "base"


async def adapter_ready(
    pool: AdapterPool | None, adapter: Revision | None, metrics: Metrics, timeout_s: float
) -> float:
    """Wait until `adapter` can be served without a stall: at once if resident, else until the pool's
    background loader has staged it. Returns the seconds waited (the request's `adapter_load` wait)."""
    if adapter is None or pool is None:
        return 0.0
    future = pool.prepare(adapter)
    metrics.adapter_request("resident" if future is None else "cold")
    if future is None:
        return 0.0
    start = time.perf_counter()
    metrics.load_wait(+1)
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout_s)
    except asyncio.TimeoutError:
        raise JobTimeout(f"adapter {adapter.ref} did not load within {timeout_s:g} s") from None
    except Exception as exc:  # noqa: BLE001 - any load failure: the request is told, the server goes on
        raise WireError(
            503, "model", f"adapter {adapter.ref} failed to load: {exc}", "adapter_load_failed", {"Retry-After": "5"}
        ) from None
    finally:
        metrics.load_wait(-1)
    waited = time.perf_counter() - start
    metrics.waited("adapter_load", waited)
    return waited
