"""The SFT record (synthesis input), the flaw taxonomy and the negative candidate.

A real SFT record (the contract in docs/architecture.md):

    {"id": "world-000042", "image": "images/world-000042.png", "question": "How many circles are there?",
     "answer": "There are 3 circles.", "source": "world/count"}

Records that came from one multi-turn conversation share a *group* (the id before `#`, e.g. `llava-17#t0`
and `llava-17#t1`); train/validation splits are made by group so that no conversation leaks across them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from judge.types import DataError, ImageRef, require_id, require_object

__all__ = ["FLAWS", "IMAGE_FLAWS", "Flaw", "Negative", "SFTRecord", "group_of", "image_refs"]


class Flaw(str, Enum):
    """MR. Judge's taxonomy of how a plausible answer goes wrong."""

    HALLUCINATED_OBJECT = "hallucinated_object"
    HALLUCINATED_ATTRIBUTE = "hallucinated_attribute"
    HALLUCINATED_COUNT = "hallucinated_count"
    HALLUCINATED_SPATIAL = "hallucinated_spatial"
    HALLUCINATED_TEXT = "hallucinated_text"
    INCOMPLETE = "incomplete"
    INCORRECT_REASONING = "incorrect_reasoning"
    INCORRECT_KNOWLEDGE = "incorrect_knowledge"


FLAWS: tuple[str, ...] = tuple(f.value for f in Flaw)

IMAGE_FLAWS: frozenset[str] = frozenset(f.value for f in Flaw if f.value.startswith("hallucinated_"))
"""Flaws only the picture reveals (a wrong object, attribute, count, position or text); the others (a missing
part, a wrong step, a false general fact) show in the answer's text. A judge that does not look at the image
decides the first at chance."""


def image_refs(image: Any) -> list[Any]:
    """A record's or item's `image` as a list: `[]` for text-only, one element, or the row's several images."""
    if image is None:
        return []
    return list(image) if isinstance(image, list) else [image]


def group_of(record_id: str | int) -> str:
    """The split group of a record: its id up to the first `#` (multi-turn records share it)."""
    return str(record_id).split("#", 1)[0]


@dataclass
class SFTRecord:
    """One ordinary supervised example: an image, a question, and the reference (best) answer."""

    id: str
    """Unique id; `#` separates a conversation id from a turn (`conv-7#t2`)."""
    image: ImageRef | list[ImageRef] | None
    """Path (relative to the records file), data URL, bytes; a list when the row has several images;
    `None` for text-only."""
    question: str
    answer: str
    """The reference answer; synthesis treats it as the best candidate."""
    source: str = ""
    """Where the record came from (dataset name, `world/count`, …)."""

    @classmethod
    def from_dict(cls, row: Any, where: str = "") -> SFTRecord:
        require_object(row, "write one JSON object per record", where)
        for name in ("id", "question", "answer"):
            if name not in row or row[name] is None:
                raise DataError(
                    name, "missing", f"every SFT record needs '{name}' (id, image, question, answer, source)", where
                )
        for name in ("question", "answer"):
            if not isinstance(row[name], str) or not row[name].strip():
                raise DataError(
                    name, f"expected a non-empty string, got {row[name]!r}", f"put the {name} text here", where
                )
        record_id = require_id(row["id"], "give each record a unique id", where)
        source = row.get("source") or ""
        if not isinstance(source, str):
            raise DataError(
                "source",
                f"expected a string, got {type(source).__name__}",
                "name the dataset, or drop the field",
                where,
            )
        return cls(
            id=str(record_id), image=row.get("image"), question=row["question"], answer=row["answer"], source=source
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Negative:
    """A flawed-but-plausible answer, with the kind of flaw it carries."""

    text: str
    flaw: str
    """One of `FLAWS`."""

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Negative:
        return cls(text=str(row["text"]), flaw=str(row["flaw"]))

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
