"""The judge as a TRL reward function for *policy* GRPO: each prompt's completions are judged against each other.

    from judge.policy_reward import AsyncJudgeRewardFunction, JudgeRewardFunction

    reward = AsyncJudgeRewardFunction(server_url="http://judge-node:8000")           # `mrjudge serve`, over HTTP
    reward = JudgeRewardFunction(judge="runs/judge", reference_column="answer")      # a judge in this process
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=prompts)             # TRL's reward signature

One call (`prompts`, `completions`, plus the dataset's columns as keyword lists, as TRL passes them):

1. **Group.** Completions are grouped by (prompt text, images, reference): the G completions TRL samples
   for one prompt form one group. The prompt text is a string prompt, or the text of the user turns of a
   conversational one; images come from the dataset's `images` / `image` column (or, failing that, from
   image parts inside the prompt messages); the reference from `reference_column` when given.
2. **Plan.** Grouping and planning are the shared planner's (`judge.reward_planner.group_samples`, the same
   rules as the server and the verl / OpenRLHF integrations). A group is judged in `mode` (`listwise`: all
   completions as one multiple-choice question; `pairwise`: each against the reference; `tournament`),
   with two automatic changes:
   - a group larger than `max_options` in listwise mode becomes a `tournament` (default knock-out; the judge
     shows at most `max_options` candidates at once; knock-out costs G - 1 pairwise games, round-robin
     G(G - 1)/2);
   - a group of one completion cannot be ranked: it is judged pairwise against its reference when there
     is one, and gets `None` otherwise (likewise any group in pairwise mode whose reference is missing).
   A verdict the judge could not parse gives `None` too (counted in `judge/unscored_frac`), never 1/k.
3. **Judge.** Over HTTP, one `POST /v1/reward` per group, all groups concurrently (`max_concurrency` in
   flight, images as PNG data URLs); in process, all groups in one `judge.reward_scoring.compute_rewards`
   batch (the same engine the server runs).
4. **Retry, then give up on the group.** Connection errors, timeouts, 408, 429 and 5xx are retried
   `max_retries` times with exponential back-off and jitter (a 503's `Retry-After` is honoured); other
   4xx are not retried. A group that still fails gets `None` for each completion: TRL turns `None` into
   NaN, leaves it out of the group's baseline and gives it zero advantage. Failures, retries and latency
   are counted through TRL's `log_metric` hook (`judge/failed_frac`, `judge/failed_groups`,
   `judge/unscored_frac`, `judge/retries`, `judge/latency_s`; TRL averages them per logging step over
   processes), and in `totals` for callers outside TRL.

**Groups split across processes.** TRL places a prompt's G completions side by side and gives each process
a contiguous slice of `per_device_train_batch_size × steps_per_generation` of them; when that is not a
multiple of G, a group straddles two processes. The reward function on each process sees only its part and
judges it as a group of its own: listwise probabilities are then shared among fewer completions (a
different scale from the other part's), and a part of one completion is judged pairwise or gets `None`.
TRL gathers all rewards before normalising per group, so training runs, on a noisier signal. Keep that
product a multiple of G (`training.policy` refuses anything else in listwise and tournament mode);
pairwise mode is unaffected, since each completion is judged on its own.

TRL (the installed 1.16) runs a callable whose `__call__` is `async def` on its own event loop, next to other
async rewards: that is `AsyncJudgeRewardFunction`. `JudgeRewardFunction` is the synchronous one;
it keeps a private event loop thread for its HTTP calls, and `acall` is its coroutine form. Both are
plain classes with a picklable configuration; clients, event loops and a judge built from a path are
created lazily in each process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from judge.backends.base import check_pixel_range
from judge.reward_inputs import completion_text, image_digest, prompt_images, prompt_text
from judge.reward_planner import RewardGroup, group_samples, scatter
from judge.reward_scoring import MODES, RewardRequest, RewardResult, compute_rewards

__all__ = [
    "API_KEY_ENV",
    "AsyncJudgeRewardFunction",
    "JudgeRewardFunction",
    "reward_endpoint",
]

logger = logging.getLogger(__name__)

API_KEY_ENV = "MRJUDGE_SERVER_API_KEY"
"""Where the reward server's key is read from when no `api_key` is passed (the name `mrjudge serve` reads)."""

