"""The reward server: `create_app(judge, ServerConfig(...))`, a FastAPI app in vLLM's server layout.

`routes.py` handles HTTP only, `protocol.py` holds the request and response models (`/docs`,
`/openapi.json`), `service.py` the batching, planning and judge calls (on `app.state.service`), and every
refusal is one typed envelope, `{"error": {"message", "field", "type"}}` (`errors.py`); the worker survives
any request, and an unexpected failure is a 500 envelope that leaves the connection usable.

    app = create_app(Judge(make_backend("runs/judge"), JudgeConfig(orders=2)), ServerConfig(port=8000))
    uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints: `POST /v1/judge`, `POST /v1/reward`, `POST /get_reward` (OpenRLHF; one-sample requests are held
in groups of `group_size`, `reward_server.get_reward`), `GET /health`, `GET /metrics`, `GET /v1/adapters`,
and the API description, `GET /docs` and `GET /openapi.json` (which, like `/health`, need no key). Rewards
are planned by `judge.reward.planner` (the planner TRL, verl and OpenRLHF share); unscored ones are counted
in `/metrics` (`mrjudge_rewards_total{outcome}`). With an adapter store, a request's `"model"` picks a LoRA
revision over the resident base (`reward_server.adapters`). With `ServerConfig.audit`, a seeded share of the
judged reward groups is scored again beside the reward, its figures on `/metrics` (`reward_server.audit`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from judge.judging import Judge
from reward_server.config import ServerConfig
from reward_server.middleware import AnswerEveryRequest, install_error_handlers
from reward_server.routes import REQUEST_MODELS, router
from reward_server.service import RewardService

__all__ = ["create_app"]

DOCS = ("/docs", "/openapi.json")


def create_app(judge: Judge, config: ServerConfig | None = None) -> FastAPI:
    """The reward server around `judge` (any backend). Start it with uvicorn; the batcher starts with it.

    Args:
        judge: the judge every endpoint uses; only the batcher's single thread ever calls it.
        config: listening, batching and input limits (`ServerConfig()` when omitted).
    """
    service = RewardService(judge, config or ServerConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="mr-judge reward server",
        summary="A multimodal reasoning judge as the reward model of GRPO training (TRL, verl, OpenRLHF).",
        lifespan=lifespan,
        docs_url=DOCS[0],
        openapi_url=DOCS[1],
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.service = service
    app.include_router(router)
    install_error_handlers(app, service.metrics, service.log_summary)
    endpoints = frozenset({*DOCS, *(route.path for route in router.routes)})  # type: ignore[attr-defined]
    app.add_middleware(
        AnswerEveryRequest,
        metrics=service.metrics,
        endpoints=endpoints,
        summary=service.log_summary,
        incoming=service.incoming,
    )
    _document_request_bodies(app)
    return app


def _document_request_bodies(app: FastAPI) -> None:
    """Add the request models' schemas to `/openapi.json`: the routes read their bodies themselves (size and
    UTF-8 checks before any parsing), so FastAPI does not see them as body parameters."""
    _, definitions = models_json_schema(
        [(model, "validation") for model in REQUEST_MODELS], ref_template="#/components/schemas/{model}"
    )
    fastapi_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = fastapi_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions["$defs"])
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
