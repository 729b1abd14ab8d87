"""The judge reward over HTTP: one `POST /v1/reward` per group to `mrjudge serve`, all groups concurrently.

    from judge.reward.trl.http import AsyncHttpJudgeReward

    reward = AsyncHttpJudgeReward("http://judge-node:8000")   # key from $MRJUDGE_SERVER_API_KEY
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=prompts)

Images go as PNG data URLs, resized into [min_pixels, max_pixels] first (or as path strings with
`send_image_paths`). Connection errors, timeouts, 408, 429 and 5xx are retried with back-off
(`judge.reward.wire.RetryPolicy`; a 503's `Retry-After` is honoured); a group still unjudged after them gets
`None` rewards, counted and logged (TRL takes `None` as no signal: a run rides out a judge restart). Any
other 4xx (a missing or out-of-root image, 413, 415, 422, 401) raises `RewardRefused` with the server's
message at once. Rewards are never made up for a group the server did not judge.

TRL runs a callable whose `__call__` is `async def` on its own event loop, next to other async rewards: that
is `AsyncHttpJudgeReward`. `HttpJudgeReward` is the synchronous one: it keeps a private event loop thread for
its HTTP calls, and `acall` is its coroutine form. Clients and loops are made lazily in each process.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from judge.images import PixelRange
from judge.reward.planner import RewardGroup
from judge.reward.scoring import RewardRequest
from judge.reward.trl.base import GroupedJudgeReward, GroupResults, RewardCall
from judge.reward.wire import (
    CONNECT_TIMEOUT_S,
    Failover,
    Replicas,
    RetryPolicy,
    RewardError,
    RewardRefused,
    RewardUnavailable,
    is_retryable,
    retry_after_s,
    reward_endpoint,
    server_api_key,
    server_urls,
)

__all__ = ["AsyncHttpJudgeReward", "HttpJudgeReward", "post_json", "reward_endpoint"]


async def post_json(
    client: Any,
    url: str | Replicas,
    payload: dict[str, Any],
    retry: RetryPolicy,
    *,
    key: str | None = None,
    gate: asyncio.Semaphore | None = None,
    rng: random.Random | None = None,
    on_retry: Callable[[], None] | None = None,
) -> Any:
    """POST `payload` to the reward server (or to one of `Replicas`, the whole payload to one) and return the
    response (status 200), retrying and failing over as `retry` and `judge.reward.wire.Failover` say; `key`
    routes a one-sample request by its group (`Replicas.order`).

    Raises:
        RewardRefused: a 4xx other than 408 / 429, at once, with the server's message (`_http_error`).
        RewardUnavailable: connection errors, timeouts, 408, 429 or 5xx on every attempt.
    """
    import httpx

    replicas = url if isinstance(url, Replicas) else Replicas([url])
    failover = Failover(replicas, retry, key, rng)
    several = len(replicas) > 1
    error = ""
    while (step := failover.next()) is not None:
        replica, wait_s = step
        if failover.tries > 1 and on_retry is not None:
            on_retry()
        if wait_s:
            await asyncio.sleep(wait_s)
        where = f"{replicas.urls[replica]}: " if several else ""
        async with gate or contextlib.nullcontext():
            failover.started()
            try:
                response = await client.post(replicas.urls[replica], json=payload)
            except httpx.TransportError as exc:  # connection refused/reset, timeouts: the next replica, at once
                failover.unreachable()
                error = f"{where}{type(exc).__name__}: {str(exc) or 'no detail'}"
                continue
            except BaseException:  # cancelled: nothing learnt about the replica
                failover.abandoned()
                raise
        retry_after = retry_after_s(response.headers.get("retry-after"))
        failover.answered(response.status_code, retry_after)
        if response.status_code == 200:
            return response
        error = where + _http_error(response)
        if not is_retryable(response.status_code):
            raise RewardRefused(error, response.status_code)
    raise failover.gave_up(error)


def _http_error(response: Any) -> str:
    """The server's `{"error": {"message", "field", "type"}}` envelope, or the start of whatever it sent."""
    try:
        error = response.json().get("error") or {}
        where = f" (field {error['field']!r})" if error.get("field") else ""
        return f"HTTP {response.status_code}{where}: {error.get('message') or response.text[:200]}"
    except Exception:  # noqa: BLE001 - a non-JSON error page is still an error to report
        return f"HTTP {response.status_code}: {response.text[:200]}"


