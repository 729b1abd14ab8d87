"""The rule judge (`tiny_world.rule_judge`) behind a real OpenAI chat-completions server on loopback.

What `vllm serve` is to `mrjudge serve --model http://…/v1`, for tests that need several judge endpoints
and cannot afford a model each: it answers the judge's MC prompt for the candidate with the highest
`score=N` tag, counts the requests it answered, and can be switched to answer 503 (`state["fail"] = True`);
with `state["delay_s"]` each answer takes that long and `state["peak"]` records the most requests it held at once.

    with rule_openai_server() as (url, state): ...   # url: the /v1 root
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reward_server.background import serve_in_thread
from tiny_world.rule_judge import best_letter
from tiny_world.servers.wire import chat_completion, last_message_text, serve_model_list

MODEL_NAME = "rule-judge"


def make_rule_openai_app(state: dict[str, Any]) -> FastAPI:
    app = FastAPI()
    serve_model_list(app, MODEL_NAME)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        if state.get("fail"):
            return JSONResponse({"error": {"message": "overloaded", "type": "overloaded"}}, status_code=503)
        state["requests"] = state.get("requests", 0) + 1
        if state.get("delay_s"):
            state["in_flight"] = state.get("in_flight", 0) + 1
            state["peak"] = max(state.get("peak", 0), state["in_flight"])
            try:
                await asyncio.sleep(state["delay_s"])
            finally:
                state["in_flight"] -= 1
        content = f"<think>highest score</think><answer>{best_letter(last_message_text(body))}</answer>"
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        return JSONResponse(chat_completion(MODEL_NAME, choice, prompt_tokens=10, completion_tokens=5))

    return app


@contextmanager
def rule_openai_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """The server on a free loopback port, in a thread; yields (its `/v1` root, its state)."""
    state: dict[str, Any] = {"requests": 0}
    with serve_in_thread(make_rule_openai_app(state), start_timeout_s=20) as root:
        yield f"{root}/v1", state
