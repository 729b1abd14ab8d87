"""A backend named, not loaded: what a job carries to wherever its model is built.

A driver hands `ModelSpec`s to workers (a Ray actor per GPU, or this process for the local engine); each
builds its own backend once. Pickling drops a built backend, so a spec used locally can still be sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OUTPUT_OPTIONS", "ModelSpec"]

OUTPUT_OPTIONS = ("base", "dtype", "min_pixels", "max_pixels", "model_name")
"""Backend options that change what the model writes (others — device, keys, timeouts — do not)."""


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

    def settings(self) -> dict[str, Any]:
        """What of this spec shapes the model's outputs, for a resumable job's settings record: the model (a
        local folder as its absolute path), the backend and `OUTPUT_OPTIONS`; never a key or a device."""
        local = Path(self.model).expanduser()
        model = str(local.resolve()) if local.exists() else self.model
        options = {name: self.options[name] for name in OUTPUT_OPTIONS if self.options.get(name) is not None}
        return {"model": model, "backend": self.backend_name, **options}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}
