"""A stand-in for `mrjudge serve`'s `POST /v1/reward`, for the policy-reward tests (tests/judge, tests/training).

It calls `judge.reward.scoring.compute_rewards` on a rule judge (`tiny_world.rule_judge`), with switches
in a shared `state` dict to answer 503 to the first N calls, 500 to prompts carrying `ALWAYS_500`, hold answers
back, and demand an API key; it records request bodies, image sizes and the most requests in flight at once.
"""

from __future__ import annotations

import asyncio
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from judge.images import load_image
from judge.judging import Judge, JudgeConfig
from judge.reward.scoring import RewardRequest, compute_rewards
from judge.types import DataError
from tiny_world.rule_judge import RuleJudgeBackend

ALWAYS_500 = "[always-500]"
"""A prompt carrying this marker is answered 500 by the stand-in, every time."""


def rule_judge() -> Judge:
    return Judge(RuleJudgeBackend(), JudgeConfig(orders=2))


def fresh_state() -> dict:
    """The switches (all off) and counters (all zero) `make_reward_app` reads and writes."""
    # `active` is replaced, not cleared, so answers a previous test left sleeping do not count here.
    return {"calls": 0, "fail_first": 0, "delay_s": 0.0, "api_key": None, "active": [], "max_in_flight": 0,
            "bodies": [], "image_sizes": []}  # fmt: skip


def make_reward_app(state: dict) -> FastAPI:
    """The stand-in server; `state` is `fresh_state()`'s dict, shared with the test that holds it."""
    app = FastAPI()
    judge = rule_judge()
    lock = threading.Lock()

    def error(status: int, message: str, field: str | None, kind: str, **headers: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "field": field, "type": kind}}, status, headers=headers)

    @app.post("/v1/reward")
    async def reward(request: Request) -> JSONResponse:
        state["calls"] += 1
        number = state["calls"]  # read now: concurrent requests move the counter while this one awaits
        if state["api_key"] and request.headers.get("authorization") != f"Bearer {state['api_key']}":
            return error(401, "missing or wrong API key", None, "unauthorized")
        body = await request.json()
        active, token = state["active"], object()
        active.append(token)
        state["max_in_flight"] = max(state["max_in_flight"], len(active))
        try:
            if state["delay_s"]:
                await asyncio.sleep(state["delay_s"])
            if number <= state["fail_first"]:
                return error(503, "queue full", None, "overloaded", **{"Retry-After": "0"})
            if ALWAYS_500 in body["prompt"]:
                return error(500, "judge crashed", None, "internal")
            images = [load_image(url) for url in body.get("images") or []]
            state["image_sizes"].append([im.size for im in images])
            state["bodies"].append(body)
            req = RewardRequest(
                prompt=body["prompt"],
                responses=body["responses"],
                images=images,
                reference=body.get("reference"),
                mode=body.get("mode", "listwise"),
                tournament=body.get("tournament", "round_robin"),
            )
            try:
                with lock:
                    [result] = compute_rewards(judge, [req], max_options=8)
            except DataError as exc:
                return error(422, str(exc), exc.field_name, "invalid_request")
            return JSONResponse(
                {"rewards": result.rewards, "verdicts": [v.to_dict() for v in result.verdicts], "timing": result.timing}
            )
        finally:
            active.remove(token)

    return app
