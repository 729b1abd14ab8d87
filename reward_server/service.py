"""`RewardService`: what the reward server does behind its routes, held on `app.state.service`.

One judge behind one batching worker (`reward_server.batching`), the adapter pool of a server with an
adapter store, OpenRLHF's group pool and the metrics. Each endpoint method takes its validated request
model (`reward_server.protocol`) and the raw request (to notice a client that goes away) and returns its
response model; every refusal is a `WireError`.

A request's work, once its body has passed: its images are read at the header against the request's pixel
budget, its judge work is counted (`max_request_items`, 413), then the images are decoded (fitted to the
judge's pixel range as they are), a cold adapter is waited for, and the work is queued. A request that times
out or whose client goes away gives its work up; the batch it was in stops at its next backend call once
nobody waits for it. Once its rewards are computed, a judged reward request is handed to the reward audit,
if the server has one (`reward_server.audit`), which returns at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from judge.images import fitted_size
from judge.judging import Judge
from judge.reward.scoring import RewardRequest, RewardResult
from reward_server import protocol
from reward_server.adapters import adapter_lease, adapter_ready, make_pool, model_name
from reward_server.audit import ServerAudit
from reward_server.batching import Batcher, BatchStopped, Done, Incoming, JobTimeout, QueueFull, ShuttingDown
from reward_server.body import BODY_BYTES, INLINE_BODY_BYTES
from reward_server.config import ServerConfig
from reward_server.errors import WireError, too_large
from reward_server.get_reward import GroupPool, Outcome, Sample, judge_samples, openrlhf_answer, read_samples
from reward_server.log_summary import LogSummary
from reward_server.metrics import Metrics
from reward_server.wire_images import decode_range
from reward_server.work import JudgeWork, RewardWork, decode_images, make_run_batch, pending_pixels, plan_items

__all__ = ["CANCEL_GRACE_S", "RewardService"]

log = logging.getLogger("mrjudge.server")
W = TypeVar("W", JudgeWork, RewardWork)

INLINE_DECODE_PIXELS = 512 * 512
"""A request's images are decoded on the event loop up to this many pixels in all (about a millisecond of PNG
decoding); more go to a worker thread, so that a large image cannot stall the other requests."""

CANCEL_GRACE_S = 1.5
"""Of the shutdown grace, what the batcher gets after uvicorn's drain to finish or cancel queued work."""

UNSCORED_WHY = {
    "no_reference": "alone in its group with no reference label: set --group-size to the samples per prompt, "
    "or give labels",
    "unparsed": "the judge's verdict did not parse",
}


