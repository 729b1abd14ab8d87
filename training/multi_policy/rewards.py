"""Per-policy rewards: a named callable with TRL's reward signature, or the judge reward server.

`reference_f1` is a cheap in-process reward (word-overlap F1 with the reference answer, SQuAD-style): it
needs no judge, so tests and benchmarks run anywhere, and it is a sane default for prompts that carry an
`answer`.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from judge.reward_inputs import completion_text

__all__ = ["reference_f1", "resolve_reward"]

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


def resolve_reward(spec: Any) -> Callable[..., list]:
    """The policy's reward callable: `module:callable` imported (a class or factory is called with
    `reward_kwargs`), or, for `reward: judge`, the judge reward function pointed at `judge_server_url`."""
    if spec.reward == "judge":
        from judge.policy_reward import JudgeRewardFunction
        from training.policy import TEXT_POLICY_IMAGE_COLUMN

        return JudgeRewardFunction(
            spec.judge_server_url,
            mode=spec.judge_mode,
            reference_column=spec.judge_reference_column,
            image_columns=(TEXT_POLICY_IMAGE_COLUMN,),
            **spec.reward_kwargs,
        )
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
