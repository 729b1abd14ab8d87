"""The OpenAI-compatible HTTP backend: `vllm serve`, hosted APIs, or any server speaking chat completions.

Requests run concurrently on the official `openai` async client, at most `max_concurrency` at a time;
the client retries connection errors, 408/409/429 and 5xx with exponential back-off (`max_retries`), and
each attempt is bounded by `timeout`. Images travel as PNG data URLs, shrunk first to `max_pixels` (Qwen's
rule) when it is set and the `Judge` has not sized them already (`ChatRequest.images_fitted`), so a server
gets what its model will use and not a multi-megabyte photo. Option log-probs come from the `top_logprobs`
of the token where the answer label was written; a server that refuses `logprobs` is asked again without
them, once, and remembered.

Several endpoints (`base_url` a list, or comma-separated: `mrjudge serve --model http://a:8001/v1,http://b:8001/v1`)
serving the same model are used as one: each chat request goes to the endpoint with the fewest requests in
flight, and one that fails (connection error, timeout, 408, 429, 5xx) is skipped for a cool-off while the
request moves to another at once (`judge.reward.wire.Replicas`, `Failover`); the client's own retries are
then off and `max_retries` counts rounds over the endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from judge.backends.base import ChatRequest, Generation, SamplingParams, answer_label_logprobs, locate_token
from judge.images import PixelRange, fit_pixels, image_to_data_url
from judge.reward.wire import (
    CONNECT_TIMEOUT_S,
    Failover,
    Replicas,
    RetryPolicy,
    is_retryable,
    retry_after_s,
    server_urls,
)

__all__ = ["API_KEY_ENV_VARS", "OpenAIBackend", "endpoint_error"]

API_KEY_ENV_VARS = ("MRJUDGE_API_KEY", "OPENAI_API_KEY")
"""Where the API key is looked for when none is passed, in this order."""

LARGE_IMAGE_PIXELS = 12_845_056
"""Qwen2.5-VL's processor default `max_pixels` (3584²): an image above it is shrunk by the server anyway, so
sending it whole only costs time; past it, with no `max_pixels` set here, the backend says so once."""

logger = logging.getLogger("judge.backends.openai_http")


def _with_image_urls(messages: list[dict[str, Any]], images: Sequence[Any]) -> list[dict[str, Any]]:
    """Replace `{"type": "image"}` placeholders, in order, by `image_url` parts carrying data URLs."""
    urls = iter(image_to_data_url(image) for image in images)
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {"type": "image_url", "image_url": {"url": next(urls)}} if part.get("type") == "image" else part
                for part in content
            ]
        out.append({**message, "content": content})
    return out


class OpenAIBackend:
    """Judge through an OpenAI-compatible chat-completions server.

    Args:
        base_url: the server's API root, e.g. `http://127.0.0.1:8000/v1`; or several servers of the same model
            (a list, or comma-separated): each request goes to the one with the fewest in flight.
        model_name: the served model; default: the first one `GET /models` lists.
        api_key: default: `$MRJUDGE_API_KEY`, then `$OPENAI_API_KEY`, then "EMPTY" (local servers).
        max_concurrency: requests in flight at once, per server.
        timeout: seconds per attempt.
        max_retries: retries per request, with exponential back-off.
        top_logprobs: alternatives asked per token (OpenAI allows up to 20); 0 disables log-probs.
        min_pixels, max_pixels: images are resized into this range before they are sent (Qwen's rule: aspect
            kept, sides multiples of 28); unset: sent as they are, and the server's processor decides.
        extra_body: engine-specific fields sent with every request, e.g. vLLM's `{"min_tokens": 64,
            "ignore_eos": True}` (the throughput benchmarks force one generation length this way).
        replica_cooloff_s: with several servers, how long one that failed is skipped (doubling per failure in
            a row, up to 60 s).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        model_name: str | None = None,
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        max_retries: int = 3,
        top_logprobs: int = 20,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        extra_body: dict[str, Any] | None = None,
        replica_cooloff_s: float = 5.0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency ({max_concurrency}) must be at least 1")
        self.base_urls = [url.rstrip("/") for url in server_urls(base_url)]
        if not self.base_urls:
            raise ValueError(f"no server address in {base_url!r}")
        self.pixels = PixelRange(min_pixels, max_pixels)
        self.base_url = ",".join(self.base_urls)
        self.replicas = Replicas(self.base_urls, cooloff_s=replica_cooloff_s)
        """The servers, with requests in flight, requests sent and cool-offs per server (several only)."""
        self.api_key = api_key or next((os.environ[v] for v in API_KEY_ENV_VARS if os.environ.get(v)), "EMPTY")
        self.model_name = model_name
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.top_logprobs = top_logprobs
        self._logprobs_supported = top_logprobs > 0
        self.extra_body = dict(extra_body or {})
        self._warned_large = False

    def _client(self, base_url: str | None = None) -> Any:
        """A client of one server; with several, its own retries are off (`Failover` moves a failed request)."""
        import httpx
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        return AsyncOpenAI(
            base_url=base_url or self.base_urls[0],
            api_key=self.api_key,
            # A server that never accepts (a dead host) costs at most CONNECT_TIMEOUT_S, not the whole timeout.
            timeout=httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT_S, self.timeout)),
            max_retries=self.max_retries if len(self.base_urls) == 1 else 0,
            http_client=DefaultAsyncHttpxClient(verify=_ssl_context()),
        )

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        """Blocking wrapper around `agenerate`; inside a running event loop, await `agenerate` instead."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(requests, params))
        raise RuntimeError("OpenAIBackend.generate was called inside an event loop; use `await backend.agenerate(...)`")

    # -- LoRA adapters: vLLM's runtime endpoints (`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve --enable-lora`)

    def load_adapter(self, name: str, path: str) -> None:
        """`POST /v1/load_lora_adapter`; requests then name the adapter as their `model`.

        Each revision gets a new name: vLLM keys its prefix cache by adapter, so a new name can never hit
        blocks computed with an older revision's weights (reloading under a reused name can).
        """
        self._admin("load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload_adapter(self, name: str) -> None:
        """`POST /v1/unload_lora_adapter`."""
        self._admin("unload_lora_adapter", {"lora_name": name})

    def _admin(self, endpoint: str, body: dict[str, Any]) -> None:
        """`POST {server}/{endpoint}` on every server (each must hold the same adapters)."""
        import httpx

        for base_url in self.base_urls:
            response = httpx.post(
                f"{base_url}/{endpoint}",
                json=body,
                headers={"Authorization": f"Bearer {self.api_key}"},
                timeout=self.timeout,
            )
            if response.status_code != 200:
                raise RuntimeError(
                    f"{base_url}/{endpoint} answered {response.status_code}: {response.text[:300]} (start vLLM "
                    "with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True for runtime adapters)"
                )

    async def agenerate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        if len(self.base_urls) > 1:
            return await self._agenerate_replicated(requests, params)
        async with self._client() as client:
            if self.model_name is None:
                models = await client.models.list()
                if not models.data:
                    raise RuntimeError(f"the server at {self.base_url} serves no model")
                self.model_name = models.data[0].id
            gate = asyncio.Semaphore(self.max_concurrency)

            async def one(index: int, request: ChatRequest) -> Generation:
                async with gate:
                    seed = None if params.seed is None else params.seed + index
                    return await self._complete(client, request, params, seed)

            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))

    async def _agenerate_replicated(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        """`agenerate` over several servers: each request to the least busy one, moved on when one fails."""
        from openai import APIConnectionError, APIStatusError

        retry = RetryPolicy(max_retries=self.max_retries, backoff_s=0.5, max_backoff_s=8.0, timeout_s=self.timeout)
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(self._client(url)) for url in self.base_urls]
            # `max_concurrency` per server, also when the others are cooling off and one takes all requests.
            gates = [asyncio.Semaphore(self.max_concurrency) for _ in clients]

            async def call(work: Any) -> Any:
                failover, last = Failover(self.replicas, retry), None
                while (step := failover.next()) is not None:
                    replica, wait_s = step
                    if wait_s:
                        await asyncio.sleep(wait_s)
                    failover.started()  # outstanding from here: requests waiting for its gate count too
                    try:
                        async with gates[replica]:
                            result = await work(clients[replica])
                    except APIConnectionError as exc:  # refused, reset, timed out: the next server, at once
                        failover.unreachable()
                        last = exc
                        continue
                    except APIStatusError as exc:
                        failover.answered(exc.status_code, retry_after_s(exc.response.headers.get("retry-after")))
                        if not is_retryable(exc.status_code):
                            raise
                        last = exc
                        continue
                    except BaseException:
                        failover.abandoned()
                        raise
                    failover.answered(200)
                    return result
                assert last is not None
                raise last

            if self.model_name is None:
                models = await call(lambda client: client.models.list())
                if not models.data:
                    raise RuntimeError(f"the servers at {self.base_url} serve no model")
                self.model_name = models.data[0].id

            async def one(index: int, request: ChatRequest) -> Generation:
                seed = None if params.seed is None else params.seed + index
                return await call(lambda client: self._complete(client, request, params, seed))

            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))

    def _sized(self, request: ChatRequest) -> list[Any]:
        """The request's images at the size to send: resized here only when no one has sized them yet."""
        if request.images_fitted:
            return list(request.images)
        if not self.pixels:
            self._warn_if_large(request.images)
            return list(request.images)
        return [fit_pixels(image, **self.pixels.options()) for image in request.images]

    def _warn_if_large(self, images: Sequence[Any]) -> None:
        if self._warned_large:
            return
        for image in images:
            width, height = getattr(image, "size", (0, 0))
            if width * height > LARGE_IMAGE_PIXELS:
                self._warned_large = True
                logger.warning(
                    "warning: an image of %d×%d (%.1f MP) goes to %s at full size, and the server shrinks it "
                    "anyway: set --max-pixels (e.g. 1003520, 1280×28×28) to send images at the size the model uses",
                    width,
                    height,
                    width * height / 1e6,
                    self.base_url,
                )
                return

    async def _complete(
        self, client: Any, request: ChatRequest, params: SamplingParams, seed: int | None
    ) -> Generation:
        from openai import BadRequestError

        body: dict[str, Any] = dict(
            **({"extra_body": self.extra_body} if self.extra_body else {}),
            model=request.adapter or self.model_name,
            messages=_with_image_urls(request.messages, self._sized(request)),
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
        )
        if seed is not None:
            body["seed"] = seed
        want_logprobs = bool(request.n_options) and self._logprobs_supported
        if want_logprobs:
            body.update(logprobs=True, top_logprobs=self.top_logprobs)
        try:
            response = await client.chat.completions.create(**body)
        except BadRequestError as exc:
            if not want_logprobs or "logprob" not in str(exc).lower():
                raise
            self._logprobs_supported = False  # this server has no log-probs: stop asking
            body.pop("logprobs"), body.pop("top_logprobs")
            response = await client.chat.completions.create(**body)
            want_logprobs = False
        choice = response.choices[0]
        text = choice.message.content or ""
        label_logprobs = None
        content = getattr(choice.logprobs, "content", None) if want_logprobs else None
        if content:
            pieces = [token.token for token in content]
            label_logprobs = answer_label_logprobs(
                text,
                request.n_options or 0,
                step_alternatives=lambda step: [(alt.token, alt.logprob) for alt in content[step].top_logprobs or []],
                locate=lambda pos: locate_token(pieces, pos),
            )
        usage = getattr(response, "usage", None)  # servers that omit it leave the counts at 0
        return Generation(
            text=text,
            label_logprobs=label_logprobs,
            reasoning=_reasoning_of(choice.message),
            finish_reason=choice.finish_reason,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )


_SSL_CONTEXT: Any = None


def _ssl_context() -> Any:
    """One TLS context for every client: building one costs ~40 ms of CPU, which a client per call (a
    synthesis stage keeping hundreds of one-row calls in flight) would otherwise pay each time."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        import httpx

        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


def _reasoning_of(message: Any) -> str | None:
    """A reasoning parser's output: `reasoning` (vLLM >= 0.11), or `reasoning_content` (older vLLM, DeepSeek)."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def endpoint_error(exc: BaseException) -> str | None:
    """One line for a failed call to an OpenAI-compatible server, naming the server and the fix; `None` for any
    other error.

    What a user meets most with `vllm serve` is a server still loading its model, or a wrong port: the
    client's retries end in `openai.APIConnectionError` ("Connection error."), which names neither. This
    names the address, the cause and what to try; the command that failed resumes when run again.

    >>> endpoint_error(ValueError("no")) is None
    True
    """
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a core dependency
        return None
    if not isinstance(exc, (openai.APIConnectionError, openai.APIStatusError)):
        return None
    request = getattr(exc, "request", None)
    url = str(request.url) if request is not None else "the server"
    root = url.split("/chat/completions")[0].split("/models")[0].split("/completions")[0]
    if isinstance(exc, openai.APIStatusError):
        detail = " ".join(str(exc.message).split())[:300]
        hint = {
            401: "check the API key (--api-key, $MRJUDGE_API_KEY or $OPENAI_API_KEY)",
            403: "check the API key (--api-key, $MRJUDGE_API_KEY or $OPENAI_API_KEY)",
            404: f"check the URL ends in /v1 and the model name is one `GET {root}/models` lists",
        }.get(exc.status_code, "fix the request or the server, then run the same command again (it resumes)")
        return f"{root} answered {exc.status_code} ({detail}): {hint}"
    cause = exc.__cause__ or exc.__context__  # httpx's ConnectError, which says what happened
    if isinstance(exc, openai.APITimeoutError):
        why = "timed out"
    elif cause is not None:
        why = str(cause) or type(cause).__name__
    else:
        why = ""
    return (
        f"cannot reach the model server at {root}"
        + (f" ({why})" if why else "")
        + f": is it still starting, or is the port wrong? `curl {root}/models` must answer; "
        "then run the same command again (it resumes)"
    )
