"""The judge as a TRL reward function for *policy* GRPO: each prompt's completions are judged against each other.

    from judge.policy_reward import AsyncHttpJudgeReward, InProcessJudgeReward

    reward = AsyncHttpJudgeReward("http://judge-node:8000")                  # `mrjudge serve`, over HTTP
    reward = InProcessJudgeReward("runs/judge", reference_column="answer")   # a judge in this process
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=prompts)     # TRL's reward signature

One class per transport (`judge.reward_http`, `judge.reward_local`), both on `judge.reward_base`; a recipe
names one with a nested spec (`judge.reward_spec`: `reward: {transport: http, url: …}`). One call
(`prompts`, `completions`, plus the dataset's columns as keyword lists, as TRL passes them):

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
   flight per server, images as PNG data URLs), each group whole to one of the servers `url` names (the one
   with the fewest requests outstanding; `judge.reward_wire.Replicas`); in process, all groups in one
   `judge.reward_scoring.compute_rewards` batch (the same engine the server runs).
4. **Retry, then no signal; refused input raises.** Failures are retried as `retry` says
   (`judge.reward_wire.RetryPolicy`: connection errors, timeouts, 408, 429 and 5xx, with exponential back-off
   and jitter, a 503's `Retry-After` honoured; with several servers the next one at once, a failed one skipped
   for a cool-off), then the group's rewards are `None`: a run rides out a judge restart. A request refused
   for its input (a missing or unreadable image, 413, 415, 422, a wrong key) raises `RewardRefused` with the
   server's message at once. A reward is never made up for a group that was not judged: `None` (TRL: NaN,
   out of the baseline, zero advantage). Failures, retries and latency are counted through TRL's
   `log_metric` hook before the call returns or raises (`judge/failed_frac`, `judge/failed_groups`,
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
"""

from __future__ import annotations

import warnings
from typing import Any

from judge.reward_base import GroupedJudgeReward
from judge.reward_http import AsyncHttpJudgeReward, HttpJudgeReward, reward_endpoint
from judge.reward_local import InProcessJudgeReward
from judge.reward_spec import HttpRewardSpec, InProcessRewardSpec, reward_spec
from judge.reward_wire import API_KEY_ENV, RetryPolicy

__all__ = [
    "API_KEY_ENV",
    "AsyncHttpJudgeReward",
    "GroupedJudgeReward",
    "HttpJudgeReward",
    "HttpRewardSpec",
    "InProcessJudgeReward",
    "InProcessRewardSpec",
    "RetryPolicy",
    "reward_endpoint",
    "reward_spec",
]

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
