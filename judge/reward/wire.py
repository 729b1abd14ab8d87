"""What every HTTP client of the reward server shares: the environment names, one retry policy, two errors.

The TRL reward (`judge.reward.trl.http`), the verl and OpenRLHF files (`judge/integrations/`) and `mrjudge serve`
read the same variables and retry the same way, from here. Standard library only: the OpenRLHF file loads
this module by path on training nodes where mr-judge is not installed.

A reward that could not be had is never replaced by a stand-in value: a request the server refuses for its
input (a missing or out-of-root image, 413, 415, 422, a wrong key) raises `RewardRefused` with the server's
message at once; connection errors, timeouts, 408, 429 and 5xx are retried (`RetryPolicy`), then raise
`RewardUnavailable`. Only a verdict the judge gave but that could not be scored (unparsed, or a lone response
without a reference) is filled with a neutral value, and counted.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
    export MRJUDGE_REWARD_URL=http://judge-1:8000,http://judge-2:8000                 # several replicas

Several replicas (`server_urls`, `Replicas`, `Failover`): a request always goes whole to one replica (a group
is never split: listwise judging needs all of it). Requests that carry a whole group go to the replica with
the fewest requests outstanding from this process; one-sample requests whose group a server assembles (verl's
`compute_score`, OpenRLHF) go by their group's key, ranked the same way in every process (rendezvous hashing),
so a prompt's samples meet on one replica. A replica that cannot be reached is passed over at once for the
next one; a whole-group request also skips a failed replica for a cool-off and tries it again after it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "API_KEY_ENV",
    "CONNECT_TIMEOUT_S",
    "REWARD_TIMEOUT_ENV",
    "REWARD_URL_ENV",
    "Failover",
    "Replicas",
    "RetryPolicy",
    "RewardError",
    "RewardRefused",
    "RewardUnavailable",
    "check_keys",
    "is_retryable",
    "retry_after_s",
    "get_reward_endpoint",
    "reward_endpoint",
    "reward_server_urls",
    "server_api_key",
    "server_urls",
]

API_KEY_ENV = "MRJUDGE_SERVER_API_KEY"
"""The reward server's key: `mrjudge serve` reads it, every client sends it (a key never enters a config file)."""
REWARD_URL_ENV = "MRJUDGE_REWARD_URL"
"""The reward server's address, for the verl and OpenRLHF files (frameworks that load a reward by path)."""
REWARD_TIMEOUT_ENV = "MRJUDGE_REWARD_TIMEOUT_S"
"""Seconds per attempt of the OpenRLHF file (its default stays under OpenRLHF's own 180 s)."""
CONNECT_TIMEOUT_S = 10.0
"""Seconds to open a connection (at most the attempt's timeout): a replica whose host is gone is passed over
in this long, not in the whole attempt's timeout (minutes, for a judge's long answers)."""


class RewardError(RuntimeError):
    """A reward that could not be had from the judge; a training step must not go on without it."""


class RewardRefused(RewardError):
    """The server refused the request for what it carried (4xx other than 408 / 429): retrying changes nothing.

    The message is the server's, naming the field (`labels[0].images[0]: ... not found under ...`)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RewardUnavailable(RewardError):
    """The server could not be reached, or kept failing, for every retry `RetryPolicy` allows."""


def server_api_key(env: str = API_KEY_ENV) -> str | None:
    """The key in `$env`, or None when it is unset or empty."""
    return os.environ.get(env) or None


def server_urls(value: str | Sequence[str] | None) -> list[str]:
    """Server addresses from a list, or a comma-separated string; each stripped, empty entries left out.

    >>> server_urls("http://a:8000, http://b:8000/"), server_urls(["http://a:8000"])
    (['http://a:8000', 'http://b:8000/'], ['http://a:8000'])
    """
    parts = value.split(",") if isinstance(value, str) else list(value or [])
    urls = []
    for part in parts:
        if not isinstance(part, str):
            raise ValueError(f"a server address must be a string, got {part!r}")
        if part.strip():
            urls.append(part.strip())
    return urls


def reward_server_urls(explicit: str | Sequence[str] | None = None) -> list[str]:
    """`explicit` (a list or a comma-separated string), else `$MRJUDGE_REWARD_URL` (comma-separated); none
    fails with what to set."""
    urls = server_urls(explicit) if explicit else server_urls(os.environ.get(REWARD_URL_ENV, ""))
    if not urls:
        raise RuntimeError(
            f"set {REWARD_URL_ENV} to the reward server's address, or several comma-separated (`mrjudge serve` "
            "prints it on start)"
        )
    return urls


def _endpoint(url: str, path: str) -> str:
    """`path` on a server named by its root, its `/v1` root or one of its endpoints' full URL."""
    root = url.rstrip("/").removesuffix("/v1/reward").removesuffix("/get_reward").removesuffix("/v1")
    return root + path


