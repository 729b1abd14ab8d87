"""Every answer the reward server gives is counted and timed, and every failure is an `ErrorResponse`.

`AnswerEveryRequest` counts responses by endpoint and status and answers any exception a request raises
with a 500 envelope; `install_error_handlers` writes refusals (`WireError`, and Starlette's own 404 / 405)
as envelopes and counts them by kind. Neither writes a log line per request: refusals and failures go
through the service's `LogSummary` (the first of a reason at once, then one line per interval), so a flood
of bad requests cannot flood the log.
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.batching import Incoming
from reward_server.errors import QUOTE_CHARS, WireError, safe_text
from reward_server.log_summary import LogSummary
from reward_server.metrics import Metrics

__all__ = ["AnswerEveryRequest", "error_response", "install_error_handlers"]


def error_response(error: WireError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class AnswerEveryRequest:
    """Counts and times every response by endpoint and status, and answers any exception a request raises
    with a 500 envelope itself (pure ASGI: no body buffering).

    Starlette's own last-resort handler re-raises after answering, and uvicorn then closes the connection,
    so the client's next request on it is reset; answered here, the connection stays usable.
    """

    def __init__(
        self, app: ASGIApp, metrics: Metrics, endpoints: frozenset[str], summary: LogSummary, incoming: Incoming
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.summary = summary
        self.incoming = incoming
        """Requests on their way to the judge's queue; a request answered before it got there leaves it here."""
        self.endpoints = endpoints
        """Paths counted by name; any other is counted as `other` (a client cannot grow the label set)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: int | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        path = scope.get("path", "")
        try:
            await self.app(scope, receive, send_wrapper)
        except ClientDisconnect:
            pass
        except Exception as exc:  # noqa: BLE001 - the last line: log it, answer 500, keep the connection
            message = safe_text(f"{path}: {type(exc).__name__}: {exc}", QUOTE_CHARS)
            self.summary.note("failed 500 internal", message, level=logging.ERROR, exc_info=exc)
            self.metrics.error("internal")
            if status is None:
                internal = WireError(500, "", f"internal error ({type(exc).__name__})", "internal")
                await error_response(internal)(scope, receive, send_wrapper)
        finally:
            self.incoming.leave(scope)
            endpoint = path if path in self.endpoints else "other"
            self.metrics.request(endpoint, status or 500, time.perf_counter() - start)


def install_error_handlers(app: FastAPI, metrics: Metrics, summary: LogSummary) -> None:
    """Refusals as `ErrorResponse` envelopes, counted by kind in `mrjudge_errors_total` and by status and reason
    in `mrjudge_refused_requests_total`, and summarised in the log (`LogSummary`), never a line each."""

    def refused(request: Request, error: WireError) -> JSONResponse:
        metrics.error(error.kind)
        metrics.refused(error.status, error.kind)
        where = f"{error.field}: " if error.field else ""
        client = f" from {request.client.host}" if request.client else ""
        message = f"{request.url.path}{client}: {where}{error.message}"
        internal = error.status == 500
        verb, level = ("failed", logging.ERROR) if internal else ("refused", logging.WARNING)
        summary.note(f"{verb} {error.status} {error.kind}", safe_text(message, QUOTE_CHARS), level=level)
        return error_response(error)

    @app.exception_handler(WireError)
    async def wire_error(request: Request, exc: WireError) -> JSONResponse:
        return refused(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return refused(request, WireError(exc.status_code, "", str(exc.detail), kind, exc.headers))