class HttpJudgeReward(GroupedJudgeReward):
    """Rewards from a reward server (`mrjudge serve`), with TRL's reward signature (synchronous).

    Args:
        url: the server's root, `/v1` root or `/v1/reward` URL; or several replicas' (a list, or comma-separated):
            each group goes whole to the replica with the fewest requests outstanding from this process, and a
            replica that fails is passed over for the others and tried again after `replica_cooloff_s`
            (`judge.reward.wire.Replicas`, `Failover`).
        api_key: `Authorization: Bearer` key; default `$MRJUDGE_SERVER_API_KEY`.
        max_concurrency: requests in flight at once, per replica.
        send_image_paths: send string image references (paths) as they are, to be read under the server's
            `--allow-local-images` folder, instead of reading and encoding them here.
        min_pixels, max_pixels: images are resized into this range (Qwen's rule, `judge.images.fit_pixels`)
            before they are sent, so a full-size photo neither costs megabytes per request nor meets the
            server's 413; unset: sent as they are.
        replica_cooloff_s: how long a replica that failed is passed over (doubling per failure in a row, up
            to 60 s); with one server it changes nothing.
        **options: how groups are judged and retried (`judge.reward.trl.base.GroupedJudgeReward`); keep
            `max_options` at most the server's `max_candidates`.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        api_key: str | None = None,
        max_concurrency: int = 16,
        send_image_paths: bool = False,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        replica_cooloff_s: float = 5.0,
        **options: Any,
    ) -> None:
        urls = server_urls(url)
        if not urls:
            raise ValueError("HttpJudgeReward needs the reward server's url (e.g. http://judge-node:8000)")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency ({max_concurrency}) must be at least 1")
        if not 0 <= replica_cooloff_s <= 60:
            raise ValueError(f"replica_cooloff_s ({replica_cooloff_s}) must be in [0, 60]")
        PixelRange(min_pixels, max_pixels)  # refused here, not at the first call, when out of range
        self.url = url
        self.endpoints = [reward_endpoint(u) for u in urls]
        self.endpoint = self.endpoints[0]
        self.replica_cooloff_s = replica_cooloff_s
        self.api_key = api_key if api_key is not None else server_api_key()
        self.max_concurrency = max_concurrency
        self.send_image_paths = send_image_paths
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        super().__init__(**options)

    def _init_runtime(self) -> None:
        super()._init_runtime()
        self._client: Any = None
        self._client_loop: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replicas = Replicas(self.endpoints, cooloff_s=self.replica_cooloff_s)

    @property
    def replicas(self) -> Replicas:
        """The servers, with this process's outstanding requests, tries sent and cool-offs per replica."""
        return self._replicas

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r}, mode={self.mode!r})"

    # -- event loops and clients -------------------------------------------------------------------------

    def _judge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        return asyncio.run_coroutine_threadsafe(self._ajudge_groups(groups, call), self._private_loop()).result()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        """The synchronous `__call__`'s event loop, on a daemon thread, kept so the connection pool is reused."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name=f"{self.__name__}-http", daemon=True).start()
                self._loop = loop
            return self._loop

    def _http_client(self) -> Any:
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:  # a client belongs to the loop it was made on
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            timeout = httpx.Timeout(self.retry.timeout_s, connect=min(CONNECT_TIMEOUT_S, self.retry.timeout_s))
            self._client = httpx.AsyncClient(
                timeout=timeout,
                headers=headers,
                limits=httpx.Limits(max_connections=self.max_concurrency * len(self.endpoints)),
            )
            self._client_loop = loop
        return self._client

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop (both come back on the next call)."""
        loop, client = self._loop, self._client
        if loop is not None:
            if client is not None and self._client_loop is loop:
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        self._loop = self._client = self._client_loop = None

    async def aclose(self) -> None:
        """Close the HTTP client made on the running loop (the async variant's, under TRL's loop)."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
            self._client = self._client_loop = None

    def __del__(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)  # the daemon thread ends with its loop

    # -- requests ----------------------------------------------------------------------------------------

    def _wire_image(self, ref: Any) -> str:
        """One image as a data URL, resized into [min_pixels, max_pixels]; a data URL already in range goes as is."""
        from judge.images import fit_pixels, image_to_data_url, load_image

        if isinstance(ref, str) and not ref.startswith("data:") and self.send_image_paths:
            return ref  # read by the server under its --allow-local-images folder (and shrunk as it decodes)
        is_url = isinstance(ref, str) and ref.startswith("data:")
        if is_url and self.min_pixels is None and self.max_pixels is None:
            return ref
        image = load_image(ref, self.image_root)
        fitted = fit_pixels(image, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        return ref if is_url and fitted is image else image_to_data_url(fitted)

    def _payload(self, request: RewardRequest) -> dict[str, Any]:
        return {
            "prompt": request.prompt,
            "images": [self._wire_image(ref) for ref in request.images],
            "responses": request.responses,
            "reference": request.reference,
            "mode": request.mode,
            "tournament": request.tournament,
            "id": request.id,
        }

    async def _ajudge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        client = self._http_client()
        gate = asyncio.Semaphore(self.max_concurrency * len(self.endpoints))  # per replica

        async def one(group: RewardGroup) -> list[float | None] | None:
            if group.request is None:
                return None
            try:
                rewards, reasoning = await self._post(
                    client, gate, self._payload(group.request), len(group.responses), call
                )
                call.reasoning[id(group)] = reasoning
                return rewards
            except RewardError as exc:
                failure: RewardError = exc
            except (OSError, ValueError) as exc:  # an image this side cannot read: the input, not the server
                failure = RewardRefused(f"{type(exc).__name__}: {exc}")
            call.errors.append(str(failure))
            call.failures.append(failure)
            return None

        return list(await asyncio.gather(*(one(g) for g in groups)))

    async def _post(
        self, client: Any, gate: asyncio.Semaphore, payload: dict[str, Any], n: int, call: RewardCall
    ) -> tuple[list[float | None], list[str]]:
        def count() -> None:
            call.retries += 1

        response = await post_json(
            client, self._replicas, payload, self.retry, gate=gate, rng=self._rng, on_retry=count
        )
        return self._parse(response, n)

    @staticmethod
    def _parse(response: Any, n: int) -> tuple[list[float | None], list[str]]:
        """The rewards, and the reasoning of the verdicts behind them (kept for the audit)."""
        try:
            body = response.json()
            rewards = body["rewards"]
            if len(rewards) != n:
                raise ValueError(f"{len(rewards)} rewards for {n} responses")
            reasoning = [str(v.get("reasoning", "")) for v in body.get("verdicts") or [] if isinstance(v, dict)]
            return [None if r is None else float(r) for r in rewards], reasoning
        except Exception as exc:  # noqa: BLE001 - a malformed answer fails the group, it is not retried
            raise RewardUnavailable(f"unusable reward response ({exc}): {response.text[:200]}") from exc


class AsyncHttpJudgeReward(HttpJudgeReward):
    """`HttpJudgeReward` with an `async def __call__`: TRL's GRPOTrainer awaits it on its own event loop,
    concurrently with other async reward functions (`trl.trainer.utils.is_async_callable`)."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        return await self.acall(prompts, completions, **kwargs)
