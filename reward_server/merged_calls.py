"""One backend call for a batch's adapters: the work of each adapter runs on a thread of its own, and the calls
it makes to the backend are merged into one `generate` over all their rows, run by the batch's own thread.

Why: a batch holding requests under several LoRA revisions ran one generation per revision, so a request for a
rarely used revision (cold traffic) added a whole generation to the batch every resident client waits for. The
judge's work for one adapter (`Judge.select`, `compute_rewards` with its knock-out rounds) is a sequence of
backend calls, and calls of different adapters can share a batch (`ChatRequest.adapter` is per row; the
transformers backend mixes them with PEFT's `adapter_names`, vLLM with a `LoRARequest` per prompt).

How: `run_merged(work, backend)` starts each `work(backend)` on a helper thread against a `MergedCalls`, whose
`generate` only queues the call. The calling thread (the server's one judge thread) waits until every helper
still running has queued one, runs them as one call, hands the answers back, and so on until all have ended: a
helper that ends is no longer waited for, so work with more rounds than the rest goes on alone. The backend is
only ever called from the calling thread: the judge stays single-threaded, and torch keeps its per-thread
state (a fresh thread per batch cost ~20 % of a batch, docs/reward-server.md). Greedy calls merge whatever
their seeds (the seed does not change a greedy answer); sampled calls merge only with calls of the same
settings, seed included.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, replace
from typing import Any

from judge.backends.base import ChatRequest, Generation, SamplingParams

__all__ = ["MergedCalls", "run_merged"]


@dataclass
class _Call:
    requests: list[ChatRequest]
    params: SamplingParams
    result: list[Generation] | None = None
    error: BaseException | None = None
    done: bool = False


def _merge_key(params: SamplingParams) -> tuple:
    return astuple(params if params.temperature > 0 else replace(params, seed=None))


class MergedCalls:
    """The backend as `callers` helper threads see it: `generate` queues the call and waits for `serve`, on the
    calling thread, to run it merged with the others' (see the module's text). Every other attribute is the
    backend's own."""

    def __init__(self, backend: Any, callers: int) -> None:
        self._backend = backend
        self._running = callers
        self._waiting: list[_Call] = []
        self._lock = threading.Condition()

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        call = _Call(list(requests), params)
        with self._lock:
            self._waiting.append(call)
            self._lock.notify_all()
            self._lock.wait_for(lambda: call.done)
        if call.error is not None:
            raise call.error
        if call.result is None:
            raise RuntimeError("a merged backend call ended without an answer for this caller")
        return call.result

    def done(self) -> None:
        """A helper has finished (or failed): its next call is no longer waited for."""
        with self._lock:
            self._running -= 1
            self._lock.notify_all()

    def serve(self) -> None:
        """Run the helpers' calls, merged, on this thread, until every helper has ended."""
        while True:
            with self._lock:
                self._lock.wait_for(lambda: len(self._waiting) >= self._running)
                if not self._waiting:  # every helper has ended
                    return
                waiting, self._waiting = self._waiting, []
            groups: dict[tuple, list[_Call]] = {}
            for call in waiting:
                groups.setdefault(_merge_key(call.params), []).append(call)
            try:
                for calls in groups.values():
                    self._run(calls)
            finally:
                with self._lock:
                    for call in waiting:
                        call.done = True
                    self._lock.notify_all()

    def _run(self, calls: list[_Call]) -> None:
        rows = [request for call in calls for request in call.requests]
        try:
            generations = self._backend.generate(rows, calls[0].params)
            if len(generations) != len(rows):
                raise RuntimeError(f"the backend returned {len(generations)} results for {len(rows)} requests")
        except BaseException as error:  # noqa: BLE001 - each caller raises it in its own thread
            for call in calls:
                call.error = error
            return
        start = 0
        for call in calls:
            call.result = list(generations[start : start + len(call.requests)])
            start += len(call.requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def run_merged(work: Sequence[Callable[[Any], Any]], backend: Any) -> list[Any]:
    """Each `work(backend)`'s result, in order: one piece of work runs here against `backend` itself; more run
    on helper threads against one `MergedCalls`, whose merged calls this thread makes. The first exception (in
    `work`'s order) is raised once all have ended."""
    if len(work) == 1:
        return [work[0](backend)]
    merged = MergedCalls(backend, callers=len(work))
    results: list[Any] = [None] * len(work)
    errors: list[BaseException | None] = [None] * len(work)

    def run(index: int) -> None:
        try:
            results[index] = work[index](merged)
        except BaseException as error:  # noqa: BLE001 - raised below, on the calling thread
            errors[index] = error
        finally:
            merged.done()

    helpers = [
        threading.Thread(target=run, args=(i,), name=f"mrjudge-adapter-{i}", daemon=True) for i in range(len(work))
    ]
    for helper in helpers:
        helper.start()
    merged.serve()
    for helper in helpers:
        helper.join()
    for error in errors:
        if error is not None:
            raise error
    return results
