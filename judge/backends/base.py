"""The one small interface every inference engine sits behind, and the option log-prob bookkeeping.

A backend takes a batch of chat requests (messages + images) and returns texts; where the engine exposes
token log-probs it also returns, for each option label, the log-prob the model gave that label at the
position where it wrote its answer. Soft judge scores come from those.

Finding that position is engine-independent: parse the text (`judge.parser`), take the character offset
of the answer label, find the generated token that covers it, and look at that step's alternatives. With
byte-level BPE the label often shares its token with the character before it (`>A` after `<answer`), so
an alternative counts for label L when it reads the same *head* followed by L.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from judge.parser import parse_answer
from judge.prompt import option_letters

__all__ = [
    "Backend",
    "ChatRequest",
    "Generation",
    "SamplingParams",
    "answer_label_logprobs",
    "labels_for",
    "locate_token",
]


@dataclass
class SamplingParams:
    """How to decode. `temperature == 0` means greedy."""

    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens ({self.max_new_tokens}) must be at least 1")
        if self.temperature < 0:
            raise ValueError(f"temperature ({self.temperature}) must be >= 0 (0 means greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p ({self.top_p}) must be in (0, 1]")


@dataclass
class ChatRequest:
    """One generation: chat messages whose `{"type": "image"}` parts are filled from `images` in order."""

    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)
    """Decoded `PIL.Image`s, one per image placeholder in `messages`."""
    n_options: int | None = None
    """When set, the backend returns the log-prob of each of the `n_options` labels at the answer."""
    adapter: str | None = None
    """A LoRA adapter the backend has loaded (`load_adapter`) to answer with; None means the bare base."""
    images_fitted: bool = False
    """True when `images` are already resized into the pixel range (the `Judge` sets it when it has one), so a
    backend that resizes (HTTP) sends them as they are; the model's processor gets that same range."""

    @classmethod
    def user(cls, text: str, images: Sequence[Any] = ()) -> ChatRequest:
        """One user turn: a placeholder per image, then the text."""
        content: list[dict[str, Any]] = [{"type": "image"} for _ in images]
        content.append({"type": "text", "text": text})
        return cls(messages=[{"role": "user", "content": content}], images=list(images))


@dataclass
class Generation:
    """A backend's answer to one `ChatRequest`."""

    text: str
    label_logprobs: list[float] | None = None
    """Log-prob of each option label (in display order) at the answer position; `-inf` for a label the
    engine did not report; `None` when there are no log-probs (engine, or no parsable answer)."""
    reasoning: str | None = None
    """A thinking model's reasoning when the server returns it apart from `text` (vLLM's reasoning
    parsers: `message.reasoning`, formerly `reasoning_content`); `None` when it is not separated."""
    finish_reason: str | None = None
    """Why generation stopped, where the engine says: "stop", or "length" when cut at the token budget."""
    prompt_tokens: int = 0
    """Tokens the engine read for this request (text and image tokens); 0 when the engine did not say."""
    completion_tokens: int = 0
    """Tokens it generated (the stop token included, padding not); 0 when the engine did not say."""


class Backend(Protocol):
    """What the judge needs from an inference engine."""

    name: str

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        """One `Generation` per request, in order."""
        ...


def labels_for(form: str, k: int) -> list[str]:
    """The labels the options carry in a given answer form: numbers in VL-RewardBench's, letters elsewhere."""
    return [str(i + 1) for i in range(k)] if form == "judgment" else option_letters(k)


def locate_token(pieces: Sequence[str], char_pos: int) -> tuple[int, str] | None:
    """The index of the token covering `char_pos` in `"".join(pieces)`, and its text before that position."""
    start = 0
    for index, piece in enumerate(pieces):
        end = start + len(piece)
        if start <= char_pos < end:
            return index, piece[: char_pos - start]
        start = end
    return None


def _matches(alternative: str, head: str, label: str) -> bool:
    return alternative.strip() == (head + label).strip()


def answer_label_logprobs(
    text: str,
    n_options: int,
    step_alternatives: Any,
    locate: Any,
) -> list[float] | None:
    """Per-label log-probs at the answer position of `text`, or `None` where they cannot be had.

    Args:
        text: the generated text.
        n_options: K, the number of options shown.
        step_alternatives: `step -> {token text: log-prob}` (or `(text, log-prob)` pairs) for the
            alternatives the engine reports at that generated token.
        locate: `char_pos -> (step, head) | None`, the generated token covering a character offset and its
            text before that offset (`locate_token` over the token pieces, or an engine's own lookup).
    """
    parsed = parse_answer(text, n_options)
    if parsed is None:
        return None
    located = locate(parsed.start)
    if located is None:
        return None
    step, head = located
    if any(ch.isalnum() for ch in head):
        return None  # the label is glued to a word ("Answers"): no clean alternative exists
    alternatives = step_alternatives(step) or ()
    pairs = list(alternatives.items()) if isinstance(alternatives, Mapping) else list(alternatives)
    result: list[float] = []
    for label in labels_for(parsed.form, n_options):
        found = [lp for alt, lp in pairs if _matches(alt, head, label)]
        result.append(_logsumexp(found) if found else -math.inf)
    return result if any(math.isfinite(x) for x in result) else None


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if not math.isfinite(top):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))
