"""The reward server's routes: HTTP only. Each reads its body (`reward_server.body`), calls the service on
`app.state.service` (`reward_server.service`) and returns its response model (`reward_server.protocol`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import PlainTextResponse

from reward_server.auth import authorized
from reward_server.body import parsed
from reward_server.errors import REFUSALS
from reward_server.metrics import CONTENT_TYPE
from reward_server.protocol import (
    AdaptersResponse,
    GetRewardRequest,
    GetRewardResponse,
    HealthResponse,
    JudgeRequest,
    JudgeResponse,
    RewardRequestBody,
    RewardResponse,
)
from reward_server.service import RewardService

__all__ = ["REQUEST_MODELS", "router"]

REQUEST_MODELS = (JudgeRequest, RewardRequestBody, GetRewardRequest)
"""Bodies the routes read themselves (size and UTF-8 checks first); `create_app` adds their schemas to
`/openapi.json`."""


async def _service(request: Request) -> RewardService:
    """`async`: FastAPI runs a plain `def` dependency in its thread pool, a trip per request that cost the
    event loop ~15 % of its time under load."""
    return request.app.state.service


def _reads(model: type) -> dict[str, Any]:
    """The route options of a POST that reads `model`: its documented body, the refusals, the API key."""
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    body = {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
    return {"openapi_extra": body, "responses": REFUSALS, "dependencies": [Depends(authorized)]}


Service = Annotated[RewardService, Depends(_service)]
router = APIRouter()


@router.get("/health", response_model_exclude_unset=True, responses={503: {"model": HealthResponse}})
async def health(service: Service, response: Response) -> HealthResponse:
    answer = service.health()
    response.status_code = 503 if answer.status == "degraded" else 200
    return answer


@router.get("/metrics", response_class=PlainTextResponse, dependencies=[Depends(authorized)])
async def metrics(service: Service) -> PlainTextResponse:
    """Prometheus text: requests, errors, cancellations, batches, rewards, queue depth, latency, adapters, and
    the reward audit's figures (`mrjudge_audit_*`) when the server has one."""
    return PlainTextResponse(service.metrics.render(), media_type=CONTENT_TYPE)


@router.post("/v1/judge", response_model_exclude_unset=True, **_reads(JudgeRequest))
async def judge(
    body: Annotated[JudgeRequest, Depends(parsed(JudgeRequest))], service: Service, request: Request
) -> JudgeResponse:
    return await service.judge_items(body, request)


@router.post("/v1/reward", response_model_exclude_unset=True, **_reads(RewardRequestBody))
async def reward(
    body: Annotated[RewardRequestBody, Depends(parsed(RewardRequestBody))], service: Service, request: Request
) -> RewardResponse:
    return await service.reward(body, request)


@router.post("/get_reward", response_model_exclude_unset=True, **_reads(GetRewardRequest))
async def get_reward(
    body: Annotated[GetRewardRequest, Depends(parsed(GetRewardRequest))], service: Service, request: Request
) -> GetRewardResponse:
    return await service.get_reward(body, request)


@router.get("/v1/adapters", response_model_exclude_unset=True, dependencies=[Depends(authorized)])
async def adapters(service: Service) -> AdaptersResponse:
    return service.adapters()
