"""The reward server: HTTP in, `compute_rewards` / `Judge.select` out, through one batching worker.

Routes only adapt wire formats (`judge.server.limits`) to the reward engine (`judge.rewarding`); the judge,
the config, the metrics and the batcher live on `app.state`. Every refusal is a 4xx JSON envelope
`{"error": {"message", "field", "type"}}`; the worker survives any request.

    app = create_app(Judge(make_backend("runs/judge"), JudgeConfig(orders=2)), ServerConfig(port=8000))
    uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints: `POST /v1/judge`, `POST /v1/reward`, `POST /get_reward` (OpenRLHF; one-sample requests are held
in groups of `group_size`, `judge.server.get_reward`), `GET /health`, `GET /metrics`, `GET /v1/adapters`.
Rewards are planned by `judge.rewarding` (the planner TRL, verl and OpenRLHF share); unscored ones are
counted in `/metrics` (`mrjudge_rewards_total{outcome}`).

With an adapter store (`ServerConfig.adapter_store`), a request's `"model": "policy@prod"` (or
`policy@<revision>`) picks a LoRA revision over the resident base. The name is resolved when the request
arrives and the revision is pinned until it is answered, so promoting or rolling back never changes the
revision of a request in flight; new revisions are hot-loaded by the batch worker between batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge.adapters.pool import AdapterPool
from judge.adapters.store import AdapterStore, AdapterStoreError, BaseMismatchError, Revision
from judge.judging import Judge
from judge.rewarding import RewardRequest, RewardResult, compute_rewards, group_id, plan_cost
from judge.server.batching import Batcher, JobTimeout, QueueFull, ShuttingDown
from judge.server.config import ServerConfig
from judge.server.get_reward import GroupPool, Outcome, Sample, judge_samples, openrlhf_answer, parse_openrlhf_body
from judge.server.limits import (
    WireError,
    check_api_key,
    parse_json,
    parse_judge_body,
    parse_reward_body,
)
from judge.server.metrics import Metrics
from judge.types import MCItem, Verdict

__all__ = ["create_app", "reward_cost"]

log = logging.getLogger("mrjudge.server")

ENDPOINTS = ("/v1/judge", "/v1/reward", "/get_reward", "/health", "/metrics", "/v1/adapters")


# -- the work the batcher runs ------------------------------------------------------------------------------


@dataclass
class JudgeWork:
    items: list[MCItem]
    adapter: Revision | None = None


@dataclass
class RewardWork:
    requests: list[RewardRequest]
    adapter: Revision | None = None


reward_cost = plan_cost
"""MC items a reward request puts in front of the judge: the planner's `judge.rewarding.plan_cost`."""


def make_run_batch(judge: Judge, max_options: int, pool: AdapterPool | None = None):
    """The batcher's `run_batch`: per adapter, all reward requests of a batch in one `compute_rewards` and
    all items in one `select` (the engine batches each call to the backend). Adapters a batch needs are
    loaded here, on the worker thread, so loading never races a generation."""

    def run_batch(payloads: list[JudgeWork | RewardWork]) -> list[list[Verdict] | list[RewardResult]]:
        groups: dict[str | None, list[int]] = {}
        for index, payload in enumerate(payloads):
            groups.setdefault(payload.adapter.ref if payload.adapter else None, []).append(index)
        out: list[Any] = [None] * len(payloads)
        for indices in groups.values():
            adapter = payloads[indices[0]].adapter
            if adapter is not None and pool is not None:
                adapter_judge = judge.with_adapter(pool.ensure_loaded(adapter))
            else:
                adapter_judge = judge
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


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, refused (413) as soon as it is known to exceed `max_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise WireError(400, "Content-Length", "not an integer", "invalid_request") from None
        if size > max_bytes:
            raise WireError(413, "body", f"{size} bytes is above max_body_bytes ({max_bytes})", "too_large")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > max_bytes:
            raise WireError(413, "body", f"more than max_body_bytes ({max_bytes}) bytes", "too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def make_pool(judge: Judge, config: ServerConfig) -> AdapterPool | None:
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
        from judge.adapters.fingerprint import base_fingerprint

        fingerprint = base_fingerprint(loaded.model)
    return AdapterPool(
        backend, AdapterStore(config.adapter_store), base_fingerprint=fingerprint, capacity=config.max_adapters
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


async def _submit(request: Request, work: JudgeWork | RewardWork, cost: int) -> Any:
    """Queue `work` for the judge; the batcher's refusals become 503 / 504 envelopes."""
    state = request.app.state
    try:
        return await state.batcher.submit(work, cost, state.config.request_timeout_s)
    except QueueFull as exc:
        raise WireError(503, "", f"{exc}; retry later", "overloaded", {"Retry-After": str(exc.retry_after_s)}) from None
    except ShuttingDown as exc:
        raise WireError(503, "", str(exc), "shutting_down", {"Retry-After": "5"}) from None
    except JobTimeout as exc:
        raise WireError(504, "", f"{exc} (request_timeout_s)", "timeout") from None
    except ValueError as exc:  # DataError, ImageLoadError: the request, not the server
        raise WireError(422, "", str(exc), "invalid_request") from None


def _timing(start: float, done: Any) -> dict[str, float]:
    total = 1000 * (time.perf_counter() - start)
    return {
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
    pool = make_pool(judge, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = Batcher(
            make_run_batch(judge, config.max_candidates, pool),
            max_batch_items=config.max_batch_items,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
            on_batch=metrics.batch,
        )
        metrics.queue_depth = lambda: batcher.depth
        app.state.batcher = batcher
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()  # uvicorn has let in-flight requests finish; finish anything still queued

    app = FastAPI(title="mr-judge reward server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.judge = judge
    app.state.config = config
    app.state.metrics = metrics
    app.state.adapters = pool
    groups = GroupPool(config.group_size, config.group_wait_s)
    app.state.reward_groups = groups
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.exception_handler(WireError)
    async def wire_error(request: Request, exc: WireError) -> JSONResponse:
        metrics.error(exc.kind)
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        metrics.error(kind)
        return _error_response(WireError(exc.status_code, "", str(exc.detail), kind, exc.headers))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        metrics.error("internal")
        return _error_response(WireError(500, "", f"internal error ({type(exc).__name__})", "internal"))

    async def authorized(request: Request) -> None:
        check_api_key(request.headers.get("authorization"), config.api_key)

    async def json_body(request: Request) -> dict[str, Any]:
        return parse_json(await read_body(request, config.max_body_bytes))

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        batcher = request.app.state.batcher
        return {
            "status": "ok",
            "backend": getattr(judge.backend, "name", type(judge.backend).__name__),
            "queue_depth": batcher.depth,
            "max_batch_items": config.max_batch_items,
            "max_candidates": config.max_candidates,
        }

    @app.get("/metrics", dependencies=[Depends(authorized)])
    async def get_metrics() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/judge", dependencies=[Depends(authorized)])
    async def judge_items(request: Request) -> dict[str, Any]:
        start = time.perf_counter()
        body = await json_body(request)
        with adapter_lease(pool, body) as adapter:
            items = await run_in_threadpool(parse_judge_body, body, config)
            done = await _submit(request, JudgeWork(items, adapter), len(items))
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
            done = await _submit(request, RewardWork([reward_request], adapter), reward_cost(reward_request))
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
                done = await _submit(request, RewardWork(requests, adapter), cost)
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
        }

    return app


def _model(adapter: Revision | None) -> dict[str, str]:
    """The `model` a response was answered with: the adapter revision, or `base`."""
    return {"model": adapter.ref if adapter else "base"}
