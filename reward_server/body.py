"""A request's body, read as the network sends it: against a size cap and a deadline, counted before it is
parsed, parsed off the event loop, every string checked as UTF-8, then validated against its model.

Nothing here trusts the client: a body over `max_body_bytes` is refused (413) as soon as that is known
(from `Content-Length`, else while it streams), one that has not all arrived within `body_timeout_s` is a
408, one with more than `max_json_values` commas and colons is refused before Python's parser (which holds
the GIL) sees it. Routes take the result as a FastAPI dependency:

    async def reward(body: Annotated[RewardRequestBody, Depends(parsed(RewardRequestBody))]) -> ...
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from reward_server.config import ServerConfig
from reward_server.errors import WireError, field_path, from_validation, invalid, quote, too_large, type_name

__all__ = ["BODY_BYTES", "INLINE_BODY_BYTES", "parse_json", "parsed", "read_body"]

M = TypeVar("M", bound=BaseModel)
BODY_BYTES = "mrjudge.body_bytes"
"""Where a request's body size is kept on its ASGI scope, once read (the service reads small requests inline)."""
INLINE_BODY_BYTES = 64 * 1024
"""Bodies up to this size are parsed on the event loop (well under a millisecond); larger ones on a worker thread,
so a big body cannot stall the other requests. Parsing a 1 KB body takes ~0.01 ms; a trip to a worker thread costs
the loop more, and the request then waits for the thread's turn at the GIL."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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
            raise too_large("body", f"{size} bytes is above max_body_bytes ({max_bytes})")
    chunks: list[bytes] = []

    async def receive_all() -> None:
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > max_bytes:
                raise too_large("body", f"more than max_body_bytes ({max_bytes}) bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(receive_all(), timeout_s)
    except asyncio.TimeoutError:
        message = f"the body did not arrive within body_timeout_s ({timeout_s:g} s)"
        raise WireError(408, "body", message, "timeout", {"Connection": "close"}) from None
    except ClientDisconnect:
        raise WireError(400, "body", "the client went away while sending the body", "client_disconnected") from None
    return b"".join(chunks)


def refuse_dense(raw: bytes, max_values: int) -> None:
    """413 when `raw` holds more than `max_values` commas and colons (counted at C speed, before parsing)."""
    separators = raw.count(b",") + raw.count(b":")
    if separators > max_values:
        raise too_large("body", f"{separators} commas and colons is above max_json_values ({max_values})")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object: 400 when it is not JSON, 422 when it is JSON but not an object or when
    any string in it (key or value) cannot be encoded as UTF-8 (JSON lets `"\\ud800"` through)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise WireError(400, "body", f"malformed JSON ({quote(str(exc))})", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid("body", f"expected a JSON object, got {type_name(body)}")
    if _SURROGATE_ESCAPE.search(raw):  # raw bytes are valid UTF-8 (or loads failed): only escapes can hide one
        _check_utf8(body)
    return body


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _children(value: dict | list) -> Iterator[tuple[Any, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _check_utf8(body: dict[str, Any]) -> None:
    """422 naming the first string (value or key, anywhere in `body`) that is not valid Unicode text.

    Depth-first over iterators, so the walk holds one iterator per level, whatever the body's size.
    """
    stack = [_children(body)]
    keys: list[Any] = []  # the key of each open container below the top: len(stack) - 1 of them
    while stack:
        for key, value in stack[-1]:
            if isinstance(key, str) and not _encodable(key):
                raise invalid(field_path([*keys, key]), "field name is not valid UTF-8 text (a lone surrogate)")
            if isinstance(value, str):
                if not _encodable(value):
                    message = "not valid UTF-8 text (a lone surrogate escape such as \\ud800)"
                    raise invalid(field_path([*keys, key]), message)
            elif isinstance(value, (dict, list)):
                keys.append(key)
                stack.append(_children(value))
                break
        else:
            stack.pop()
            if keys:
                keys.pop()


def _validated(model: type[M], raw: bytes, config: ServerConfig) -> M:
    try:
        return model.model_validate(parse_json(raw), context=config)
    except ValidationError as exc:
        raise from_validation(exc) from None


def parsed(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A FastAPI dependency: the request's body as `model`, or the `WireError` that says why not."""

    async def body(request: Request) -> M:
        service = request.app.state.service
        config: ServerConfig = service.config
        raw = await read_body(request, config.max_body_bytes, config.body_timeout_s)
        refuse_dense(raw, config.max_json_values)
        service.incoming.enter(request.scope)  # read: a batch forming now waits for it (left once queued or answered)
        request.scope[BODY_BYTES] = len(raw)
        if len(raw) <= INLINE_BODY_BYTES:
            return _validated(model, raw, config)  # faster here than the trip to a worker thread and back
        return await run_in_threadpool(_validated, model, raw, config)  # off the event loop

    return body