def reward_endpoint(url: str) -> str:
    """`POST /v1/reward` on a server root, a `/v1` root or a full endpoint URL.

    >>> reward_endpoint("http://judge:8000"), reward_endpoint("http://judge:8000/v1/")
    ('http://judge:8000/v1/reward', 'http://judge:8000/v1/reward')
    """
    return _endpoint(url, "/v1/reward")


def get_reward_endpoint(url: str) -> str:
    """`/get_reward` on the server's root, `/v1` root or a full endpoint URL.

    >>> get_reward_endpoint("http://judge:8000/v1"), get_reward_endpoint("http://judge:8000/get_reward")
    ('http://judge:8000/get_reward', 'http://judge:8000/get_reward')
    """
    return _endpoint(url, "/get_reward")


def check_keys(values: Any, valid: Sequence[str], what: str) -> None:
    """Refuse a mapping with keys outside `valid`, naming them and the valid ones (a config's typo).

    >>> check_keys({"max_retry": 2}, RetryPolicy.keys(), "retry")
    Traceback (most recent call last):
    ValueError: unknown retry key(s) ['max_retry']; valid keys: max_retries, backoff_s, max_backoff_s, timeout_s
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be a mapping of {', '.join(valid)}, got {values!r}")
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}; valid keys: {', '.join(valid)}")


def is_retryable(status: int) -> bool:
    """Every 5xx, request timeout (408) and rate limiting (429) are worth another try; other 4xx are not.

    >>> [is_retryable(s) for s in (408, 429, 503, 400, 422)]
    [True, True, True, False, False]
    """
    return status >= 500 or status in (408, 429)


def retry_after_s(value: str | None) -> float | None:
    """A `Retry-After` header in seconds; None when absent or an HTTP date (the back-off schedule applies)."""
    try:
        return max(0.0, float(value or ""))
    except ValueError:
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How a reward client retries: connection errors, timeouts and `is_retryable` answers, with back-off.

    >>> policy = RetryPolicy(backoff_s=1.0, max_backoff_s=30.0)
    >>> 1.0 <= policy.delay(1) <= 3.0, policy.delay(0, retry_after=7.0), policy.delay(10)
    (True, 7.0, 30.0)
    """

    # `field(...)` here, not `judge.config.setting`: this module imports nothing of ours (the OpenRLHF file loads it
    # by path where mr-judge is not installed)
    max_retries: int = field(default=3, metadata={"help": "Retries after the first attempt; then the call fails."})
    backoff_s: float = field(default=1.0, metadata={"help": "First back-off; doubles per retry, with ±50 % jitter."})
    max_backoff_s: float = field(default=30.0, metadata={"help": "Cap of one back-off, `Retry-After` included."})
    timeout_s: float = field(default=120.0, metadata={"help": "Seconds per HTTP attempt."})

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0 or self.timeout_s <= 0:
            raise ValueError(
                f"retry needs max_retries >= 0 ({self.max_retries}), backoff_s >= 0 ({self.backoff_s}), "
                f"max_backoff_s >= 0 ({self.max_backoff_s}) and timeout_s > 0 ({self.timeout_s})"
            )

    @classmethod
    def from_dict(cls, values: Any) -> RetryPolicy:
        """A policy from a mapping (a config's `retry:`); unknown keys fail with the valid ones."""
        if isinstance(values, cls):
            return values
        check_keys(values, cls.keys(), "retry")
        return cls(**values)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def max_wait_s(self) -> float:
        """The most the back-offs of one request add up to when no `Retry-After` asks for longer: what a judge
        whose connections are refused at once (a killed process) adds to a reward call before its groups get
        None. A replica that hangs instead adds each try's timeout on top: at most
        `(1 + max_retries) x replicas x timeout_s` more (the connect part capped at `CONNECT_TIMEOUT_S`).

        >>> RetryPolicy(max_retries=3, backoff_s=1.0, max_backoff_s=30.0).max_wait_s()
        10.5
        """
        return sum(min(1.5 * self.backoff_s * 2**i, self.max_backoff_s) for i in range(self.max_retries))

    def delay(self, attempt: int, rng: random.Random | None = None, retry_after: float | None = None) -> float:
        """Seconds to wait before retry `attempt + 1`: the server's `Retry-After` if longer, capped."""
        delay = self.backoff_s * 2**attempt * (rng or random).uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_backoff_s)


