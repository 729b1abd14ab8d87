"""The judge as an HTTP reward model: `create_app(judge, ServerConfig(...))`, served by `mrjudge serve`."""

from typing import Any

from reward_server.config import API_KEY_ENV, ServerConfig

__all__ = ["API_KEY_ENV", "ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    # FastAPI is imported when a server is built, not when `mrjudge`'s parser reads ServerConfig's fields:
    # every other command (judge, train, eval, synth) then runs where fastapi is not installed.
    if name == "create_app":
        from reward_server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
