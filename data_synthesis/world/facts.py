"""An answer as facts: the tokens the scene reasoner compares, with places, relations and sums kept whole."""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r'"[^"]*"|(?:top|middle|bottom) (?:left|centre|right)|to the (?:left|right) of'
    r"|\d+(?: [+=] \d+)+|\d+(?:(?:, | and )\d+)+|\w+|[^\w\s]"
)
"""Words, with the facts an answer states kept whole: `"CAT"`, `top left`, `to the left of`, `3 + 5 = 8`, `3 and 5`."""
_FILLER = {"a", "the", "is", "are", "at", "and", "in", "so", ",", ".", ";"}


def _span(tokens: list[str]) -> str:
    """A diff span without the filler around it: `, and 3 + 5 = 8` → `3 + 5 = 8`."""
    while tokens and tokens[0].lower() in _FILLER:
        tokens = tokens[1:]
    while tokens and tokens[-1].lower() in _FILLER:
        tokens = tokens[:-1]
    return re.sub(r" ([,.;])", r"\1", " ".join(tokens))


def _restated(tokens: list[str]) -> str:
    """An answer's facts without filler words: `The square at the top left is red.` → `square top left red`."""
    return " ".join(t.lower() for t in tokens if t.lower() not in _FILLER)


def _checked_facts(tokens: list[str]) -> list[str]:
    """An answer's facts, a stated place, relation or sum kept whole: `square`, `top left`, `red`."""
    return [t.lower() for t in tokens if t.lower() not in _FILLER and t.lower() != "there"]


def _facts(tokens: list[str]) -> list[str]:
    """The same facts, one word each (`top left` → `top`, `left`), as the `pairs` style compares them."""
    return " ".join(_checked_facts(tokens)).split()
