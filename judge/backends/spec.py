"""A backend named, not loaded: what a job carries to wherever its model is built.

A driver hands `ModelSpec`s to workers (a Ray actor per GPU, or this process for the local engine); each
builds its own backend once. Pickling drops a built backend, so a spec used locally can still be sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelSpec"]


@dataclass
class ModelSpec:
    """Which model a stage talks to: a folder / hub id, or an OpenAI-compatible URL."""

    model: str
    backend: str | None = None
    """hf, openai or vllm; default: openai for URLs, hf otherwise."""
    options: dict[str, Any] = field(default_factory=dict)
    """Backend constructor options (device, max_concurrency, api_key, …)."""
    _built: Any = field(default=None, init=False, repr=False, compare=False)

    def build(self) -> Any:
        """The backend, made once: stages that share a spec share one loaded model."""
        if self._built is None:
            from judge.backends import make_backend

            self._built = make_backend(self.model, self.backend, **self.options)
        return self._built

    @property
    def backend_name(self) -> str:
        """The backend this spec builds: the one named, or the default for its model."""
        return self.backend or ("openai" if self.model.startswith(("http://", "https://")) else "hf")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}
