"""Per-policy rewards: a named callable with TRL's reward signature, or the judge reward server.

`reference_f1` is a cheap in-process reward (word-overlap F1 with the reference answer, SQuAD-style): it
needs no judge, so tests and benchmarks run anywhere, and it is a sane default for prompts that carry an
`answer`.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from judge.reward.inputs import completion_text

__all__ = ["judge_reward", "reference_f1", "resolve_reward"]

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def reference_f1(completions: Sequence[Any], answer: Sequence[str | None] | None = None, **kwargs: Any) -> list:
    """Word-overlap F1 between each completion and its reference `answer` (None where a row has no answer).

    >>> reference_f1(["a red circle"], answer=["There is a red circle."])
    [0.75]
    """
    answers = answer if answer is not None else [None] * len(completions)
    rewards: list[float | None] = []
    for completion, reference in zip(completions, answers):
        if reference is None:
            rewards.append(None)
            continue
        got, want = _words(completion_text(completion)), _words(reference)
        common = sum((Counter(got) & Counter(want)).values())
        rewards.append(0.0 if not common else 2 * common / (len(got) + len(want)))
    return rewards


def judge_reward(spec: Any) -> Callable[..., list]:
    """`reward: judge`: the judge behind the reward server at `judge_server_url` (`judge.reward.trl.http`), with
    `reward_kwargs` as more keys of its `judge.reward.trl.spec.HttpRewardSpec` (`retry: {max_retries: 5}`, …)."""
    from judge.reward.trl.spec import reward_spec
    from judge.reward.wire import RetryPolicy
    from training.policy import TEXT_POLICY_IMAGE_COLUMN

    options = dict(spec.reward_kwargs)
    flat = {key: options.pop(key) for key in RetryPolicy.keys() if key in options}  # keywords of the old class
    if flat:
        news = ", ".join(f"retry.{key}" for key in flat)
        warnings.warn(f"policy {spec.name!r}: reward_kwargs {', '.join(flat)} are now {news}", FutureWarning, 2)
        options["retry"] = {**(options.get("retry") or {}), **flat}
    values = {"url": spec.judge_server_url, "mode": spec.judge_mode, "reference_column": spec.judge_reference_column}
    try:
        http = reward_spec({"transport": "http", **values, **options})
    except ValueError as exc:
        raise ValueError(f"policy {spec.name!r}: {exc}") from exc
    return http.build((TEXT_POLICY_IMAGE_COLUMN,), asynchronous=False)  # this loop calls it, not TRL's


def resolve_reward(spec: Any) -> Callable[..., list]:
    """The policy's reward callable: `module:callable` imported (a class or factory is called with
    `reward_kwargs`), or, for `reward: judge`, the judge reward (`judge_reward`)."""
    if spec.reward == "judge":
        return judge_reward(spec)
    module_name, _, attr = spec.reward.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"policy {spec.name!r}: reward {spec.reward!r} cannot be imported ({exc})") from exc
    if isinstance(target, type) or spec.reward_kwargs:
        target = target(**spec.reward_kwargs)
    if not callable(target):
        raise ValueError(f"policy {spec.name!r}: reward {spec.reward!r} is not callable")
    return target