RETRYABLE_STATUS = frozenset({408, 429})
"""Besides every 5xx: request timeout and rate limiting are worth another try; other 4xx are not."""


def reward_endpoint(server_url: str) -> str:
    """`POST /v1/reward` on a server root, a `/v1` root or the full endpoint URL.

    >>> reward_endpoint("http://judge:8000"), reward_endpoint("http://judge:8000/v1/")
    ('http://judge:8000/v1/reward', 'http://judge:8000/v1/reward')
    """
    url = server_url.rstrip("/")
    if url.endswith("/v1/reward"):
        return url
    return f"{url}/reward" if url.endswith("/v1") else f"{url}/v1/reward"


# -- bookkeeping ------------------------------------------------------------------------------------------


@dataclass
class _Call:
    """What happened in one reward call, for `log_metric` and `totals`."""

    retries: int = 0
    errors: list[str] = field(default_factory=list)


class _JudgeCallError(RuntimeError):
    """One group's judging failed for good (after retries, or at once for a non-retryable answer)."""


def _http_error(response: Any) -> str:
    """The server's `{"error": {"message", "field", "type"}}` envelope, or the start of whatever it sent."""
    try:
        error = response.json().get("error") or {}
        where = f" (field {error['field']!r})" if error.get("field") else ""
        return f"HTTP {response.status_code}{where}: {error.get('message') or response.text[:200]}"
    except Exception:  # noqa: BLE001 - a non-JSON error page is still an error to report
        return f"HTTP {response.status_code}: {response.text[:200]}"


def _retry_after(response: Any) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None  # absent, or an HTTP date: fall back to the back-off schedule


# -- the reward function ----------------------------------------------------------------------------------


