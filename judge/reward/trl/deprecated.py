"""The single reward class of before, as two deprecated factories that build today's classes with a warning.

JudgeRewardFunction(server_url="http://judge:8000")   # now HttpJudgeReward("http://judge:8000")
JudgeRewardFunction(judge=judge)                       # now InProcessJudgeReward(judge)
"""

from __future__ import annotations

import warnings
from typing import Any

from judge.reward.trl.http import AsyncHttpJudgeReward, HttpJudgeReward
from judge.reward.trl.local import InProcessJudgeReward
from judge.reward.wire import RetryPolicy

__all__ = ["AsyncJudgeRewardFunction", "JudgeRewardFunction"]

_RETRY_KEYWORDS = ("max_retries", "backoff_s", "max_backoff_s", "timeout_s")
_HTTP_ONLY = ("api_key", "max_concurrency", "send_image_paths", "min_pixels", "max_pixels")


def _legacy(name: str, server_url: str | None, judge: Any, kwargs: dict[str, Any], asynchronous: bool) -> Any:
    """The reward the single class of before built for these arguments, with a warning naming the new class."""
    if (server_url is None) == (judge is None):
        raise ValueError(f"{name}: give exactly one of server_url (HttpJudgeReward) or judge (InProcessJudgeReward)")
    retry = {key: kwargs.pop(key) for key in _RETRY_KEYWORDS if key in kwargs}
    if retry:
        kwargs["retry"] = RetryPolicy(**retry)
    if server_url is not None:
        new = AsyncHttpJudgeReward if asynchronous else HttpJudgeReward
        warnings.warn(f"{name}(server_url=…) is now {new.__name__}(url, …)", FutureWarning, stacklevel=3)
        return new(server_url, **kwargs)
    warnings.warn(f"{name}(judge=…) is now InProcessJudgeReward(judge, …)", FutureWarning, stacklevel=3)
    return InProcessJudgeReward(judge, **{k: v for k, v in kwargs.items() if k not in _HTTP_ONLY})


def JudgeRewardFunction(server_url: str | None = None, *, judge: Any = None, **kwargs: Any) -> Any:
    """Deprecated: `HttpJudgeReward(url, …)` or `InProcessJudgeReward(judge, …)`; retry keywords go in `retry`."""
    return _legacy("JudgeRewardFunction", server_url, judge, kwargs, asynchronous=False)


def AsyncJudgeRewardFunction(server_url: str | None = None, *, judge: Any = None, **kwargs: Any) -> Any:
    """Deprecated: `AsyncHttpJudgeReward(url, …)` (an in-process judge has no async form: `InProcessJudgeReward`)."""
    return _legacy("AsyncJudgeRewardFunction", server_url, judge, kwargs, asynchronous=True)
