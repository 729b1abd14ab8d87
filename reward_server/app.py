"""The reward server: HTTP in, `compute_rewards` / `Judge.select` out, through one batching worker.

Routes only adapt wire formats (`reward_server.limits`) to the reward planner (`judge.reward_planner`); the judge,
the config, the metrics and the batcher live on `app.state`. Every refusal is a 4xx JSON envelope
`{"error": {"message", "field", "type"}}`; the worker survives any request, and an unexpected failure is a
500 envelope that leaves the connection usable.

A request's life: the body is read against a deadline (408) and a size cap (413), parsed off the event loop
(every string checked as UTF-8), its images read only as far as their headers (format allow-list, pixel
budget), its judge work counted (`max_request_items`, 413); only then are the images decoded (shrunk to
`max_pixels` as they are) and the work queued. A request that times out or whose client goes away gives
its work up; the batch it was in stops at its next backend call once nobody waits for it.

    app = create_app(Judge(make_backend("runs/judge"), JudgeConfig(orders=2)), ServerConfig(port=8000))
    uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints: `POST /v1/judge`, `POST /v1/reward`, `POST /get_reward` (OpenRLHF; one-sample requests are held
in groups of `group_size`, `reward_server.get_reward`), `GET /health`, `GET /metrics`, `GET /v1/adapters`.
Rewards are planned by `judge.reward_planner` (the planner TRL, verl and OpenRLHF share); unscored ones are
counted in `/metrics` (`mrjudge_rewards_total{outcome}`).

With an adapter store (`ServerConfig.adapter_store`), a request's `"model": "policy@prod"` (or
`policy@<revision>`) picks a LoRA revision over the resident base. The name is resolved when the request
arrives and the revision is pinned until it is answered, so promoting or rolling back never changes the
revision of a request in flight. A cold revision is loaded by the pool's background loader while
resident ones keep being served: the request waits for its load (`mrjudge_queue_wait_seconds{cause=
"adapter_load"}`), then joins the batch queue (`cause="batch"`); the batch worker installs it between
batches, and each batch runs one backend call per adapter.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter_revisions.pool import AdapterPool
from adapter_revisions.store import AdapterStore, AdapterStoreError, BaseMismatchError, Revision
from judge.images import fitted_size
from judge.judging import Judge
from judge.reward_planner import group_id, plan_cost
from judge.reward_scoring import RewardRequest, RewardResult, compute_rewards
from judge.types import MCItem, Verdict
from reward_server.batching import Batcher, BatchStopped, JobTimeout, QueueFull, ShuttingDown
from reward_server.config import ServerConfig
from reward_server.errors import WireError
from reward_server.get_reward import GroupPool, Outcome, Sample, judge_samples, openrlhf_answer, parse_openrlhf_body
from reward_server.limits import (
    check_api_key,
    parse_json,
    parse_judge_body,
    parse_reward_body,
)
from reward_server.metrics import Metrics
from reward_server.wire_images import PendingImage, decode_pending

__all__ = ["create_app", "plan_items"]

log = logging.getLogger("mrjudge.server")

ENDPOINTS = ("/v1/judge", "/v1/reward", "/get_reward", "/health", "/metrics", "/v1/adapters")
CANCEL_GRACE_S = 1.5
"""Of the shutdown grace, what the batcher gets after uvicorn's drain to finish or cancel queued work."""


# -- the work the batcher runs ------------------------------------------------------------------------------


@dataclass
class JudgeWork:
    items: list[MCItem]
    adapter: Revision | None = None


@dataclass
class RewardWork:
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
    guarded = copy.copy(judge)
    guarded.backend = _StoppableBackend(judge.backend, stop)
    return guarded


