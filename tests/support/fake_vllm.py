"""A loopback stand-in for `vllm serve`: records chat bodies and serves its generated-tokens counter."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from tiny_world.servers.wire import serve_model_list


def recording_vllm(seen: list[dict], generated: list[float]) -> FastAPI:
    """`seen` gets every chat body; `generated[0]` counts the tokens asked for (`max_tokens`), served on
    `/metrics` as vLLM's `vllm:generation_tokens_total`; `/v1/models` lists `judge`."""
    app = FastAPI()
    serve_model_list(app, "judge")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        seen.append(body)
        generated[0] += body.get("max_tokens", 0)
        message = {"role": "assistant", "content": "<think>ok</think><answer>A</answer>"}
        return {"id": "x", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}  # fmt: skip

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        lines = ["# TYPE vllm:generation_tokens_total counter",
                 f'vllm:generation_tokens_total{{engine="0",model_name="judge"}} {generated[0]}',
                 'vllm:generation_tokens_created{engine="0",model_name="judge"} 1.7e9']  # fmt: skip
        return PlainTextResponse("\n".join(lines) + "\n")

    return app
