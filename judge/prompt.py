"""The judge's multiple-choice prompt: question, lettered candidates, criteria, and the answer format.

One builder serves judging, training-data assembly and the reward server, so the model always sees the
prompt it was trained on. A user turn looks like this (the image part first, then the text):

    You are a careful judge of answers to a question about an image. ...
    Rank the candidates by these priorities, in order: harmlessness ..., then accuracy ..., then detail ...

    Question: What colour is the circle?

    Candidates:
    A. The circle is blue.
    B. The circle is red.

    Think it through inside <think> and </think>, then give the letter of the best candidate as
    <answer>X</answer>.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSWER_FORMAT",
    "COMPACT_PROMPT",
    "DEFAULT_CRITERIA",
    "DEFAULT_INSTRUCTION",
    "MAX_CANDIDATES",
    "PromptConfig",
    "build_messages",
    "build_prompt_text",
    "lettered_candidates",
    "option_letters",
]

DEFAULT_INSTRUCTION = (
    "You are a careful judge of answers to a question about an image. Read the question and every "
    "candidate answer, check each one against the image, and choose the best candidate."
)
"""What the judge is asked to do."""

DEFAULT_CRITERIA = (
    "Rank the candidates by these priorities, in order: harmlessness (nothing unsafe or harmful), then "
    "accuracy (faithful to the image and correct), then detail (complete and helpful)."
)
"""MR. Judge's ranking priority: harmlessness first, then accuracy, then detail."""

ANSWER_FORMAT = (
    "Think it through inside <think> and </think>, then give the letter of the best candidate as <answer>X</answer>."
)
"""The output contract: `judge.parser` reads the answer, and `judge.parser.is_well_formed` (the format reward) checks it."""

MAX_CANDIDATES = len(string.ascii_uppercase)


def option_letters(k: int) -> list[str]:
    """The labels of `k` candidates: A, B, C, ...

    >>> option_letters(3)
    ['A', 'B', 'C']
    """
    if not 2 <= k <= MAX_CANDIDATES:
        raise ValueError(f"a multiple-choice item needs 2 to {MAX_CANDIDATES} candidates, got {k}")
    return list(string.ascii_uppercase[:k])


def lettered_candidates(candidates: list[str]) -> str:
    """The candidate block, one `A. text` line each: the judge prompt's, and the distillation reasoning prompt's.

    >>> print(lettered_candidates(["4", "5"]))
    A. 4
    B. 5
    """
    return "\n".join(f"{letter}. {text}" for letter, text in zip(option_letters(len(candidates)), candidates))


@dataclass
class PromptConfig:
    """The wording of the judge prompt; every field may be replaced (e.g. from a YAML config)."""

    instruction: str = DEFAULT_INSTRUCTION
    """First paragraph: the judge's task."""
    criteria: str | None = DEFAULT_CRITERIA
    """Second paragraph: how to rank; `None` leaves it out."""
    answer_format: str = ANSWER_FORMAT
    """Last paragraph: how to write the reasoning and the answer."""
    system: str | None = None
    """Optional system message; `None` keeps the model's default."""


COMPACT_PROMPT = PromptConfig(
    instruction="Which candidate answers the question about the image best?",
    criteria=None,
    answer_format="Check each candidate against the image in <think></think>, then answer <answer>X</answer>.",
)
"""A short judge prompt for tiny models on a CPU, where every prompt token costs training steps (the tiny
recipe trains, judges and serves with it)."""


def build_prompt_text(question: str, candidates: list[str], config: PromptConfig | None = None) -> str:
    """The text of the judge's user turn, candidates lettered in the order given.

    >>> print(build_prompt_text("2+2?", ["4", "5"], PromptConfig(criteria=None)).splitlines()[2:6])
    ['Question: 2+2?', '', 'Candidates:', 'A. 4']
    """
    config = config or PromptConfig()
    parts = [config.instruction]
    if config.criteria:
        parts.append(config.criteria)
    head = "\n".join(parts)
    return f"{head}\n\nQuestion: {question}\n\nCandidates:\n{lettered_candidates(candidates)}\n\n{config.answer_format}"


def build_messages(
    question: str,
    candidates: list[str],
    *,
    n_images: int = 1,
    config: PromptConfig | None = None,
) -> list[dict[str, Any]]:
    """Chat messages for one judgement: image placeholders first, then the prompt text.

    Image parts are `{"type": "image"}` placeholders; backends attach the pixels themselves (the
    processor for transformers, data URLs for HTTP), so messages stay JSON-serialisable.
    """
    config = config or PromptConfig()
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    content.append({"type": "text", "text": build_prompt_text(question, candidates, config)})
    messages: list[dict[str, Any]] = []
    if config.system:
        messages.append({"role": "system", "content": config.system})
    messages.append({"role": "user", "content": content})
    return messages