class JudgeRewardFunction:
    """Rewards from a judge for G completions per prompt, with TRL's reward signature (synchronous).

    Args:
        server_url: a reward server (`mrjudge serve`): its root, `/v1` root or `/v1/reward` URL.
        judge: instead of a server, judge in this process: a `judge.judging.Judge`, or a model folder / hub
            id / OpenAI-compatible `/v1` URL to build one from (lazily, with `judge_config`, `backend`,
            `backend_kwargs`); a path keeps this object picklable, a `Judge` object is pickled as it is.
        mode: "listwise", "pairwise" (needs `reference_column`) or "tournament" (see the module docstring).
        tournament: the tournament format when `mode="tournament"` ("round_robin" or "knockout").
        reference_column: dataset column with each prompt's reference answer (pairwise judging, and
            groups of one completion).
        image_columns: dataset columns images are read from, first present wins.
        api_key: `Authorization: Bearer` key for the server; default `$MRJUDGE_SERVER_API_KEY`.
        timeout_s: seconds per HTTP attempt.
        max_retries: retries per group after the first attempt (in process: of the whole batch).
        backoff_s: first back-off; doubles per retry, with ±50 % jitter, capped at `max_backoff_s`.
        max_options: the judge's option limit; larger listwise groups become knock-out tournaments. Keep it
            at most the server's `max_candidates`.
        max_concurrency: HTTP requests in flight at once.
        send_image_paths: send string image references (paths) to the server as they are, to be read under
            its `--allow-local-images` folder, instead of reading and encoding them here.
        min_pixels, max_pixels: over HTTP, images are resized into this range (Qwen's rule, `judge.images.fit_pixels`)
            before they are sent, so a full-size photo neither costs megabytes per request nor meets the server's
            413; unset: sent as they are.
        name: TRL logs the reward as `rewards/<name>/mean` and the counters as `<name>/…`.
    """

    def __init__(
        self,
        server_url: str | None = None,
        *,
        judge: Any = None,
        mode: Literal["listwise", "pairwise", "tournament"] = "listwise",
        tournament: Literal["round_robin", "knockout"] = "knockout",
        reference_column: str | None = None,
        image_columns: Sequence[str] = ("images", "image"),
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_options: int = 8,
        max_concurrency: int = 16,
        judge_config: Any = None,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        image_root: str | None = None,
        send_image_paths: bool = False,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        name: str = "judge",
    ) -> None:
        if (server_url is None) == (judge is None):
            raise ValueError("give exactly one of server_url (a reward server) or judge (judge in this process)")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if tournament not in ("round_robin", "knockout"):
            raise ValueError(f"tournament must be 'round_robin' or 'knockout', got {tournament!r}")
        if mode == "pairwise" and not reference_column:
            raise ValueError("pairwise mode compares each completion with a reference: set reference_column")
        if max_options < 2:
            raise ValueError(f"max_options ({max_options}) must be at least 2")
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_concurrency < 1:
            raise ValueError(
                f"need max_retries >= 0 ({max_retries}), timeout_s > 0 ({timeout_s}), backoff_s >= 0 ({backoff_s}) "
                f"and max_concurrency >= 1 ({max_concurrency})"
            )
        self.server_url = server_url
        self.endpoint = reward_endpoint(server_url) if server_url else None
        self.judge = judge
        self.mode, self.tournament = mode, tournament
        self.reference_column = reference_column
        self.image_columns = tuple(image_columns)
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.max_options, self.max_concurrency = max_options, max_concurrency
        self.judge_config, self.backend, self.backend_kwargs = judge_config, backend, dict(backend_kwargs or {})
        self.image_root = image_root
        self.send_image_paths = send_image_paths
        check_pixel_range(min_pixels, max_pixels)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.__name__ = name  # TRL names the reward's logs after it
        self.totals = {"calls": 0, "groups": 0, "failed_groups": 0, "failed": 0, "unscored": 0, "retries": 0}
        """Running counts over this object's life (completions for `failed` / `unscored`)."""
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._local_judge: Any = None
        self._client: Any = None
        self._client_loop: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # guards the lazy runtime and the in-process judge (models are not thread-safe)
        self._warned: set[str] = set()
        self._rng = random.Random()  # jitter must differ between processes, so it is not seeded

    # Picklable configuration: clients, loops and a judge built from a path are remade where it lands.
    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_") or k == "__name__"}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        target = f"server_url={self.server_url!r}" if self.server_url else f"judge={self.judge!r}"
        return f"{type(self).__name__}({target}, mode={self.mode!r})"

    # -- TRL entry points --------------------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """One reward per completion, in input order; `None` where the judge failed or could not rank."""
        start = time.perf_counter()
        groups = self._group(prompts, completions, kwargs)
        call = _Call()
        if self.endpoint is None:
            results = self._judge_in_process(groups, call)
        else:
            future = asyncio.run_coroutine_threadsafe(self._judge_over_http(groups, call), self._private_loop())
            results = future.result()
        return self._finish(len(completions), groups, results, call, start, kwargs.get("log_metric"))

    async def acall(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The coroutine form of `__call__`: HTTP on the running loop, an in-process judge in a worker thread."""
        start = time.perf_counter()
        groups = self._group(prompts, completions, kwargs)
        call = _Call()
        if self.endpoint is None:
            results = await asyncio.to_thread(self._judge_in_process, groups, call)
        else:
            results = await self._judge_over_http(groups, call)
        return self._finish(len(completions), groups, results, call, start, kwargs.get("log_metric"))

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop (both come back on the next call)."""
        loop, client = self._loop, self._client
        if loop is not None:
            if client is not None and self._client_loop is loop:
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        self._loop = self._client = self._client_loop = None

    def __del__(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)  # the daemon thread ends with its loop

    async def aclose(self) -> None:
        """Close the HTTP client made on the running loop (the async variant's, under TRL's loop)."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
            self._client = self._client_loop = None

    # -- grouping and planning ---------------------------------------------------------------------------

    def _column(self, kwargs: Mapping[str, Any], name: str | None, n: int) -> Sequence[Any] | None:
        values = kwargs.get(name) if name else None
        if values is None:
            return None
        if len(values) != n:
            raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
        return values

    def _group(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[RewardGroup]:
        """Read TRL's arguments into samples and hand them to the shared planner (`group_samples`)."""
        n = len(completions)
        if len(prompts) != n:
            raise ValueError(f"got {len(prompts)} prompts for {n} completions; TRL passes one prompt per completion")
        references = self._column(kwargs, self.reference_column, n)
        image_columns = [c for c in (self._column(kwargs, name, n) for name in self.image_columns) if c is not None]
        images: list[list[Any]] = []
        for i, prompt in enumerate(prompts):
            if image_columns:
                value = image_columns[0][i]
                images.append([] if value is None else list(value) if isinstance(value, (list, tuple)) else [value])
            else:
                images.append(prompt_images(prompt))
        return group_samples(
            [prompt_text(p) for p in prompts],
            [completion_text(c) for c in completions],
            images=images,
            image_keys=[tuple(image_digest(im) for im in own) for own in images],
            references=None if references is None else [None if r is None else str(r) for r in references],
            mode=self.mode,
            tournament=self.tournament,
            max_options=self.max_options,
        )

    def _finish(
        self,
        n: int,
        groups: list[RewardGroup],
        results: list[list[float | None] | None],
        call: _Call,
        start: float,
        log_metric: Callable[[str, float], None] | None,
    ) -> list[float | None]:
        rewards = scatter(n, groups, results)
        failed_groups = failed = unscored = 0
        for group, result in zip(groups, results):
            if group.request is None:
                unscored += len(group.indices)
            elif result is None:
                failed_groups += 1
                failed += len(group.indices)
            else:
                unscored += sum(r is None for r in result)  # verdicts the judge did not give
        if failed_groups:
            logger.warning(
                "%s: %d of %d groups failed (%d retries in this call, last error: %s); their %d completions get "
                "reward None",
                self.__name__, failed_groups, len(groups), call.retries, call.errors[-1] if call.errors else "?", failed,
            )  # fmt: skip
        if unscored and "unscored" not in self._warned:
            self._warned.add("unscored")
            logger.warning(
                "%s: %d completions got reward None (unscored): a lone completion (or pairwise mode) needs a "
                "reference (set reference_column, or sample num_generations >= 2 per prompt), or the judge's "
                "verdict did not parse",
                self.__name__, unscored,
            )  # fmt: skip
        for key, value in (
            ("calls", 1), ("groups", len(groups)), ("failed_groups", failed_groups), ("failed", failed),
            ("unscored", unscored), ("retries", call.retries),
        ):  # fmt: skip
            self.totals[key] += value
        if log_metric is not None and n:
            name = self.__name__
            log_metric(f"{name}/failed_frac", failed / n)
            log_metric(f"{name}/failed_groups", float(failed_groups))
            log_metric(f"{name}/unscored_frac", unscored / n)
            log_metric(f"{name}/retries", float(call.retries))
            log_metric(f"{name}/latency_s", time.perf_counter() - start)
        return rewards

    def _backoff(self, attempt: int, retry_after: float | None = None) -> float:
        base = self.backoff_s * 2**attempt
        delay = base * self._rng.uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_backoff_s)

    # -- in process --------------------------------------------------------------------------------------

    def _judge_object(self) -> Any:
        if not isinstance(self.judge, str):
            return self.judge
        if self._local_judge is None:
            from judge.backends import make_backend
            from judge.judging import Judge, JudgeConfig

            config = self.judge_config if self.judge_config is not None else JudgeConfig()
            if isinstance(config, Mapping):
                config = JudgeConfig(**config)
            backend = make_backend(self.judge, self.backend, **self.backend_kwargs)
            self._local_judge = Judge(backend, config, image_root=self.image_root)
        return self._local_judge

    def _compute(self, requests: list[RewardRequest]) -> list[RewardResult]:
        with self._lock:
            return compute_rewards(self._judge_object(), requests, max_options=self.max_options)

    def _judge_in_process(self, groups: list[RewardGroup], call: _Call) -> list[list[float | None] | None]:
        """All groups in one batch; if that fails for good, group by group, so one bad group sinks only itself."""
        todo = [g for g in groups if g.request is not None]
        requests = [g.request for g in todo]
        assert all(r is not None for r in requests)
        results: dict[int, list[float | None] | None] = {}
        batch = self._with_retries(lambda: self._compute(requests), call) if requests else []  # type: ignore[arg-type]
        if batch is not None:
            results = {id(g): list(r.rewards) for g, r in zip(todo, batch)}
        else:
            for g in todo:
                one = self._with_retries(lambda g=g: self._compute([g.request]), call, retries=0)
                results[id(g)] = list(one[0].rewards) if one is not None else None
        return [results.get(id(g)) for g in groups]

    def _with_retries(self, fn: Callable[[], Any], call: _Call, retries: int | None = None) -> Any:
        from judge.types import DataError

        retries = self.max_retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return fn()
            except DataError as exc:  # a request the judge refuses: trying again changes nothing
                call.errors.append(str(exc))
                return None
            except Exception as exc:  # noqa: BLE001 - any judging failure becomes None rewards, counted and logged
                call.errors.append(f"{type(exc).__name__}: {exc}")
                if attempt == retries:
                    return None
                call.retries += 1
                time.sleep(self._backoff(attempt))
        return None

    # -- over HTTP ---------------------------------------------------------------------------------------

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
            self._client = httpx.AsyncClient(
                timeout=self.timeout_s,
                headers=headers,
                limits=httpx.Limits(max_connections=self.max_concurrency),
            )
            self._client_loop = loop
        return self._client

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
        images = [self._wire_image(ref) for ref in request.images]
        return {
            "prompt": request.prompt,
            "images": images,
            "responses": request.responses,
            "reference": request.reference,
            "mode": request.mode,
            "tournament": request.tournament,
            "id": request.id,
        }

    async def _judge_over_http(self, groups: list[RewardGroup], call: _Call) -> list[list[float | None] | None]:
        client = self._http_client()
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(group: RewardGroup) -> list[float | None] | None:
            if group.request is None:
                return None
            try:
                return await self._post(client, gate, self._payload(group.request), len(group.responses), call)
            except _JudgeCallError as exc:
                call.errors.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - e.g. an undecodable image: this group only
                call.errors.append(f"{type(exc).__name__}: {exc}")
            return None

        return list(await asyncio.gather(*(one(g) for g in groups)))

    async def _post(
        self, client: Any, gate: asyncio.Semaphore, payload: dict[str, Any], n: int, call: _Call
    ) -> list[float | None]:
        import httpx

        error = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            async with gate:
                try:
                    response = await client.post(self.endpoint, json=payload)
                except httpx.TransportError as exc:  # connection refused/reset, timeouts
                    error = f"{type(exc).__name__}: {exc or 'no detail'}"
                else:
                    if response.status_code == 200:
                        return self._parse(response, n)
                    error = _http_error(response)
                    if response.status_code < 500 and response.status_code not in RETRYABLE_STATUS:
                        raise _JudgeCallError(error)
                    retry_after = _retry_after(response)
            if attempt < self.max_retries:
                call.retries += 1
                await asyncio.sleep(self._backoff(attempt, retry_after))
        raise _JudgeCallError(error)

    @staticmethod
    def _parse(response: Any, n: int) -> list[float | None]:
        try:
            rewards = response.json()["rewards"]
            if len(rewards) != n:
                raise ValueError(f"{len(rewards)} rewards for {n} responses")
            return [None if r is None else float(r) for r in rewards]
        except Exception as exc:  # noqa: BLE001 - a malformed answer fails the group, it is not retried
            raise _JudgeCallError(f"unusable reward response ({exc}): {response.text[:200]}") from exc


class AsyncJudgeRewardFunction(JudgeRewardFunction):
    """`JudgeRewardFunction` with an `async def __call__`: TRL's GRPOTrainer awaits it on its own event loop,
    concurrently with other async reward functions (`trl.trainer.utils.is_async_callable`)."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        return await self.acall(prompts, completions, **kwargs)
