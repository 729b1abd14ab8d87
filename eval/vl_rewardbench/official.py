"""VL-RewardBench's official protocol, as `inference_hf.py` runs it: its prompt, k calls per item each with its
own random display order, its regex, and the outcome of each call and of each item.

The display order is drawn per call because the data is lopsided (the preferred response comes first in 1,245
of 1,250 rows): a judge that always says "Answer 1" would otherwise score ~99.6 %.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from eval.official_calls import official_request, official_sampling
from eval.pairwise import PairItem, prediction_row
from eval.vl_rewardbench.calpy import majority
from eval.vl_rewardbench.data import IMAGE_TAG
from judge.backends.base import Backend
from judge.images import load_image
from judge.judging import item_rng

__all__ = [
    "OFFICIAL_PATTERN",
    "OFFICIAL_PROMPT",
    "Outcome",
    "VLRBConfig",
    "call_outcome",
    "item_outcome",
    "official_predict",
    "official_prompt",
    "parse_official",
]

OFFICIAL_PROMPT = """ You are a highly capable multimodal AI assistant tasked with evaluating answers to visual questions. Please analyze the following image and question, then determine which of the two provided answers is better.

Question: {query}

Answer 1: {answer_1}

Answer 2: {answer_2}

Please evaluate both answers based on the following criteria:
1. Accuracy: How well does the answer align with the visual information in the image?
2. Completeness: Does the answer fully address all aspects of the question?
3. Clarity: Is the answer easy to understand and well-articulated?
4. Relevance: Does the answer directly relate to the question and the image?

After your evaluation, please:
1. Explain your reasoning for each criterion.
2. Provide an overall judgment on which answer is better (Answer 1 or Answer 2). For example: Overall Judgment: Answer X is better.

Your response should be structured and detailed, demonstrating your understanding of both the visual and textual elements of the task."""
"""The official pairwise prompt, verbatim (its leading space included)."""

OFFICIAL_PATTERN = re.compile(
    r"(?:Overall Judgment|Therefore)\s*.*\s*-*\s*Answer\s*(\d+)\s*is\s*(?:the\s*)?(?:slightly\s*)?better",
    re.IGNORECASE,
)
"""The official parse, applied to the reply with newlines and `*` removed."""

Outcome = Literal["agree", "reject", "doesntMatch", "other"]


def official_prompt(query: str, responses_shown: Sequence[str]) -> str:
    """The official prompt with the responses in display order (Answer 1 first), `"<image>\\n"` removed from
    the whole text as `inference_hf.py` does."""
    text = OFFICIAL_PROMPT.format(query=query, answer_1=responses_shown[0], answer_2=responses_shown[1])
    return text.replace(IMAGE_TAG, "")


def parse_official(text: str) -> int | None:
    """The answer number the official regex reads from a reply, or None when it does not match.

    >>> parse_official("**Overall Judgment**: Answer 2 is slightly better.")
    2
    >>> parse_official("Answer 1 is better.") is None  # no 'Overall Judgment' / 'Therefore' before it
    True
    """
    match = OFFICIAL_PATTERN.search(text.replace("\n", "").replace("*", ""))
    return int(match.group(1)) if match else None


def call_outcome(answer: int | None, display: Sequence[int], preferred: int) -> Outcome:
    """One call's outcome: `reject` only when the number names the rejected response's display position.

    Any other number counts as `agree`, as in the official script (even one that names no answer).
    """
    if answer is None:
        return "doesntMatch"
    rejected_position = display.index(1 - preferred) + 1
    return "reject" if answer == rejected_position else "agree"


def item_outcome(outcomes: Sequence[str]) -> Outcome:
    """The official per-item classification: an outcome with more than half of the calls, else `other`.

    >>> item_outcome(["agree", "agree", "reject"]), item_outcome(["agree", "reject"])
    ('agree', 'other')
    """
    return majority(outcomes)  # type: ignore[return-value]  # the same rule as cal.py's reading


@dataclass
class VLRBConfig:
    """The official run's knobs; defaults are `inference_hf.py`'s."""

    k: int = 10
    """Calls per item, each with its own random display order; majority-voted."""
    temperature: float = 0.2
    top_p: float = 0.2
    max_new_tokens: int = 2048
    seed: int = 0
    """Seeds each call's display order (the official script draws them unseeded)."""


def official_predict(backend: Backend, items: Sequence[PairItem], config: VLRBConfig) -> list[dict[str, Any]]:
    """Run the official protocol on a batch of items: k calls each, all in one backend call."""
    requests, displays = [], []
    for item in items:
        image = load_image(item.image)
        for call in range(config.k):
            display = [0, 1] if item_rng(config.seed, item.id, f"call{call}").randrange(2) == 0 else [1, 0]
            requests.append(official_request(official_prompt(item.query, [item.responses[i] for i in display]), image))
            displays.append(display)
    generations = backend.generate(requests, official_sampling(config, items))
    rows = []
    for i, item in enumerate(items):
        calls = []
        for j in range(i * config.k, (i + 1) * config.k):
            answer = parse_official(generations[j].text)
            outcome = call_outcome(answer, displays[j], item.preferred)
            calls.append({"display": displays[j], "answer": answer, "outcome": outcome})
        status = item_outcome([c["outcome"] for c in calls])
        pred = {"agree": item.preferred, "reject": 1 - item.preferred}.get(status)
        raw = [generations[j].text for j in range(i * config.k, (i + 1) * config.k)]
        rows.append(prediction_row(item, pred=pred, status=status, calls=calls, raw=raw))
    return rows
