"""Inference backends behind one interface: transformers, OpenAI-compatible HTTP, vLLM offline."""

from judge.backends.base import Backend, ChatRequest, Generation, SamplingParams

__all__ = ["Backend", "ChatRequest", "Generation", "SamplingParams", "make_backend"]


def make_backend(model: str, backend: str | None = None, **kwargs) -> Backend:
    """Build a backend by name; `None` picks `openai` for http(s) URLs and `hf` otherwise.

    Args:
        model: a local folder or hub id (hf, vllm), or a server URL ending in `/v1` (openai).
        backend: "hf", "openai" or "vllm".
        kwargs: passed to the backend's constructor.

    A folder or hub id is checked first (`judge.models.check_model_source`): a missing folder fails at once,
    naming it, instead of after the hub's retries; an untrained factory model is reported.
    """
    if backend is None:
        backend = "openai" if model.startswith(("http://", "https://")) else "hf"
    if backend in ("hf", "vllm") and isinstance(model, str):
        from judge.models import check_model_source

        check_model_source(model)
    if backend == "hf":
        from judge.backends.hf import TransformersBackend

        return TransformersBackend(model, **kwargs)
    if backend == "openai":
        from judge.backends.openai_http import OpenAIBackend

        return OpenAIBackend(model, **kwargs)
    if backend == "vllm":
        from judge.backends.vllm_offline import VLLMBackend

        return VLLMBackend(model, **kwargs)
    raise ValueError(f"backend must be one of 'hf', 'openai', 'vllm', got {backend!r}")
