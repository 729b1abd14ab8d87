"""Which model a stage runs on, if any, and how that model is set up for synthesis.

Every stage that can call a model also has a model-free kind: the synthetic world's scene generators
("scene") for negatives, describe and the reasoner, and hand-written rules ("rules") for the rewriter.
`model_for` makes that choice, the same way for every stage (and `check_kind` checks a config's choice before
any stage runs). A chosen model gets synthesis-sized client settings (`for_synthesis`), is built where the
batches run (`on_model`), and is recorded with its decoding in the stage's settings (`model_settings`).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from functools import partial
from typing import Any

from data_synthesis.sampling import DEFAULT_REQUEST_TIMEOUT_S, StageSampling
from jobs.executor import BatchFn
from judge.backends.spec import ModelSpec

__all__ = ["check_kind", "for_synthesis", "model_for", "model_settings", "on_model", "overrides", "rows_in_flight"]


def check_kind(name: str, kind: str, free: str = "scene") -> None:
    """`kind` must be `free` (the model-free kind) or "model"; `name` is the flag or config field that set it."""
    if kind not in (free, "model"):
        raise ValueError(f"{name} must be '{free}' or 'model', got {kind!r}")


def model_for(
    flag: str, kind: str, model: ModelSpec | None, *, free: str = "scene", needs: str = "--model"
) -> ModelSpec | None:
    """The model that `flag kind` runs the stage on: None for the model-free kind `free`, else `model`, which
    must then be given (`needs` says how)."""
    check_kind(flag, kind, free)
    if kind == free:
        return None
    if model is None:
        raise ValueError(f"{flag} model needs {needs}")
    return model


def for_synthesis(spec: ModelSpec | None, concurrency: int) -> ModelSpec | None:
    """An HTTP spec with synthesis-sized client settings (long timeout, `concurrency` in flight per batch)."""
    if spec is None or spec.backend_name != "openai":
        return spec
    options = {"timeout": DEFAULT_REQUEST_TIMEOUT_S, "max_concurrency": max(concurrency, 1), **spec.options}
    return ModelSpec(spec.model, spec.backend, options)


def rows_in_flight(concurrency: int, *specs: ModelSpec | None) -> int:
    """Rows in flight: `concurrency` when every model of the stage is behind HTTP, else 1 (batches feed
    an in-process engine better than threads do)."""
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    models = [spec for spec in specs if spec is not None]
    return concurrency if models and all(spec.backend_name == "openai" for spec in models) else 1


def model_settings(spec: ModelSpec, params: Any, **more: Any) -> dict[str, Any]:
    """A model stage's settings record: the model (`ModelSpec.settings`), its decoding, and `more`."""
    return {"model": spec.settings(), "sampling": asdict(params), **more}


def overrides(stage: str, sampling: StageSampling | dict[str, Any] | None, **fields: Any) -> StageSampling:
    """`sampling` as a `StageSampling`, with the set keyword fields (older flags such as --max-new-tokens) on top."""
    base = sampling if isinstance(sampling, StageSampling) else StageSampling.from_dict(stage, sampling)
    return replace(base, **{k: v for k, v in fields.items() if v is not None})


def _build_on_model(cls: Any, spec: ModelSpec, options: dict[str, Any]) -> Any:
    return cls(spec.build(), **options)


def on_model(cls: Any, spec: ModelSpec, **options: Any) -> BatchFn:
    """A stage class over a model, built where the batches run (one backend per worker)."""
    return BatchFn.on_models(partial(_build_on_model, cls, spec, options), spec, name=cls.__name__)