_SHARED: dict[tuple[str, ...], Replicas] = {}
_SHARED_LOCK = threading.Lock()


class Replicas:
    """Several servers (reward servers, or the judge's model endpoints) used as one: which to try next, and
    which to pass over for a while. Thread-safe; one object per process and set of addresses.

    `order()` ranks the replicas for a request that carries its whole work (a TRL reward group): the one
    with the fewest requests outstanding from this process first (ties taken in turn), replicas in their
    cool-off left out unless all are. `order(key)` ranks them for a one-sample request whose group the
    server assembles: by rendezvous hashing of `key` (the group's content), so every process, knowing
    nothing of the others, sends a prompt's samples to the same replica, and all move to the same next one
    when it cannot be reached. Key order ignores cool-offs: a process that skipped a replica the others
    still use would split groups.

    >>> replicas = Replicas(["http://a", "http://b", "http://c"])
    >>> replicas.order("prompt 1") == replicas.order("prompt 1"), sorted(replicas.order("prompt 1"))
    (True, [0, 1, 2])

    Args:
        urls: the replicas' addresses (as the caller will use them).
        cooloff_s: how long a replica that failed is passed over by `order()`; doubles with each failure in a
            row, up to `max_cooloff_s` (a `Retry-After` longer than that is kept).
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        cooloff_s: float = 5.0,
        max_cooloff_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.urls = list(urls)
        if not self.urls:
            raise ValueError("Replicas needs at least one address")
        if cooloff_s < 0 or max_cooloff_s < cooloff_s:
            raise ValueError(f"need 0 <= cooloff_s ({cooloff_s}) <= max_cooloff_s ({max_cooloff_s})")
        self.cooloff_s, self.max_cooloff_s, self.clock = cooloff_s, max_cooloff_s, clock
        n = len(self.urls)
        self.outstanding = [0] * n
        self.failures = [0] * n
        """Failures in a row, per replica (0 once it answers)."""
        self.down_until = [0.0] * n
        self.sent = [0] * n
        """Tries sent to each replica so far."""
        self._turn = 0
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, urls: Sequence[str]) -> Replicas:
        """The one `Replicas` of this process for these addresses (default cool-offs): the reward files verl
        and OpenRLHF load are called from many threads and event loops, and their requests must share one
        view of outstanding work and failed replicas."""
        key = tuple(urls)
        with _SHARED_LOCK:
            return _SHARED.setdefault(key, cls(key))

    def __len__(self) -> int:
        return len(self.urls)

    def order(self, key: str | None = None) -> list[int]:
        """The replicas to try for one request, best first (see the class)."""
        n = len(self.urls)
        if key is not None:
            return sorted(range(n), key=lambda i: _rendezvous(key, self.urls[i]), reverse=True)
        with self._lock:
            now = self.clock()
            turn = self._turn = (self._turn + 1) % n
            live = [i for i in range(n) if self.down_until[i] <= now]
            live.sort(key=lambda i: (self.outstanding[i], (i - turn) % n))
            if live:
                return live
            return sorted(range(n), key=lambda i: self.down_until[i])  # all cooling off: soonest back first

    def started(self, i: int) -> None:
        with self._lock:
            self.outstanding[i] += 1
            self.sent[i] += 1

    def finished(self, i: int, *, ok: bool | None, retry_after: float | None = None) -> None:
        """A try on replica `i` ended: it served (`ok`: a 200, or a refusal of the input), or failed (then it
        cools off for `cooloff_s`, doubling per failure in a row, or `retry_after` when that is longer), or
        neither is recorded (`None`: key-routed requests keep no cool-offs)."""
        with self._lock:
            self.outstanding[i] -= 1
            if ok is None:
                return
            if ok:
                self.failures[i], self.down_until[i] = 0, 0.0
                return
            self.failures[i] += 1
            cool = min(self.max_cooloff_s, self.cooloff_s * 2 ** (self.failures[i] - 1))
            self.down_until[i] = self.clock() + max(cool, retry_after or 0.0)

    def live(self) -> list[bool]:
        """Whether each replica is out of its cool-off now."""
        now = self.clock()
        return [until <= now for until in self.down_until]


def _rendezvous(key: str, url: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{key}\x00{url}".encode()).digest()[:8], "big")


class Failover:
    """One request's tries over `replicas` within `retry`: which replica next, and how long to wait first.

    A round tries the replicas `Replicas.order` gives, each once, without waiting between them: a replica
    that cannot be reached (connection refused or reset, a timeout) is passed over at once for the next.
    After a round in which every replica failed, the next round waits `retry.delay` (the back-off, or a
    `Retry-After`); there are `1 + retry.max_retries` rounds. A key-routed request (`key`) whose replica
    *answered* with a retryable status (408, 429, 5xx) ends its round there and asks the same replica again
    after the back-off: the rest of its group is held there. So with one replica it is exactly the one-server
    retry schedule, and the longest a request can take is `(1 + max_retries) × replicas × timeout_s` plus the
    back-offs (each capped at `max_backoff_s`).

        failover = Failover(replicas, retry)
        while (step := failover.next()) is not None:
            replica, wait_s = step
            ...  # sleep wait_s, post to replicas.urls[replica]; then failover.answered(...) or .unreachable(...)
    """

    def __init__(
        self, replicas: Replicas, retry: RetryPolicy, key: str | None = None, rng: random.Random | None = None
    ) -> None:
        self.replicas, self.retry, self.key, self.rng = replicas, retry, key, rng
        self.round = 0
        self.tries = 0
        self._queue = replicas.order(key)
        self._retry_after: float | None = None
        self._current: int | None = None

    def next(self) -> tuple[int, float] | None:
        """The next replica to try and the seconds to wait before trying it; None when the retries are spent."""
        wait = 0.0
        if not self._queue:
            if self.round >= self.retry.max_retries:
                return None
            wait = self.retry.delay(self.round, self.rng, self._retry_after)
            self.round += 1
            self._queue = self.replicas.order(self.key)
        self._retry_after = None
        self._current = self._queue.pop(0)
        self.tries += 1
        return self._current, wait

    def answered(self, status: int, retry_after: float | None = None) -> None:
        """The current replica answered with `status` (a retryable one, when the caller goes on)."""
        i = self._current
        assert i is not None
        retryable = is_retryable(status)
        if self.key is None:  # a whole group: let another replica have it, and let this one cool off
            self.replicas.finished(i, ok=not retryable, retry_after=retry_after)
        else:
            self.replicas.finished(i, ok=None)
            if retryable:  # its group is held there: back off and ask the same replica again
                self._queue = []
        self._retry_after = retry_after if retryable else None

    def unreachable(self) -> None:
        """The current replica could not be reached (connection refused or reset, a timeout): the next one is
        tried at once."""
        assert self._current is not None
        self.replicas.finished(self._current, ok=None if self.key is not None else False)

    def started(self) -> None:
        """A try is about to go to the current replica (counted as outstanding until it ends)."""
        assert self._current is not None
        self.replicas.started(self._current)

    def abandoned(self) -> None:
        """The current try was given up by the caller (cancelled): nothing is learnt about the replica."""
        assert self._current is not None
        self.replicas.finished(self._current, ok=None)

    def gave_up(self, error: str) -> RewardUnavailable:
        """The error for a request whose retries are spent, `error` being the last try's."""
        if len(self.replicas) == 1:
            return RewardUnavailable(f"{error} (after {self.retry.max_retries} retries)")
        return RewardUnavailable(
            f"{error} (after {self.retry.max_retries} retries: {self.tries} tries over {len(self.replicas)} replicas)"
        )
