"""Every answer the reward server gives is counted and timed, and every failure is an `ErrorResponse`.

`AnswerEveryRequest` counts responses by endpoint and status and answers any exception a request raises
with a 500 envelope; `install_error_handlers` writes refusals (`WireError`, and Starlette's own 404 / 405)
as envelopes and counts them by kind.
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reward_server.errors import WireError
from reward_server.metrics import Metrics

__all__ = ["AnswerEveryRequest", "error_response", "install_error_handlers"]

log = logging.getLogger("mrjudge.server")


def error_response(error: WireError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class AnswerEveryRequest:
    """Counts and times every response by endpoint and status, and answers any exception a request raises
    with a 500 envelope itself (pure ASGI: no body buffering).

    Starlette's own last-resort handler re-raises after answering, and uvicorn then closes the connection,
    so the client's next request on it is reset; answered here, the connection stays usable.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, endpoints: frozenset[str]) -> None:
        self.app = app
        self.metrics = metrics
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
            log.exception("unexpected error on %s", path)
            self.metrics.error("internal")
            if status is None:
                internal = WireError(500, "", f"internal error ({type(exc).__name__})", "internal")
                await error_response(internal)(scope, receive, send_wrapper)
        finally:
            endpoint = path if path in self.endpoints else "other"
            self.metrics.request(endpoint, status or 500, time.perf_counter() - start)


def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    """Refusals as `ErrorResponse` envelopes, counted by kind in `mrjudge_errors_total`."""

    @app.exception_handler(WireError)
    async def wire_error(request: Request, exc: WireError) -> JSONResponse:
        metrics.error(exc.kind)
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        metrics.error(kind)
        return error_response(WireError(exc.status_code, "", str(exc.detail), kind, exc.headers))
