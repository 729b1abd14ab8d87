"""Read the judge's decision out of free text. Total: any string in, an option or `None` out, never a raise.

Forms are tried from most to least explicit, and within the most explicit form present the *last*
occurrence wins (models often restate or correct themselves before the end):

1. the tag the judge is trained to write: `<answer>B</answer>` (also `<answer>(B)`, `<answer>Option B.`);
2. `\\boxed{B}`;
3. VL-RewardBench's `Overall Judgment: Answer 2 is better` (answer numbers count from 1);
4. phrases: `Answer: B`, `Final answer: B`, `The best answer is B`, `the correct option is (B)`.

A decision naming an option outside the K on offer (`<answer>E</answer>` with K = 3) is refused: the
result is `None`, not a guess.

>>> parse_choice("<think>B has the colour wrong.</think><answer>A</answer>", 2)
0
>>> parse_choice("Overall Judgment: Answer 2 is better.", 2)
1
>>> parse_choice("<answer>D</answer>", 3) is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WELL_FORMED", "ParsedAnswer", "extract_reasoning", "is_well_formed", "parse_answer", "parse_choice"]

_TAG = re.compile(
    r"<answer>\s*(?:\*\*)?\s*(?:(?:the\s+)?(?:best\s+)?(?:option|candidate|answer|choice)\s*[:\-]?\s*)?"
    r"[(\[*]*\s*(?P<label>[A-Za-z])\s*[)\]*]*(?=\s*(?:[.,;:!]|</answer>|\s|$))",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text\{\s*)?\(?\s*(?P<label>[A-Z])\s*\)?\s*\}?\s*\}")
_JUDGMENT = re.compile(
    r"Answer[\s*]*(?P<number>\d+)[\s*]*is[\s*]+(?:the[\s*]+)?(?:slightly[\s*]+)?better",
    re.IGNORECASE,
)
_PHRASE = re.compile(
    r"(?i:final\s+answer|best\s+(?:answer|candidate|option|response|choice)|correct\s+(?:answer|option)|answer)"
    r"[\s*]*(?i:is|:)[\s*]*(?i:option\s+|candidate\s+)?[(\[]?(?P<label>[A-Z])[)\]]?(?=[\s.,;:!*]|$)"
)
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
WELL_FORMED = re.compile(r"^\s*<think>(?P<think>.+?)</think>\s*<answer>\s*[A-Z]\s*</answer>\s*$", re.DOTALL)
"""The output contract to the letter: one reasoning block with content, then one answer letter, nothing else."""


@dataclass(frozen=True)
class ParsedAnswer:
    """A decision found in a text: which option, and where it stands (for option log-probs)."""

    index: int
    """0-based option index in the order the options were *shown*."""
    label: str
    """The label as written at `start` ("B" or "2")."""
    start: int
    """Character offset of the label in the text."""
    form: str
    """Which form matched: "tag", "boxed", "judgment" or "phrase"."""


def _last_letter(pattern: re.Pattern[str], text: str, k: int, form: str) -> ParsedAnswer | None | bool:
    """The last match as an answer, `None` if it is out of range, `False` if the form is absent."""
    matches = list(pattern.finditer(text))
    if not matches:
        return False
    m = matches[-1]
    label = m.group("label")
    index = ord(label.upper()) - ord("A")
    if not 0 <= index < k:
        return None
    return ParsedAnswer(index=index, label=label, start=m.start("label"), form=form)


def parse_answer(text: object, k: int) -> ParsedAnswer | None:
    """The judge's decision among `k` options shown as A, B, … (or 1, 2, … in the judgment form)."""
    try:
        if not isinstance(text, str) or k < 1:
            return None
        for pattern, form in ((_TAG, "tag"), (_BOXED, "boxed")):
            found = _last_letter(pattern, text, k, form)
            if found is not False:
                return found  # type: ignore[return-value]
        judgments = list(_JUDGMENT.finditer(text))
        if judgments:
            m = judgments[-1]
            number = int(m.group("number")) if len(m.group("number")) < 6 else 0
            if not 1 <= number <= k:
                return None
            return ParsedAnswer(index=number - 1, label=m.group("number"), start=m.start("number"), form="judgment")
        found = _last_letter(_PHRASE, text, k, "phrase")
        return None if found is False else found  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - totality is the contract; a regex surprise must not crash a 10k-item run
        return None


def parse_choice(text: object, k: int) -> int | None:
    """`parse_answer(text, k).index`, or `None`."""
    found = parse_answer(text, k)
    return None if found is None else found.index


def extract_reasoning(text: object) -> str:
    """The judge's reasoning: the `<think>` block if there is one, else the text before the answer tag."""
    if not isinstance(text, str):
        return ""
    m = _THINK.search(text)
    if m:
        return m.group(1).strip()
    return text.split("<answer>", 1)[0].strip()


def is_well_formed(text: object) -> bool:
    """True when `text` keeps the output contract exactly (`WELL_FORMED`, no tag nested in the reasoning).

    Stricter than `parse_answer`, which reads a decision out of any text: this is what the format reward pays.

    >>> is_well_formed("<think>B is red.</think><answer>B</answer>"), is_well_formed("The answer is B.")
    (True, False)
    """
    match = WELL_FORMED.match(text) if isinstance(text, str) else None
    return bool(match) and "<think>" not in match.group("think") and "<answer>" not in match.group("think")