class RewardService:
    """The judge as a reward model for HTTP requests: batching, adapters, planning and the judge calls.

    Args:
        judge: the judge every endpoint uses; only the batcher's single thread ever calls it.
        config: batching and input limits.
    """

    batcher: Batcher
    """The batching worker, made by `start` (the app's lifespan)."""

    def __init__(self, judge: Judge, config: ServerConfig) -> None:
        self.judge = judge
        self.config = config
        self.metrics = Metrics()
        self.pool = make_pool(judge, config, self.metrics)
        if self.pool is not None:
            self.metrics.watch_adapters(self.pool.counts)
        self.groups = GroupPool(config.group_size, config.group_wait_s)
        self.decode_pixels = decode_range(judge)
        self.incoming = Incoming()
        """Requests read and on their way to the queue: a batch that is not full waits for them."""
        self.log_summary = LogSummary(log, config.log_interval_s)
        """Refusals, failures and unscored samples: the first of a reason logged at once, then one line per
        `log_interval_s` (a flood of them must not flood the log, nor block on a full stderr pipe)."""
        self._flusher: asyncio.Task | None = None
        self.audit = ServerAudit(config, self.metrics) if config.audit is not None else None
        """The reward audit (`ServerConfig.audit`): judged groups handed over after their rewards."""

    async def start(self) -> None:
        self.batcher = Batcher(
            make_run_batch(self.judge, self.config.max_candidates, self.pool),
            max_batch_items=self.config.max_batch_items,
            max_wait_ms=self.config.max_wait_ms,
            max_queue=self.config.max_queue,
            on_batch=self.metrics.batch,
            on_stopped=self.metrics.batch_stopped,
            incoming=self.incoming,
        )
        self.metrics.watch_queue(lambda: self.batcher.depth)
        # The shrink rule's first call imports transformers' image code: pay that at start, not per request.
        await run_in_threadpool(fitted_size, 56, 56, max_pixels=1_003_520)
        if self.pool is not None and self.config.reserve_adapter_slots:
            await run_in_threadpool(self.pool.reserve)  # before the batch worker runs: no generation to race
        await self.batcher.start()
        self._flusher = asyncio.ensure_future(self._flush_log_summary())
        if self.audit is not None:
            log.info("%s", self.audit.describe())

    async def stop(self) -> None:
        """uvicorn has drained (or, past its graceful timeout, cancelled) the requests; what is left of the
        shutdown grace goes to finishing queued work, then the rest is cancelled; the reward audit gets the same
        time, beside it, to audit what it has queued and write its last windows."""
        if self.audit is None:
            await self.batcher.stop(timeout_s=CANCEL_GRACE_S)
        else:
            await asyncio.gather(self.batcher.stop(timeout_s=CANCEL_GRACE_S), self.audit.close(CANCEL_GRACE_S))
        if self.pool is not None:
            self.pool.close()
        if self._flusher is not None:
            self._flusher.cancel()
        self.log_summary.flush(force=True)

    async def _flush_log_summary(self) -> None:
        """Write the log summary's due lines a few times per interval, so a flood that stops is still reported."""
        while True:
            await asyncio.sleep(self.config.log_interval_s / 4)
            self.log_summary.flush()

    # -- endpoints ------------------------------------------------------------------------------------------

    async def judge_items(self, body: protocol.JudgeRequest, raw: Request) -> protocol.JudgeResponse:
        start = time.perf_counter()
        with adapter_lease(self.pool, body.model) as adapter:
            work = await self._prepare(raw, lambda: JudgeWork(body.to_items(self.config), adapter), "items")
            done = await self._submit(raw, work, _cost(work), "items", decoded=True)
        return protocol.JudgeResponse(verdicts=done.result, model=model_name(adapter), timing=_timing(start, done))

    async def reward(self, body: protocol.RewardRequestBody, raw: Request) -> protocol.RewardResponse:
        start = time.perf_counter()
        with adapter_lease(self.pool, body.model) as adapter:
            work = await self._prepare(raw, lambda: RewardWork([body.to_request(self.config)], adapter), "responses")
            [request] = work.requests
            done = await self._submit(raw, work, _cost(work), "responses", decoded=True)
        [result] = done.result
        if self.audit is not None:
            self.audit.reward(request, result, body.images)  # returns at once; never fails the request
        reasons = ["unparsed" if r is None else "" for r in result.rewards]
        self.metrics.rewards("/v1/reward", reasons, len(request.images) * len(result.rewards))
        if any(reasons):
            unscored = sum(map(bool, reasons))
            self.log_summary.note(
                "unscored /v1/reward unparsed",
                f"{unscored} of {len(reasons)} responses unscored (the judge's verdict did not parse)",
                unscored,
            )
        return protocol.RewardResponse(
            rewards=result.rewards,
            verdicts=result.verdicts,
            mode=request.mode,
            model=model_name(adapter),
            timing=_timing(start, done),
        )

    async def get_reward(self, body: protocol.GetRewardRequest, raw: Request) -> protocol.GetRewardResponse:
        start = time.perf_counter()
        tournament, options = body.tournament or "knockout", self.config.max_candidates
        group_size = self.config.group_size if body.group_size is None else body.group_size
        if group_size > self.config.max_items:
            raise too_large("group_size", f"{group_size} is above the limit of {self.config.max_items} (max_items)")
        with adapter_lease(self.pool, body.model) as adapter:
            if self._small(raw):
                samples = read_samples(body, self.config)  # header reads of a small body: quicker here
            else:
                samples = await run_in_threadpool(read_samples, body, self.config)

            async def submit(requests: list[RewardRequest], cost: int) -> tuple[list[RewardResult], Done]:
                done = await self._submit(raw, RewardWork(requests, adapter), cost, "query")
                return done.result, done

            async def run(members: list[Sample]) -> list[Outcome]:
                judged = None if self.audit is None else partial(self.audit.samples, [s.refs for s in members])
                return await judge_samples(members, submit, tournament=tournament, max_options=options, judged=judged)

            if group_size > 1:  # one-sample requests (OpenRLHF, verl): wait for the rest of each group
                self.incoming.leave(raw.scope)  # held for its group: not on its way to the judge yet
                scope = (adapter.ref if adapter else None, tournament, group_size)
                outcomes = list(
                    await asyncio.gather(*(self.groups.add((*scope, *s.key), s, run, group_size) for s in samples))
                )
            else:
                outcomes = await run(samples)
        reasons = [o.reason for o in outcomes]
        judged_images = sum(len(s.images) for s, r in zip(samples, reasons) if r != "no_reference")
        self.metrics.rewards("/get_reward", reasons, judged_images)
        for reason in sorted({r for r in reasons if r}):  # one summary per reason, never a line per request
            unscored = reasons.count(reason)
            self.log_summary.note(
                f"unscored /get_reward {reason}",
                f"{unscored} of {len(reasons)} samples unscored ({UNSCORED_WHY[reason]}); they get the group's "
                "fill value with extra_logs.judge_scored = 0",
                unscored,
            )
        answer = openrlhf_answer(samples, outcomes, start)
        done = next((o.done for o in outcomes if o.done is not None), None)
        if done is not None:
            answer["timing"] = _timing(start, done)
        return protocol.GetRewardResponse(**answer, model=model_name(adapter))

    def health(self) -> protocol.HealthResponse:
        running_s = self.batcher.running_for_s
        stalled = running_s > self.config.request_timeout_s
        answer = protocol.HealthResponse(
            status="degraded" if stalled else "ok",
            backend=getattr(self.judge.backend, "name", type(self.judge.backend).__name__),
            queue_depth=self.batcher.depth,
            batch_running_s=round(running_s, 3),
            max_batch_items=self.config.max_batch_items,
            max_candidates=self.config.max_candidates,
        )
        if stalled:
            answer.reason = (
                f"the judge has been on one batch for {running_s:.0f} s, longer than request_timeout_s "
                f"({self.config.request_timeout_s:g} s)"
            )
        return answer

    def adapters(self) -> protocol.AdaptersResponse:
        pool = self.pool
        if pool is None:
            return protocol.AdaptersResponse(store=None, resident=[])
        return protocol.AdaptersResponse(
            store=str(pool.store.root),
            base_fingerprint=pool.base_fingerprint,
            capacity=pool.capacity,
            resident=pool.resident(),
            loads=pool.loads,
            evictions=pool.evictions,
            load_failures=pool.load_failures,
            **{f"{state}_count": n for state, n in pool.counts().items()},
        )

    # -- queueing -------------------------------------------------------------------------------------------

    def _small(self, raw: Request) -> bool:
        """Whether a request is read on the event loop: a small body, and no image file paths to read from disk."""
        size = raw.scope.get(BODY_BYTES, INLINE_BODY_BYTES + 1)
        return size <= INLINE_BODY_BYTES and self.config.allow_local_images is None

    def _check_cost(self, cost: int, field: str) -> None:
        if cost > self.config.max_request_items:
            raise WireError(
                413,
                field,
                f"this request expands to {cost} judge items, above max_request_items "
                f"({self.config.max_request_items}); split it, or send smaller groups",
                "too_large",
            )

    def _read_and_decode(self, read: Callable[[], W], field: str) -> W:
        work = read()
        self._check_cost(_cost(work), field)
        decode_images(work, self.decode_pixels)
        return work

    async def _prepare(self, raw: Request, read: Callable[[], W], field: str) -> W:
        """A request's work: read (`read`: its fields, its images at the header), its budget checked (413 above
        `max_request_items`, before any decoding), its images decoded. A small request is read on the event
        loop and its images decoded there when they are small too; anything larger goes to a worker thread, all
        of it in one trip. Reading and decoding a small request takes ~0.12 ms; the three trips it used to make
        cost more: with them the server took 1.7 ms of CPU a request against an instant judge, now 1.2."""
        if not self._small(raw):
            return await run_in_threadpool(self._read_and_decode, read, field)
        work = read()
        self._check_cost(_cost(work), field)
        await self._decode(work)
        return work

    async def _decode(self, work: JudgeWork | RewardWork) -> None:
        if pending_pixels(work) <= INLINE_DECODE_PIXELS:
            decode_images(work, self.decode_pixels)
        else:
            await run_in_threadpool(decode_images, work, self.decode_pixels)

    async def _submit(
        self, raw: Request, work: JudgeWork | RewardWork, cost: int, field: str, *, decoded: bool = False
    ) -> Done:
        """Check the work budget and decode the images (unless `decoded`), wait for a cold adapter to load, queue
        `work` for the judge and wait for it while watching the client; the batcher's refusals become 503 / 504
        envelopes."""
        config = self.config
        if not decoded:
            self._check_cost(cost, field)
            await self._decode(work)
        self.incoming.leave(raw.scope)  # queued next (or waiting for its adapter)

        async def ready_then_submit() -> Done:
            load_s = await adapter_ready(self.pool, work.adapter, self.metrics, config.request_timeout_s)
            done = await self.batcher.submit(work, cost, max(0.001, config.request_timeout_s - load_s))
            self.metrics.waited("batch", done.queue_ms / 1000)
            done.load_ms = 1000 * load_s
            return done

        job = asyncio.ensure_future(ready_then_submit())
        watch = asyncio.ensure_future(_disconnected(raw))
        try:
            await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # uvicorn cancels handlers still running when its graceful shutdown times out; answered here, the
            # client is told to retry elsewhere (uvicorn would write a bare 500).
            job.cancel()
            self.metrics.cancelled("shutdown")
            raise WireError(503, "", "the server is shutting down; its work was cancelled", "shutting_down") from None
        finally:
            watch.cancel()
        if not job.done():
            job.cancel()  # the client went away: give the work up
            self.metrics.cancelled("disconnect")
            raise WireError(499, "", "the client closed the connection; its work was cancelled", "client_disconnected")
        if job.cancelled():
            raise WireError(499, "", "the client closed the connection; its work was cancelled", "client_disconnected")
        try:
            return job.result()
        except QueueFull as exc:
            retry = {"Retry-After": str(exc.retry_after_s)}
            raise WireError(503, "", f"{exc}; retry later", "overloaded", retry) from None
        except (ShuttingDown, BatchStopped) as exc:
            raise WireError(503, "", str(exc), "shutting_down", {"Retry-After": "5"}) from None
        except WireError:
            raise
        except JobTimeout as exc:
            self.metrics.cancelled("timeout")
            message = f"{exc} (request_timeout_s); its remaining work was cancelled"
            raise WireError(504, "", message, "timeout") from None
        except ValueError as exc:  # DataError, ImageLoadError: the request, not the server
            raise WireError(422, "", str(exc), "invalid_request") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read, so nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # a stray empty body message: keep listening


def _cost(work: JudgeWork | RewardWork) -> int:
    """The judge items `work` costs (the unit of `max_request_items` and of batches)."""
    return len(work.items) if isinstance(work, JudgeWork) else plan_items(work.requests)


def _timing(start: float, done: Done) -> protocol.Timing:
    return protocol.Timing(
        adapter_load_ms=round(done.load_ms, 3),
        queue_ms=round(done.queue_ms, 3),
        judge_ms=round(done.judge_ms, 3),
        total_ms=round(1000 * (time.perf_counter() - start), 3),
        batch_requests=done.batch_requests,
        batch_items=done.batch_items,
    )
