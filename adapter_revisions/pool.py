"""Adapters resident over one base model in a serving backend: hot-loaded, pinned while used, LRU-evicted.

A request names `policy@alias` or `policy@revision`; the pool resolves it *when the request arrives* and
pins the revision, so a request in flight finishes on the revision it started with even if `prod` moves
meanwhile. Each revision is loaded under its own name `policy@id`, so an engine's prefix or encoder
caches can never serve an old revision's state under a reused name.

Cold loads are scheduled work, not a stall: `prepare` hands a cold revision to a background loader
thread, which does the slow part (reading and decoding the files: `backend.stage_adapter`) while the model
thread keeps serving resident adapters; the request joins the batch queue only once its adapter is
staged. The model thread then installs it between batches (`ensure_loaded`: a tensor copy into a free
slot), the only step that touches the model. A backend without `stage_adapter` loads on the model thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

from adapter_revisions.store import AdapterStore, Revision, check_base

__all__ = ["AdapterBackend", "AdapterPool"]

log = logging.getLogger("mrjudge.adapters")


class AdapterBackend(Protocol):
    """What a backend needs to serve adapters: load one under a name, unload it."""

    def load_adapter(self, name: str, path: str) -> None: ...

    def unload_adapter(self, name: str) -> None: ...


class StagingBackend(AdapterBackend, Protocol):
    """A backend that splits a load: `stage_adapter` may run on any thread while the model generates (files
    to tensors); `install_adapter` runs on the model thread and only puts the staged tensors in place."""

    def stage_adapter(self, name: str, path: str) -> Any: ...

    def install_adapter(self, name: str, path: str, staged: Any) -> None: ...


class AdapterPool:
    """Resolve, pin and (on the model thread) load adapter revisions, keeping at most `capacity` resident.

    Args:
        backend: an `AdapterBackend` (the transformers, OpenAI-compatible/vLLM or vLLM offline backend).
        store: where revisions are read from.
        base_fingerprint: the serving base's fingerprint; revisions trained over another base are refused.
        capacity: adapters kept loaded; beyond it the least recently used unpinned one is unloaded.
        on_load: called with the seconds each background load (staging) took, for metrics.
    """

    def __init__(
        self,
        backend: AdapterBackend,
        store: AdapterStore,
        *,
        base_fingerprint: str,
        capacity: int = 4,
        on_load: Callable[[float], None] | None = None,
    ):
        if capacity < 1:
            raise ValueError(f"adapter capacity ({capacity}) must be at least 1")
        self.backend = backend
        self.store = store
        self.base_fingerprint = base_fingerprint
        self.capacity = capacity
        self.on_load = on_load
        self._lock = threading.Lock()
        self._pins: Counter[str] = Counter()
        self._resident: OrderedDict[str, Revision] = OrderedDict()
        self._loading: dict[str, Future] = {}
        self._staged: dict[str, Any] = {}
        self._loader: ThreadPoolExecutor | None = None
        self.loads = 0
        self.evictions = 0
        self.load_failures = 0

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
                    self._staged.pop(revision.ref, None)  # staged for requests that have all gone

    # -- cold loads: the background loader ---------------------------------------------------------------------

    def is_resident(self, revision: Revision) -> bool:
        with self._lock:
            return revision.ref in self._resident

    def prepare(self, revision: Revision) -> Future | None:
        """None when `revision` can be served at once (resident, or staged for a cheap install); else a
        future the loader thread completes once it is staged (or fails with the load's error). Requests
        for the same cold revision share one load. Call it while the revision is pinned."""
        with self._lock:
            ref = revision.ref
            if ref in self._resident or ref in self._staged:
                return None
            future = self._loading.get(ref)
            if future is None:
                if self._loader is None:
                    self._loader = ThreadPoolExecutor(1, thread_name_prefix="mrjudge-adapter-loader")
                future = self._loader.submit(self._stage, revision)
                self._loading[ref] = future
            return future

    def _stage(self, revision: Revision) -> None:
        """On the loader thread: the slow half of a load, while the model thread serves other adapters."""
        start = time.perf_counter()
        try:
            if hasattr(self.backend, "stage_adapter"):
                staged = self.backend.stage_adapter(revision.ref, str(revision.path))
            else:  # the backend loads on the model thread; check the files are there before queueing for it
                if not (revision.path / "adapter_model.safetensors").is_file():
                    raise FileNotFoundError(f"{revision.path} has no adapter_model.safetensors (collected by gc?)")
                staged = None
        except BaseException:
            with self._lock:
                self._loading.pop(revision.ref, None)
                self.load_failures += 1
            raise
        with self._lock:
            self._loading.pop(revision.ref, None)
            if staged is not None and self._pins[revision.ref] > 0:
                self._staged[revision.ref] = staged
        if self.on_load is not None:
            self.on_load(time.perf_counter() - start)
        log.info("staged adapter %s in %.1f ms", revision.ref, 1000 * (time.perf_counter() - start))

    def counts(self) -> dict[str, int]:
        """Adapters resident, being loaded, and staged awaiting their install (for `/metrics`)."""
        with self._lock:
            return {"resident": len(self._resident), "loading": len(self._loading), "staged": len(self._staged)}

    def close(self) -> None:
        """Stop the loader thread (loads in progress finish; queued ones are dropped)."""
        if self._loader is not None:
            self._loader.shutdown(wait=False, cancel_futures=True)

    def reserve(self) -> int:
        """Have the backend allocate `capacity` adapter slots now, shaped like the latest revision of the store's
        last policy (before serving, while nothing generates): loads of revisions of the same shape then copy
        into a free slot instead of building one. Returns the slots made (0 where the store is empty or the
        backend has no slots to reserve, as an engine that allocates its own, vLLM, has not)."""
        reserve = getattr(self.backend, "reserve_slots", None)
        policies = self.store.policies()
        if reserve is None or not policies:
            return 0
        template = self.resolve(policies[-1])
        made = reserve(self.capacity, str(template.path))
        log.info("reserved %d adapter slots shaped like %s", made, template.ref)
        return made

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
            with self._lock:
                staged = self._staged.pop(revision.ref, None)
            if staged is not None:
                self.backend.install_adapter(revision.ref, str(revision.path), staged)  # type: ignore[attr-defined]
            else:
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
