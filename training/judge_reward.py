"""The reward the judge itself is trained on (judge GRPO): plain callables with TRL's reward signature.

(The judge rewarding a *policy*'s completions is another reward: `judge.reward`.)

MR. Judge's reward is `0.9 · (parsed answer == label) + 0.1 · (well-formed <think>…</think><answer>X</answer>)`,
and 0 for a completion longer than the budget (the paper's truncated reward: a judge that rambles past
its budget earns nothing, however it ends). The parts are separate functions too, so they can be logged
or weighted on their own in TRL (`reward_funcs=[judge_accuracy_reward, judge_format_reward]`).

Every function takes TRL's arguments — `completions` (strings, or conversational message lists) plus the
dataset's columns as keyword lists: `label` (index of the right option) and `n_options` (K). The same
parser the judge uses at inference reads the answers, so training and evaluation cannot drift apart.

    >>> judge_reward(["<think>B is red.</think><answer>B</answer>"], label=[1], n_options=[2])
    [1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judge.parser import is_well_formed, parse_choice
from judge.reward.inputs import completion_text

__all__ = [
    "JudgeReward",
    "judge_accuracy_reward",
    "judge_format_reward",
    "judge_reward",
    "make_judge_reward",
]


def judge_format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for a well-formed `<think>…</think><answer>X</answer>` completion, else 0.0."""
    return [float(is_well_formed(completion_text(c))) for c in completions]


def judge_accuracy_reward(
    completions: Sequence[Any], label: Sequence[int], n_options: Sequence[int], **kwargs: Any
) -> list[float]:
    """1.0 when the parsed answer is the label, else 0.0 (unparsable answers are wrong)."""
    return [float(parse_choice(completion_text(c), k) == y) for c, y, k in zip(completions, label, n_options)]


class JudgeReward:
    """The combined, length-capped judge reward (a class, not a closure, so it pickles for workers).

    Args:
        accuracy_weight: weight of the correct choice (0.9 in the paper).
        format_weight: weight of the well-formed output (0.1 in the paper).
        max_completion_tokens: completions that reach this many tokens (TRL's `completion_ids`) were cut off
            by the generation budget, or ran past it: they earn 0.
        max_completion_chars: the same cap in characters, for callers without token ids.
    """

    def __init__(
        self,
        accuracy_weight: float = 0.9,
        format_weight: float = 0.1,
        max_completion_tokens: int | None = None,
        max_completion_chars: int | None = None,
    ) -> None:
        self.accuracy_weight, self.format_weight = accuracy_weight, format_weight
        self.max_completion_tokens, self.max_completion_chars = max_completion_tokens, max_completion_chars
        self.__name__ = "judge_reward"  # TRL logs rewards by function name

    def _too_long(self, text: str, ids: Sequence[int] | None) -> bool:
        if self.max_completion_tokens is not None and ids is not None and len(ids) >= self.max_completion_tokens:
            return True
        return self.max_completion_chars is not None and len(text) > self.max_completion_chars

    def __call__(
        self,
        completions: Sequence[Any],
        label: Sequence[int],
        n_options: Sequence[int],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        texts = [completion_text(c) for c in completions]
        accuracy = judge_accuracy_reward(texts, label, n_options)
        form = judge_format_reward(texts)
        ids = completion_ids if completion_ids is not None else [None] * len(texts)
        return [
            0.0 if self._too_long(text, tid) else self.accuracy_weight * a + self.format_weight * f
            for text, tid, a, f in zip(texts, ids, accuracy, form)
        ]


def make_judge_reward(max_completion_tokens: int | None = None, **kwargs: Any) -> JudgeReward:
    """The paper's reward with a token budget: `make_judge_reward(max_completion_tokens=1024)`."""
    return JudgeReward(max_completion_tokens=max_completion_tokens, **kwargs)


judge_reward = JudgeReward()
"""0.9 · correct + 0.1 · well-formed, with no length cap."""