def make_run_batch(judge: Judge, max_options: int, pool: AdapterPool | None = None):
    """The batcher's `run_batch`: per adapter, all reward requests of a batch in one `compute_rewards` and
    all items in one `select` (the engine batches each call to the backend). Adapters a batch needs are
    loaded here, on the worker thread, so loading never races a generation."""

    def run_batch(
        payloads: list[JudgeWork | RewardWork], stop: threading.Event | None = None
    ) -> list[list[Verdict] | list[RewardResult]]:
        base = judge if stop is None else stoppable(judge, stop)
        groups: dict[str | None, list[int]] = {}
        for index, payload in enumerate(payloads):
            groups.setdefault(payload.adapter.ref if payload.adapter else None, []).append(index)
        out: list[Any] = [None] * len(payloads)
        for indices in groups.values():
            adapter = payloads[indices[0]].adapter
            if adapter is not None and pool is not None:
                adapter_judge = base.with_adapter(pool.ensure_loaded(adapter))
            else:
                adapter_judge = base
            for index, result in zip(indices, run_group(adapter_judge, [payloads[i] for i in indices])):
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


# -- HTTP plumbing ------------------------------------------------------------------------------------------


def _error_response(error: WireError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class ContainErrors:
    """Any exception a request raises becomes a 500 envelope here, and goes no further.

    Starlette's own last-resort handler re-raises after answering, and uvicorn then closes the connection,
    so the client's next request on it is reset; answered here, the connection stays usable.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except ClientDisconnect:
            return
        except Exception as exc:  # noqa: BLE001 - the last line: log it, answer 500, keep the connection
            log.exception("unexpected error on %s", scope.get("path", ""))
            self.metrics.error("internal")
            if not started:
                response = _error_response(WireError(500, "", f"internal error ({type(exc).__name__})", "internal"))
                await response(scope, receive, send)


class MetricsMiddleware:
    """Counts every response by endpoint and status, and times it (pure ASGI: no body buffering)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            path = scope.get("path", "")
            self.metrics.request(path if path in ENDPOINTS else "other", status, time.perf_counter() - start)


async def read_body(request: Request, max_bytes: int, timeout_s: float | None = None) -> bytes:
    """The raw body, refused (413) as soon as it is known to exceed `max_bytes`, and (408) when it has not
    all arrived within `timeout_s` (a client sending a byte every few seconds holds nothing for long)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise WireError(400, "Content-Length", "not an integer", "invalid_request") from None
        if size > max_bytes:
            raise WireError(413, "body", f"{size} bytes is above max_body_bytes ({max_bytes})", "too_large")
    chunks: list[bytes] = []

    async def receive_all() -> None:
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > max_bytes:
                raise WireError(413, "body", f"more than max_body_bytes ({max_bytes}) bytes", "too_large")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(receive_all(), timeout_s)
    except asyncio.TimeoutError:
        raise WireError(
            408,
            "body",
            f"the body did not arrive within body_timeout_s ({timeout_s:g} s)",
            "timeout",
            {"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise WireError(400, "body", "the client went away while sending the body", "client_disconnected") from None
    return b"".join(chunks)


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
def adapter_lease(pool: AdapterPool | None, body: dict[str, Any]) -> Iterator[Revision | None]:
    """Take `model` out of `body` and pin the revision it names for the duration of the request."""
    ref = body.pop("model", None)
    if ref is None:
        yield None
        return
    if not isinstance(ref, str) or not ref:
        raise WireError(422, "model", "must be a string such as 'judge@prod' or 'judge@<revision>'", "invalid_request")
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


def decode_max_pixels(judge: Judge) -> int | None:
    """The area images are shrunk to as they are decoded: the judge's `max_pixels`, else its processor's own
    upper bound (what the model would shrink them to anyway), else None (an engine behind HTTP: the per-image
    and per-request pixel budgets still bound what is decoded)."""
    own = getattr(judge.config, "max_pixels", None)
    if own:
        return int(own)
    processor = getattr(getattr(judge.backend, "loaded", None), "processor", None)
    size = getattr(getattr(processor, "image_processor", None), "size", None)
    longest = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    return int(longest) if longest else None


def decode_images(work: JudgeWork | RewardWork, max_pixels: int | None) -> None:
    """Replace the work's `PendingImage`s with pixels, each distinct one decoded once, shrunk as decoded."""
    decoded: dict[int, Any] = {}

    def pixels(ref: Any) -> Any:
        if not isinstance(ref, PendingImage):
            return ref
        if id(ref) not in decoded:
            decoded[id(ref)] = decode_pending(ref, max_pixels=max_pixels)
        return decoded[id(ref)]

    if isinstance(work, JudgeWork):
        for item in work.items:
            item.image = [pixels(r) for r in item.image] if isinstance(item.image, list) else pixels(item.image)
    else:
        for reward_request in work.requests:
            reward_request.images = [pixels(r) for r in reward_request.images]


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read, so nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # a stray empty body message: keep listening


async def _adapter_ready(state: Any, adapter: Revision | None, timeout_s: float) -> float:
    """Wait until `adapter` can be served without a stall: at once if resident, else until the pool's
    background loader has staged it. Returns the seconds waited (the request's `adapter_load` wait)."""
    pool: AdapterPool | None = state.adapters
    if adapter is None or pool is None:
        return 0.0
    future = pool.prepare(adapter)
    state.metrics.adapter_request("resident" if future is None else "cold")
    if future is None:
        return 0.0
    start = time.perf_counter()
    state.metrics.load_wait(+1)
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout_s)
    except asyncio.TimeoutError:
        raise JobTimeout(f"adapter {adapter.ref} did not load within {timeout_s:g} s") from None
    except Exception as exc:  # noqa: BLE001 - any load failure: the request is told, the server goes on
        raise WireError(
            503, "model", f"adapter {adapter.ref} failed to load: {exc}", "adapter_load_failed", {"Retry-After": "5"}
        ) from None
    finally:
        state.metrics.load_wait(-1)
    waited = time.perf_counter() - start
    state.metrics.waited("adapter_load", waited)
    return waited


