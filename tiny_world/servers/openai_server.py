"""A real HTTP server on loopback that speaks OpenAI chat completions, backed by a tiny transformers model.

It exists so the OpenAI backend is tested against the protocol on the wire (FastAPI + uvicorn + the
official `openai` client), not against a mock object. It supports what judging uses: text and image_url
(data URL) parts, greedy and sampled decoding, `seed`, `logprobs` / `top_logprobs`, `GET /v1/models`, and
vLLM's runtime LoRA endpoints (`POST /v1/load_lora_adapter`, `/v1/unload_lora_adapter`; a request's `model`
names the adapter, loaded over the resident base with PEFT), and three fault switches: `fail_first` answers the first N requests with 503 (to exercise retries),
`reject_logprobs` answers 400 to requests asking for log-probs (to exercise the fallback), and `delay_s`
holds every answer back (to exercise timeouts).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from judge.backends.hf import TransformersBackend
from judge.images import load_image
from judge.models import LoadedModel
from reward_server.background import serve_in_thread
from tiny_world.servers.wire import chat_completion, model_list

MODEL_NAME = "tiny-judge"


def _split_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    images, out = [], []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image_url":
                    images.append(load_image(part["image_url"]["url"]))
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            content = parts
        out.append({"role": message["role"], "content": content})
    return out, images


def make_app(
    loaded: LoadedModel, *, fail_first: int = 0, reject_logprobs: bool = False, delay_s: float = 0.0
) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()  # one generate at a time: the model is not thread-safe
    state = {"requests": 0}
    tok = loaded.tokenizer
    adapters = TransformersBackend(loaded)  # adapter bookkeeping (PEFT) over the same resident model
    app.state.adapters = adapters

    @app.get("/v1/models")
    def models() -> dict:
        return model_list(MODEL_NAME, *adapters.adapters)

    async def lora_call(
        request: Request, action: Callable[[dict], None], done: str, error: tuple[str, int]
    ) -> JSONResponse:
        """vLLM's answer to a runtime LoRA call: its success sentence, or `error` (type, status) on a ValueError."""
        body = await request.json()
        with lock:
            try:
                action(body)
            except ValueError as exc:
                return JSONResponse({"error": {"message": str(exc), "type": error[0]}}, status_code=error[1])
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' {done} successfully.")

    @app.post("/v1/load_lora_adapter")
    async def load_lora(request: Request) -> JSONResponse:
        return await lora_call(
            request,
            lambda body: adapters.load_adapter(body["lora_name"], body["lora_path"]),
            "added",
            ("BadRequestError", 400),
        )

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora(request: Request) -> JSONResponse:
        return await lora_call(
            request, lambda body: adapters.unload_adapter(body["lora_name"]), "removed", ("NotFoundError", 404)
        )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        state["requests"] += 1
        if delay_s:
            await asyncio.sleep(delay_s)
        if state["requests"] <= fail_first:
            return JSONResponse({"error": {"message": "warming up", "type": "overloaded"}}, status_code=503)
        if reject_logprobs and body.get("logprobs"):
            return JSONResponse({"error": {"message": "logprobs are not supported", "type": "invalid_request"}}, 400)
        messages, images = _split_images(body["messages"])
        model = body.get("model", MODEL_NAME)
        with lock:
            if model != MODEL_NAME and model not in adapters.adapters:
                return JSONResponse({"error": {"message": f"model {model!r} does not exist"}}, status_code=404)
            with adapters.using_adapter(None if model == MODEL_NAME else model):
                return JSONResponse(_complete(adapters.loaded, tok, messages, images, body))

    return app


def _complete(loaded: LoadedModel, tok: Any, messages: list, images: list, body: dict) -> dict:
    processor = loaded.processor
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = (
        processor(text=[text], images=images or None, return_tensors="pt")
        if loaded.is_vlm
        else tok([text], return_tensors="pt")
    )
    temperature = float(body.get("temperature") or 0.0)
    kwargs: dict[str, Any] = dict(max_new_tokens=int(body.get("max_tokens") or 64), do_sample=temperature > 0)
    kwargs.update(
        dict(temperature=temperature, top_p=float(body.get("top_p") or 1.0))
        if temperature > 0
        else dict(temperature=None, top_p=None, top_k=None)
    )
    if body.get("seed") is not None:
        torch.manual_seed(int(body["seed"]))
    with torch.inference_mode():
        out = loaded.model.generate(
            **inputs, **kwargs, output_logits=True, return_dict_in_generate=True, pad_token_id=tok.pad_token_id
        )
    new = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    eos = loaded.model.generation_config.eos_token_id
    stops = {tok.pad_token_id, *([eos] if isinstance(eos, int) else eos)}
    n = next((i for i, t in enumerate(new) if t in stops), len(new))
    finish = "stop" if n < len(new) else "length"
    content = tok.decode(new[:n], skip_special_tokens=True)
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
    if body.get("logprobs"):
        top_k = int(body.get("top_logprobs") or 0)
        entries = []
        for step, token_id in enumerate(new[:n]):
            logp = torch.log_softmax(out.logits[step][0].float(), dim=-1)
            values, ids = logp.topk(top_k) if top_k else (logp[:0], logp[:0].long())
            piece = tok.decode([token_id])
            entries.append(
                {
                    "token": piece,
                    "logprob": float(logp[token_id]),
                    "bytes": list(piece.encode()),
                    "top_logprobs": [
                        {"token": tok.decode([i]), "logprob": float(v), "bytes": list(tok.decode([i]).encode())}
                        for v, i in zip(values.tolist(), ids.tolist())
                    ],
                }
            )
        choice["logprobs"] = {"content": entries}
    prompt_tokens = int(inputs["input_ids"].shape[1])
    return chat_completion(MODEL_NAME, choice, prompt_tokens=prompt_tokens, completion_tokens=n)


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run `app` on a free loopback port in a thread (`reward_server.background`); yields the `/v1` base URL."""
    with serve_in_thread(app, start_timeout_s=20) as root:
        yield f"{root}/v1"
