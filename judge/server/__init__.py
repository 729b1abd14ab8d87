"""The judge as an HTTP reward model: `create_app(judge, ServerConfig(...))`, served by `mrjudge serve`."""

from judge.server.app import create_app
from judge.server.config import API_KEY_ENV, ServerConfig

__all__ = ["API_KEY_ENV", "ServerConfig", "create_app"]