async def _submit(request: Request, work: JudgeWork | RewardWork, cost: int, field: str) -> Any:
    """Check the work budget, decode the images, wait for a cold adapter to load, queue `work` for the judge
    and wait for it while watching the client; the batcher's refusals become 503 / 504 envelopes."""
    state = request.app.state
    config: ServerConfig = state.config
    if cost > config.max_request_items:
        raise WireError(
            413,
            field,
            f"this request expands to {cost} judge items, above max_request_items ({config.max_request_items}); "
            "split it, or send smaller groups",
            "too_large",
        )
    await run_in_threadpool(decode_images, work, state.decode_max_pixels)

    async def ready_then_submit() -> Any:
        load_s = await _adapter_ready(state, work.adapter, config.request_timeout_s)
        done = await state.batcher.submit(work, cost, max(0.001, config.request_timeout_s - load_s))
        state.metrics.waited("batch", done.queue_ms / 1000)
        done.load_ms = 1000 * load_s
        return done

    job = asyncio.ensure_future(ready_then_submit())
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # uvicorn cancels handlers still running when its graceful shutdown times out; answered here, the
        # client is told to retry elsewhere (uvicorn would write a bare 500).
        job.cancel()
        state.metrics.cancelled("shutdown")
        raise WireError(503, "", "the server is shutting down; its work was cancelled", "shutting_down") from None
    finally:
        watch.cancel()
    if not job.done():
        job.cancel()  # the client went away: give the work up
        state.metrics.cancelled("disconnect")
        raise WireError(499, "", "the client closed the connection; its work was cancelled", "client_disconnected")
    if job.cancelled():
        raise WireError(499, "", "the client closed the connection; its work was cancelled", "client_disconnected")
    try:
        return job.result()
    except QueueFull as exc:
        raise WireError(503, "", f"{exc}; retry later", "overloaded", {"Retry-After": str(exc.retry_after_s)}) from None
    except (ShuttingDown, BatchStopped) as exc:
        raise WireError(503, "", str(exc), "shutting_down", {"Retry-After": "5"}) from None
    except WireError:
        raise
    except JobTimeout as exc:
        state.metrics.cancelled("timeout")
        raise WireError(504, "", f"{exc} (request_timeout_s); its remaining work was cancelled", "timeout") from None
    except ValueError as exc:  # DataError, ImageLoadError: the request, not the server
        raise WireError(422, "", str(exc), "invalid_request") from None


