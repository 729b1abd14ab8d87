"""A real loopback OpenAI chat-completions server that answers the synthesis prompts as a thinking model does.

No weights: the replies are computed from the prompt with rules simple enough to check by hand, so tests
can say exactly which traces must be kept. Each request is tied to a row by a *key* found in its text (a
test puts the row id in the question) and answered in that key's *mode* (default `"reasoning_content"`):

- `reasoning_content` / `reasoning`: the thinking in that message field (DeepSeek and vLLM < 0.11 / vLLM
  >= 0.11), only `<answer>X</answer>` in `content`;
- `think_in_content`: `<think>thinking</think>` then the answer, all in `content` (no reasoning parser);
- `template_think`: as above without the opening tag (QwQ/R1 chat templates put `<think>` in the prompt);
- `nested`: thinking in `reasoning_content`, and `content` holds a second, written `<think>` block;
- `plan_tags`: the thinking also plans the output format ("I will write <think> … tags");
- `truncated`: cut at the budget (`finish_reason: "length"`), thinking unfinished, empty `content`;
- `wrong`: reasons its way to an option other than the hinted one;
- `fail500:N` / `timeout:N`: the first N requests for the key answer 500 / wait `slow_s` (longer than
  the client's timeout), later ones answer as `reasoning_content`.

The reasoner's thinking is `THINKING.format(...)`: it names the key, checks each option against the
description, and mentions the hint (which the rewriter must remove). Rewrite prompts are answered by a
thinking rewriter whose own thinking (`REWRITER_THINKING`) must never reach a kept trace; in the key's
mode `think_in_content` it writes that thinking as a leading `<think>` block, followed by the rewrite.
Describe and negatives prompts get a description / a JSON list (thinking apart; cut off in mode
`truncated`, which the key `""` gives every request that names no other key). `delay_s` holds every answer back (for
throughput); `app.state.stats` counts requests per key, records each request's sampling fields, and keeps the most
requests seen in flight at once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tiny_world.servers.wire import chat_completion, last_message_text, serve_model_list

MODEL_NAME = "tiny-thinker"
THINKING = (
    "Reasoning about {key}: the description says the shape is {colour}. "
    "Option {letter} says {colour}, which matches the description. {others} "
    "The hint says {hinted}, and I checked it against the description myself."
)
REWRITER_THINKING = "META-REWRITER: the user wants the judgement rewritten; I keep every step."
PLAN_SENTENCE = "I will write my reasoning inside <think> tags and the letter in <answer> tags."
_HINT = re.compile(r"preferred option ([A-Z])")
_OPTION = re.compile(r"^([A-Z])\. (.*)$", re.MULTILINE)


def _reply(content: str, *, reasoning: str | None = None, field: str = "reasoning_content", finish: str = "stop"):
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message[field] = reasoning
    tokens = len((reasoning or "").split()) + len(content.split())
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return chat_completion(MODEL_NAME, choice, prompt_tokens=10, completion_tokens=tokens)


def _reason(text: str, key: str, mode: str) -> dict[str, Any]:
    hinted = _HINT.search(text).group(1)
    options = dict(_OPTION.findall(text.split("Candidates:", 1)[1]))
    letter = hinted
    if mode == "wrong":
        letter = next(label for label in options if label != hinted)
    colour = options[letter].rstrip(".").split()[-1]
    others = " ".join(f"Option {label} does not match." for label in options if label != letter)
    thinking = THINKING.format(key=key, colour=colour, letter=letter, others=others, hinted=hinted)
    answer = f"<answer>{letter}</answer>"
    if mode == "truncated":
        return _reply("", reasoning=thinking[: len(thinking) // 2], finish="length")
    if mode == "reasoning":
        return _reply(answer, reasoning=thinking, field="reasoning")
    if mode == "think_in_content":
        return _reply(f"<think>{thinking}</think>\n\n{answer}")
    if mode == "template_think":
        return _reply(f"{thinking}\n</think>\n\n{answer}")
    if mode == "nested":
        return _reply(f"<think>A second, written trace for {key}.</think>{answer}", reasoning=thinking)
    if mode == "plan_tags":
        return _reply(answer, reasoning=f"{PLAN_SENTENCE} {thinking}")
    return _reply(answer, reasoning=thinking)


def _rewrite(text: str, mode: str) -> dict[str, Any]:
    judgement = text.split("\n\n", 1)[1]
    if text.startswith("Rewrite the judgement below so that it never mentions a hint"):
        out = re.sub(r"[^.<>]*\bhint\b[^.<>]*\.\s*", "", judgement)
    else:
        out = judgement.replace("the description says", "the image shows").replace("the description", "the image")
    if mode == "think_in_content":
        return _reply(f"<think>{REWRITER_THINKING}</think>\n{out}")
    return _reply(out, reasoning=REWRITER_THINKING)


def _negatives(text: str) -> dict[str, Any]:
    answer = text.split("Correct answer: ", 1)[1].split("\n", 1)[0]
    flaws = ["hallucinated_attribute", "incomplete", "incorrect_reasoning"]
    items = [{"answer": f"{answer.rstrip('.')} and {word}.", "flaw": f} for word, f in zip("xyz", flaws)]
    return _reply(json.dumps(items), reasoning="I will write three flawed answers as JSON.")


def make_thinking_app(
    modes: dict[str, str] | None = None,
    *,
    keys: list[str] | None = None,
    delay_s: float = 0.0,
    slow_s: float = 5.0,
) -> FastAPI:
    """The server; `modes` maps a key (found in a request's text) to its mode, `keys` lists other keys."""
    modes = dict(modes or {})
    known = sorted(set(keys or []) | set(modes), key=len, reverse=True)  # longest first: "i10" before "i1"
    app = FastAPI()
    stats: dict[str, Any] = {
        "requests": Counter(),
        "in_flight": 0,
        "max_in_flight": 0,
        "failures": Counter(),
        "sampling": [],
    }
    app.state.stats = stats

    serve_model_list(app, MODEL_NAME)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        text = last_message_text(body)
        key = next((k for k in known if re.search(rf"\b{re.escape(k)}\b", text)), "")
        mode = modes.get(key, "reasoning_content")
        stats["requests"][key] += 1
        stats["sampling"].append(
            {"key": key, **{f: body.get(f) for f in ("temperature", "top_p", "max_tokens", "seed")}}
        )
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            kind, _, count = mode.partition(":")
            if kind in ("fail500", "timeout") and stats["requests"][key] <= int(count):
                stats["failures"][key] += 1
                if kind == "timeout":
                    await asyncio.sleep(slow_s)
                return JSONResponse({"error": {"message": "engine overloaded", "type": "server_error"}}, 500)
            if kind in ("fail500", "timeout"):
                mode = "reasoning_content"
            if "Image description:" in text:
                return JSONResponse(_reason(text, key, mode))
            if text.startswith("Rewrite the judgement below"):
                return JSONResponse(_rewrite(text, mode))
            if "Correct answer:" in text:
                if mode == "truncated":
                    return JSONResponse(_reply('[{"answer": "The sha', finish="length"))
                return JSONResponse(_negatives(text))
            if text.startswith("Describe this image"):
                if mode == "truncated":
                    return JSONResponse(_reply("A red sha", finish="length"))
                return JSONResponse(_reply("A red shape in the middle.", reasoning="Looking at the image."))
            return JSONResponse({"error": {"message": "unknown prompt", "type": "invalid_request"}}, 400)
        finally:
            stats["in_flight"] -= 1

    return app
