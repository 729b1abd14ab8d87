"""The API key: every endpoint but `/health` and the API description needs `Authorization: Bearer KEY` when
the server has a key (`ServerConfig.api_key`)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from reward_server.errors import WireError

__all__ = ["authorized", "check_api_key"]


def check_api_key(authorization: str | None, api_key: str | None) -> None:
    """Refuse (401) unless `authorization` is `Bearer <api_key>`; constant-time, so timing reveals nothing."""
    if api_key is None:
        return
    challenge = {"WWW-Authenticate": "Bearer"}
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise WireError(
            401, "Authorization", "missing API key; send `Authorization: Bearer KEY`", "unauthorized", challenge
        )
    if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise WireError(401, "Authorization", "wrong API key", "unauthorized", challenge)


async def authorized(request: Request) -> None:
    """The FastAPI dependency of every guarded route."""
    check_api_key(request.headers.get("authorization"), request.app.state.service.config.api_key)
