"""The OpenAI chat-completions wire format shared by the loopback test servers.

The grader, thinking and tiny-model servers answer with the same envelopes; building them in one place keeps
what the clients under test read (ids, usage totals, the model list) the same on every server.
"""

from __future__ import annotations

import time
from typing import Any


def last_message_text(body: dict[str, Any]) -> str:
    """The text of a request's last message: a plain string, or its text parts joined (the parts form)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list):  # tolerate the parts form too; the evaluators send a plain string
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content


def model_list(*names: str) -> dict[str, Any]:
    """The body of `GET /v1/models` listing `names`."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "test"} for name in names],
    }


def serve_model_list(app: Any, *names: str) -> None:
    """Answer `GET /v1/models` on `app` with a fixed list of `names` (what clients probe before their first call)."""
    app.add_api_route("/v1/models", lambda: model_list(*names), methods=["GET"])


def chat_completion(
    model: str, choice: dict[str, Any], *, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A `chat.completion` body with one choice and its token usage."""
    return {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
