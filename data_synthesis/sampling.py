"""How each model stage of the data engine decodes, and how one row's request fails without sinking the stage.

Four stages talk to models, each with its own decoding defaults (override any field with the stage's
flags, e.g. `--reasoner-temperature 0.7`, or the `<stage>_sampling` field of a `synth all` config):

| stage | model class | temperature | top_p | max_tokens | source |
|---|---|---|---|---|---|
| reasoner | text reasoning model (QwQ-32B, DeepSeek-R1) | 0.6 | 0.95 | 32768 | QwQ-32B and DeepSeek-R1 model cards |
| rewriter | the reasoner, by default | 0.6 | 0.95 | 32768 | same cards (it thinks before it rewrites) |
| describer | MLLM (Qwen2.5-VL) | 0.0 | 1.0 | 2048 | Qwen2.5-VL generation_config (near-greedy) |
| generator | MLLM (Qwen2.5-VL) | 0.7 | 0.8 | 2048 | Qwen2.5-Instruct generation_config |

The model cards say not to decode a reasoning model greedily ("endless repetitions") and evaluate with up
to 32,768 generated tokens; thinking is counted in `max_tokens`, so a smaller budget cuts replies (they are
counted as `truncated` and never kept). A `seed` makes a stage's sampling repeatable: each row gets its own
seed derived from the stage seed and the row id, so a row's request does not depend on which rows shared
its batch, and a rerun of failed rows asks exactly what an uninterrupted run asked.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from judge.backends.base import Backend, ChatRequest, Generation, SamplingParams
from judge.config import setting

__all__ = [
    "DEFAULTS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "MODEL_ROLES",
    "SOURCES",
    "RequestFailed",
    "StageSampling",
    "failure_reason",
    "generate_rows",
    "row_seed",
    "sampling_for",
]

MODEL_ROLES = ("reasoner", "rewriter", "describer", "generator")
"""The four parts of the data engine that can call a model, each with its own decoding (`DEFAULTS`)."""

DEFAULT_CONCURRENCY = 256
"""Requests in flight to an HTTP endpoint. vLLM's server admits up to `max_num_seqs` sequences at once
(256 by default on most GPUs, 1024 on H100/H200-class ones, in vLLM 0.32's `EngineArgs`), and with long
thinking traces its KV cache, not this number, is what limits the batch; requests beyond what it can run
wait in vLLM's own queue, where they cost nothing but count against the client timeout."""

DEFAULT_REQUEST_TIMEOUT_S = 3600.0
"""Seconds per HTTP attempt: a 32k-token thinking reply at ~20 tokens/s per sequence under load takes
~25 minutes, plus the time spent queued behind other requests."""


@dataclass
class StageSampling:
    """One model stage's decoding; a field left `None` takes the stage default (`DEFAULTS`)."""

    temperature: float | None = setting(None, "sampling temperature")
    top_p: float | None = setting(None, "nucleus sampling top_p")
    max_tokens: int | None = setting(None, "generation budget per reply (thinking included)")
    seed: int | None = setting(None, "per-row seeds are derived from it; default: unseeded")

    @classmethod
    def from_dict(cls, stage: str, values: dict[str, Any] | None) -> StageSampling:
        """From a config mapping, refusing unknown keys with the valid ones."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{stage}_sampling: unknown field(s) {unknown}; use {sorted(known)}")
        return cls(**values)


DEFAULTS: dict[str, StageSampling] = {
    "reasoner": StageSampling(temperature=0.6, top_p=0.95, max_tokens=32768),
    "rewriter": StageSampling(temperature=0.6, top_p=0.95, max_tokens=32768),
    "describer": StageSampling(temperature=0.0, top_p=1.0, max_tokens=2048),
    "generator": StageSampling(temperature=0.7, top_p=0.8, max_tokens=2048),
}
"""Per-stage defaults; `SOURCES` says where each comes from."""

SOURCES: dict[str, str] = {
    "reasoner": "QwQ-32B model card (Temperature=0.6, TopP=0.95, not greedy; max_new_tokens=32768) and "
    "DeepSeek-R1 model card (temperature 0.5-0.7, 0.6 recommended; top-p 0.95; generation up to 32,768 tokens)",
    "rewriter": "the reasoner's cards: by default the rewriter is the reasoning model, which thinks before rewriting",
    "describer": "Qwen2.5-VL-7B-Instruct generation_config.json (temperature 1e-06, top_k 1: effectively greedy); "
    "2048 tokens leaves room for a detailed description",
    "generator": "Qwen2.5-7B-Instruct generation_config.json (temperature 0.7, top_p 0.8); retries need sampling "
    "for variety; 2048 tokens fit a JSON list of three long answers",
}


def sampling_for(stage: str, overrides: StageSampling | dict[str, Any] | None = None) -> SamplingParams:
    """The stage's `SamplingParams`: its defaults, with every field set in `overrides` taking precedence."""
    if stage not in DEFAULTS:
        raise ValueError(f"no sampling defaults for stage {stage!r}; stages: {', '.join(MODEL_ROLES)}")
    if isinstance(overrides, dict) or overrides is None:
        overrides = StageSampling.from_dict(stage, overrides)
    merged = {**asdict(DEFAULTS[stage]), **{k: v for k, v in asdict(overrides).items() if v is not None}}
    try:
        return SamplingParams(
            max_new_tokens=int(merged["max_tokens"]),
            temperature=float(merged["temperature"]),
            top_p=float(merged["top_p"]),
            seed=merged["seed"],
        )
    except ValueError as exc:
        raise ValueError(f"{stage} sampling (--{stage}-… flags, or {stage}_sampling in a config): {exc}") from exc


def row_seed(seed: int | None, row_id: object, salt: int = 0) -> int | None:
    """A row's own seed: the stage seed plus a stable hash of the id (and `salt`, e.g. an attempt number)."""
    if seed is None:
        return None
    return (seed * 1_000_003 + zlib.crc32(f"{row_id}:{salt}".encode())) % (2**31 - 1)


class RequestFailed(RuntimeError):
    """A model request that still failed after the client's retries; `reason` is a short, countable label."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def failure_reason(exc: BaseException) -> str | None:
    """A countable label for a transport failure (timeout, server error, …); `None` for any other error.

    Other errors (a bad config, a bug, a local model out of memory) are not per-row failures: they stop the
    stage, as before.
    """
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a core dependency
        openai = None  # type: ignore[assignment]
    if openai is not None:
        if isinstance(exc, openai.APITimeoutError):
            return "timeout"
        if isinstance(exc, openai.APIConnectionError):
            return "connection_error"
        if isinstance(exc, openai.RateLimitError):
            return "rate_limited"
        if isinstance(exc, openai.APIStatusError):
            return "server_error" if exc.status_code >= 500 else f"http_{exc.status_code}"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "connection_error"
    return None


def _call(backend: Backend, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
    try:
        return backend.generate(requests, params)
    except Exception as exc:
        reason = failure_reason(exc)
        if reason is None:
            raise
        raise RequestFailed(reason, f"{type(exc).__name__}: {str(exc)[:200]}") from exc


async def _each(backend: Any, requests: Sequence[ChatRequest], params: list[SamplingParams]) -> list[Generation]:
    replies = await asyncio.gather(
        *(backend.agenerate([r], p) for r, p in zip(requests, params)), return_exceptions=True
    )
    first_error = next((r for r in replies if isinstance(r, BaseException)), None)
    if first_error is not None:
        raise first_error
    return [r[0] for r in replies]  # type: ignore[index]


def generate_rows(
    backend: Backend,
    requests: Sequence[ChatRequest],
    params: SamplingParams,
    row_ids: Sequence[object],
    salt: int = 0,
) -> list[Generation]:
    """One reply per request, each seeded by its row (when `params.seed` is set), failures as `RequestFailed`.

    Without a seed this is one batched call. With one, an HTTP backend gets each row's own seed (requests
    still go out together); an in-process engine takes one seed per batch, as it always has.
    """
    if not requests:
        return []
    if params.seed is None or not hasattr(backend, "agenerate"):
        return _call(backend, requests, params)
    per_row = [replace(params, seed=row_seed(params.seed, rid, salt)) for rid in row_ids]
    if len(requests) == 1:
        return _call(backend, requests, per_row[0])

    class _Each:
        name = backend.name

        def generate(self, reqs: Sequence[ChatRequest], _: SamplingParams) -> list[Generation]:
            return asyncio.run(_each(backend, reqs, per_row))

    return _call(_Each(), requests, params)