def _timing(start: float, done: Any) -> dict[str, float]:
    total = 1000 * (time.perf_counter() - start)
    return {
        "adapter_load_ms": round(done.load_ms, 3),
        "queue_ms": round(done.queue_ms, 3),
        "judge_ms": round(done.judge_ms, 3),
        "total_ms": round(total, 3),
        "batch_requests": done.batch_requests,
        "batch_items": done.batch_items,
    }


# -- the app ------------------------------------------------------------------------------------------------


def create_app(judge: Judge, config: ServerConfig | None = None) -> FastAPI:
    """The reward server around `judge` (any backend). Start it with uvicorn; the batcher starts with it.

    Args:
        judge: the judge every endpoint uses; only the batcher's single thread ever calls it.
        config: listening, batching and input limits (`ServerConfig()` when omitted).
    """
    config = config or ServerConfig()
    metrics = Metrics()
    pool = make_pool(judge, config, metrics)
    if pool is not None:
        metrics.adapter_counts = pool.counts

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = Batcher(
            make_run_batch(judge, config.max_candidates, pool),
            max_batch_items=config.max_batch_items,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
            on_batch=metrics.batch,
            on_stopped=metrics.batch_stopped,
        )
        metrics.queue_depth = lambda: batcher.depth
        app.state.batcher = batcher
        # The shrink rule's first call imports transformers' image code: pay that at start, not per request.
        await run_in_threadpool(fitted_size, 56, 56, max_pixels=1_003_520)
        await batcher.start()
        try:
            yield
        finally:
            # uvicorn has drained (or, past its graceful timeout, cancelled) the requests; what is left of the
            # shutdown grace goes to finishing queued work, then the rest is cancelled.
            await batcher.stop(timeout_s=CANCEL_GRACE_S)
            if pool is not None:
                pool.close()

    app = FastAPI(title="mr-judge reward server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.judge = judge
    app.state.config = config
    app.state.decode_max_pixels = decode_max_pixels(judge)
    app.state.metrics = metrics
    app.state.adapters = pool
    groups = GroupPool(config.group_size, config.group_wait_s)
    app.state.reward_groups = groups
    app.add_middleware(ContainErrors, metrics=metrics)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts the 500s ContainErrors writes

    @app.exception_handler(WireError)
    async def wire_error(request: Request, exc: WireError) -> JSONResponse:
        metrics.error(exc.kind)
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        metrics.error(kind)
        return _error_response(WireError(exc.status_code, "", str(exc.detail), kind, exc.headers))

    async def authorized(request: Request) -> None:
        check_api_key(request.headers.get("authorization"), config.api_key)

    async def json_body(request: Request) -> dict[str, Any]:
        raw = await read_body(request, config.max_body_bytes, config.body_timeout_s)
        separators = raw.count(b",") + raw.count(b":")  # C speed: refuses a parse that would hold the GIL long
        if separators > config.max_json_values:
            raise WireError(
                413,
                "body",
                f"{separators} commas and colons is above max_json_values ({config.max_json_values})",
                "too_large",
            )
        return await run_in_threadpool(parse_json, raw)  # off the event loop

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        batcher = request.app.state.batcher
        running_s = batcher.running_for_s
        stalled = running_s > config.request_timeout_s
        body = {
            "status": "degraded" if stalled else "ok",
            "backend": getattr(judge.backend, "name", type(judge.backend).__name__),
            "queue_depth": batcher.depth,
            "batch_running_s": round(running_s, 3),
            "max_batch_items": config.max_batch_items,
            "max_candidates": config.max_candidates,
        }
        if stalled:
            body["reason"] = (
                f"the judge has been on one batch for {running_s:.0f} s, longer than request_timeout_s "
                f"({config.request_timeout_s:g} s)"
            )
        return JSONResponse(body, status_code=503 if stalled else 200)

    @app.get("/metrics", dependencies=[Depends(authorized)])
    async def get_metrics() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/judge", dependencies=[Depends(authorized)])
    async def judge_items(request: Request) -> dict[str, Any]:
        start = time.perf_counter()
        body = await json_body(request)
        with adapter_lease(pool, body) as adapter:
            items = await run_in_threadpool(parse_judge_body, body, config)
            done = await _submit(request, JudgeWork(items, adapter), len(items), "items")
        return {"verdicts": [v.to_dict() for v in done.result], **_model(adapter), "timing": _timing(start, done)}

    @app.post("/v1/reward", dependencies=[Depends(authorized)])
    async def reward(request: Request) -> dict[str, Any]:
        start = time.perf_counter()
        body = await json_body(request)
        if body.get("reference") == "":
            body["reference"] = None  # an empty reference is no reference: never judge against ""
        with adapter_lease(pool, body) as adapter:
            reward_request = await run_in_threadpool(parse_reward_body, body, config)
            if "id" not in body:  # the planner's id, so this path seeds display orders like every other
                reward_request.id = group_id(
                    reward_request.prompt, reward_request.reference, len(reward_request.images)
                )
            done = await _submit(
                request, RewardWork([reward_request], adapter), plan_items([reward_request]), "responses"
            )
        [result] = done.result
        reasons = ["unparsed" if r is None else "" for r in result.rewards]
        metrics.rewards("/v1/reward", reasons, len(reward_request.images) * len(result.rewards))
        if any(reasons):
            log.warning("/v1/reward: %d of %d responses unscored (verdict did not parse)", sum(map(bool, reasons)),
                        len(reasons))  # fmt: skip
        return {
            "rewards": result.rewards,
            "verdicts": [v.to_dict() for v in result.verdicts],
            "mode": reward_request.mode,
            **_model(adapter),
            "timing": _timing(start, done),
        }

    @app.post("/get_reward", dependencies=[Depends(authorized)])
    async def get_reward(request: Request) -> dict[str, Any]:
        start = time.perf_counter()
        body = await json_body(request)
        with adapter_lease(pool, body) as adapter:
            samples, tournament = await run_in_threadpool(parse_openrlhf_body, body, config)

            async def submit(requests: list[RewardRequest], cost: int) -> tuple[list[RewardResult], Any]:
                done = await _submit(request, RewardWork(requests, adapter), cost, "query")
                return done.result, done

            async def run(members: list[Sample]) -> list[Outcome]:
                return await judge_samples(members, submit, tournament=tournament, max_options=config.max_candidates)

            if config.group_size > 1:  # OpenRLHF's one-sample requests: wait for the rest of each group
                scope = (adapter.ref if adapter else None, tournament)
                outcomes = list(await asyncio.gather(*(groups.add((*scope, *s.key), s, run) for s in samples)))
            else:
                outcomes = await run(samples)
        reasons = [o.reason for o in outcomes]
        metrics.rewards(
            "/get_reward", reasons, sum(len(s.images) for s, r in zip(samples, reasons) if r != "no_reference")
        )
        if any(reasons):
            log.warning(
                "/get_reward: %d of %d samples unscored (%s); they get the neutral reward with "
                "extra_logs.judge_scored = 0",
                sum(map(bool, reasons)), len(reasons), ", ".join(sorted({r for r in reasons if r})),
            )  # fmt: skip
        answer = openrlhf_answer(samples, outcomes, start)
        done = next((o.done for o in outcomes if o.done is not None), None)
        if done is not None:
            answer["timing"] = _timing(start, done)
        return {**answer, **_model(adapter)}

    @app.get("/v1/adapters", dependencies=[Depends(authorized)])
    async def adapters() -> dict[str, Any]:
        if pool is None:
            return {"store": None, "resident": []}
        return {
            "store": str(pool.store.root),
            "base_fingerprint": pool.base_fingerprint,
            "capacity": pool.capacity,
            "resident": pool.resident(),
            "loads": pool.loads,
            "evictions": pool.evictions,
            "load_failures": pool.load_failures,
            **{f"{state}_count": n for state, n in pool.counts().items()},
        }

    return app


def _model(adapter: Revision | None) -> dict[str, str]:
    """The `model` a response was answered with: the adapter revision, or `base`."""
    return {"model": adapter.ref if adapter else "base"}
