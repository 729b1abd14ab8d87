"""Adapters resident over one base model in a serving backend: hot-loaded, pinned while used, LRU-evicted.

A request names `policy@alias` or `policy@revision`; the pool resolves it *when the request arrives* and
pins the revision, so a request in flight finishes on the revision it started with even if `prod` moves
meanwhile. Loading and unloading happen only on the thread that runs the model (the server's batch
worker), between batches; each revision is loaded under its own name `policy@id`, so an engine's prefix
or encoder caches can never serve an old revision's state under a reused name.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from judge.adapters.store import AdapterStore, Revision, check_base

__all__ = ["AdapterBackend", "AdapterPool"]

log = logging.getLogger("mrjudge.adapters")


class AdapterBackend(Protocol):
    """What a backend needs to serve adapters: load one under a name, unload it."""

    def load_adapter(self, name: str, path: str) -> None: ...

    def unload_adapter(self, name: str) -> None: ...


class AdapterPool:
    """Resolve, pin and (on the model thread) load adapter revisions, keeping at most `capacity` resident.

    Args:
        backend: an `AdapterBackend` (the transformers, OpenAI-compatible/vLLM or vLLM offline backend).
        store: where revisions are read from.
        base_fingerprint: the serving base's fingerprint; revisions trained over another base are refused.
        capacity: adapters kept loaded; beyond it the least recently used unpinned one is unloaded.
    """

    def __init__(self, backend: AdapterBackend, store: AdapterStore, *, base_fingerprint: str, capacity: int = 4):
        if capacity < 1:
            raise ValueError(f"adapter capacity ({capacity}) must be at least 1")
        self.backend = backend
        self.store = store
        self.base_fingerprint = base_fingerprint
        self.capacity = capacity
        self._lock = threading.Lock()
        self._pins: Counter[str] = Counter()
        self._resident: OrderedDict[str, Revision] = OrderedDict()
        self.loads = 0
        self.evictions = 0

    def resolve(self, ref: str) -> Revision:
        """The revision `ref` names now; refused (`BaseMismatchError`) if it belongs to another base."""
        revision = self.store.resolve(ref)
        check_base(revision, self.base_fingerprint)
        return revision

    @contextmanager
    def pinned(self, revision: Revision) -> Iterator[Revision]:
        """Keep `revision` from being unloaded until the block ends (a request in flight)."""
        with self._lock:
            self._pins[revision.ref] += 1
        try:
            yield revision
        finally:
            with self._lock:
                self._pins[revision.ref] -= 1
                if self._pins[revision.ref] <= 0:
                    del self._pins[revision.ref]

    def ensure_loaded(self, revision: Revision) -> str:
        """Make `revision` resident (model thread only) and return the name to generate with.

        Least recently used, unpinned adapters are unloaded until at most `capacity` stay resident with
        this one. When every other resident adapter is pinned by a request in flight, the pool runs over
        capacity rather than failing the request, and trims back on a later call once they are released.
        """
        with self._lock:
            needs_load = revision.ref not in self._resident
            if not needs_load:
                self._resident.move_to_end(revision.ref)
            keep = self.capacity - 1 if needs_load else self.capacity
            spare = [name for name in self._resident if self._pins[name] <= 0 and name != revision.ref]
            victims = spare[: max(0, len(self._resident) - keep)]
            for name in victims:
                del self._resident[name]
        for name in victims:
            self.backend.unload_adapter(name)
            self.evictions += 1
            log.info("unloaded adapter %s (least recently used)", name)
        if needs_load:
            self.backend.load_adapter(revision.ref, str(revision.path))
            with self._lock:
                self._resident[revision.ref] = revision
                self.loads += 1
            log.info("loaded adapter %s (step %s)", revision.ref, revision.step)
        return revision.ref

    def resident(self) -> list[dict[str, Any]]:
        """Loaded adapters, least recently used first, with their pin counts."""
        with self._lock:
            return [
                {"name": name, "step": rev.step, "pins": self._pins.get(name, 0)}
                for name, rev in self._resident.items()
            ]
