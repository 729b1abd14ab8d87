"""The work the batcher runs: judge items and reward requests, run per adapter, one generation per round.

A route's work is a `JudgeWork` (MC items for `Judge.select`) or a `RewardWork` (requests for
`compute_rewards`); `make_run_batch` gives the batcher the function that runs a merged batch of them, with
the judge's backend behind a stop check (`stoppable`) so an abandoned batch ends at its next backend call.
Images arrive header-read (`PendingImage`) and are decoded by `decode_images` just before queueing.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

from adapter_revisions.pool import AdapterPool
from adapter_revisions.store import Revision
from judge.images import PixelRange
from judge.judging import Judge
from judge.reward.planner import plan_cost
from judge.reward.scoring import RewardRequest, RewardResult, compute_rewards
from judge.types import MCItem, Verdict
from reward_server.batching import BatchStopped
from reward_server.merged_calls import run_merged
from reward_server.wire_images import PendingImage, decode_pending

__all__ = ["JudgeWork", "RewardWork", "decode_images", "make_run_batch", "pending_pixels", "plan_items"]


@dataclass
class JudgeWork:
    """MC items for `Judge.select`, under the adapter revision the request pinned (None: the base)."""

    items: list[MCItem]
    adapter: Revision | None = None


@dataclass
class RewardWork:
    """Reward requests for `compute_rewards`, under the adapter revision the request pinned (None: the base)."""

    requests: list[RewardRequest]
    adapter: Revision | None = None


def plan_items(requests: list[RewardRequest]) -> int:
    """MC items the reward planner will put in front of the judge for `requests` (the work budget's unit).

    The one place the server asks the planner for a cost, so a new planner only changes this function.
    """
    return sum(plan_cost(r) for r in requests)


class _StoppableBackend:
    """The judge's backend behind a check: once `stop` is set, the next call raises `BatchStopped`.

    The judge calls its backend once per chunk of `batch_size` items (and once per knock-out round), so an
    abandoned batch ends at its next chunk boundary. Every other attribute is the backend's own.
    """

    def __init__(self, backend: Any, stop: threading.Event) -> None:
        self._backend = backend
        self._stop = stop

    def generate(self, requests: Any, params: Any) -> Any:
        if self._stop.is_set():
            raise BatchStopped("every request of this batch was given up")
        return self._backend.generate(requests, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def stoppable(judge: Judge, stop: threading.Event) -> Judge:
    """`judge` with its backend behind `stop` (a shallow copy: config, adapter and weights are shared)."""
    return with_backend(judge, _StoppableBackend(judge.backend, stop))


def make_run_batch(judge: Judge, max_options: int, pool: AdapterPool | None = None):
    """The batcher's `run_batch`: per adapter, all reward requests of a batch in one `compute_rewards` and
    all items in one `select`, the adapters' backend calls merged into one generation each round
    (`run_merged`), so a batch over several revisions costs about what a batch over one does. Adapters a batch
    needs are loaded first, on the worker thread, so loading never races a generation."""

    def run_batch(
        payloads: list[JudgeWork | RewardWork], stop: threading.Event | None = None
    ) -> list[list[Verdict] | list[RewardResult]]:
        base = judge if stop is None else stoppable(judge, stop)
        groups: dict[str | None, list[int]] = {}
        for index, payload in enumerate(payloads):
            groups.setdefault(payload.adapter.ref if payload.adapter else None, []).append(index)
        judges = []
        for indices in groups.values():
            adapter = payloads[indices[0]].adapter
            if adapter is not None and pool is not None:
                judges.append(base.with_adapter(pool.ensure_loaded(adapter)))
            else:
                judges.append(base)

        def group_work(adapter_judge: Judge, indices: list[int]):
            def work(backend: Any) -> list[Any]:
                return run_group(with_backend(adapter_judge, backend), [payloads[i] for i in indices])

            return work

        work = [group_work(j, indices) for j, indices in zip(judges, groups.values())]
        out: list[Any] = [None] * len(payloads)
        for indices, results in zip(groups.values(), run_merged(work, base.backend)):
            for index, result in zip(indices, results):
                out[index] = result
        return out

    def run_group(judge: Judge, payloads: list[JudgeWork | RewardWork]) -> list[Any]:
        requests = [r for p in payloads if isinstance(p, RewardWork) for r in p.requests]
        items = [i for p in payloads if isinstance(p, JudgeWork) for i in p.items]
        results = iter(compute_rewards(judge, requests, max_options=max_options) if requests else [])
        verdicts = iter(judge.select(items) if items else [])
        out: list[Any] = []
        for p in payloads:
            if isinstance(p, RewardWork):
                out.append([next(results) for _ in p.requests])
            else:
                out.append([next(verdicts) for _ in p.items])
        return out

    return run_batch


def with_backend(judge: Judge, backend: Any) -> Judge:
    """`judge` calling `backend` (a shallow copy: config and adapter are shared)."""
    if backend is judge.backend:
        return judge
    other = copy.copy(judge)
    other.backend = backend
    return other


def pending_pixels(work: JudgeWork | RewardWork) -> int:
    """Pixels (from the headers) of the work's images still to decode, each distinct one once."""
    refs = (
        [r for item in work.items for r in (item.image if isinstance(item.image, list) else [item.image])]
        if isinstance(work, JudgeWork)
        else [r for request in work.requests for r in request.images]
    )
    pending = {id(r): r for r in refs if isinstance(r, PendingImage)}
    return sum(r.width * r.height for r in pending.values())


def decode_images(work: JudgeWork | RewardWork, pixel_range: PixelRange) -> None:
    """Replace the work's `PendingImage`s with pixels, each distinct one decoded once, fitted as decoded."""
    decoded: dict[int, Any] = {}

    def pixels(ref: Any) -> Any:
        if not isinstance(ref, PendingImage):
            return ref
        if id(ref) not in decoded:
            decoded[id(ref)] = decode_pending(ref, pixel_range)
        return decoded[id(ref)]

    if isinstance(work, JudgeWork):
        for item in work.items:
            item.image = [pixels(r) for r in item.image] if isinstance(item.image, list) else pixels(item.image)
    else:
        for reward_request in work.requests:
            reward_request.images = [pixels(r) for r in reward_request.images]
