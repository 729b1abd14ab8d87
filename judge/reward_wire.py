"""What every HTTP client of the reward server shares: the environment names, one retry policy, two errors.

The TRL reward (`judge.reward_http`), the verl and OpenRLHF files (`judge/integrations/`) and `mrjudge serve`
read the same variables and retry the same way, from here. Standard library only: the OpenRLHF file loads
this module by path on training nodes where mr-judge is not installed.

A reward that could not be had is never replaced by a stand-in value: a request the server refuses for its
input (a missing or out-of-root image, 413, 415, 422, a wrong key) raises `RewardRefused` with the server's
message at once; connection errors, timeouts, 408, 429 and 5xx are retried (`RetryPolicy`), then raise
`RewardUnavailable`. Only a verdict the judge gave but that could not be scored (unparsed, or a lone response
without a reference) is filled with a neutral value, and counted.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "API_KEY_ENV",
    "REWARD_TIMEOUT_ENV",
    "REWARD_URL_ENV",
    "RetryPolicy",
    "RewardError",
    "RewardRefused",
    "RewardUnavailable",
    "check_keys",
    "is_retryable",
    "retry_after_s",
    "reward_server_url",
    "server_api_key",
]

API_KEY_ENV = "MRJUDGE_SERVER_API_KEY"
"""The reward server's key: `mrjudge serve` reads it, every client sends it (a key never enters a config file)."""
REWARD_URL_ENV = "MRJUDGE_REWARD_URL"
"""The reward server's address, for the verl and OpenRLHF files (frameworks that load a reward by path)."""
REWARD_TIMEOUT_ENV = "MRJUDGE_REWARD_TIMEOUT_S"
"""Seconds per attempt of the OpenRLHF file (its default stays under OpenRLHF's own 180 s)."""


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


def reward_server_url(explicit: str | None = None) -> str:
    """`explicit`, else `$MRJUDGE_REWARD_URL`; a missing address fails with what to set."""
    url = (explicit or os.environ.get(REWARD_URL_ENV, "")).strip()
    if not url:
        raise RuntimeError(f"set {REWARD_URL_ENV} to the reward server's address (`mrjudge serve` prints it on start)")
    return url


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

    def delay(self, attempt: int, rng: random.Random | None = None, retry_after: float | None = None) -> float:
        """Seconds to wait before retry `attempt + 1`: the server's `Retry-After` if longer, capped."""
        delay = self.backoff_s * 2**attempt * (rng or random).uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_backoff_s)
