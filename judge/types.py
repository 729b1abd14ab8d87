"""The two records everything else exchanges: the multiple-choice item and the verdict.

Both follow the data contracts in docs/architecture.md and round-trip through JSON unchanged. A real item row:

    {"id": "shapes-0003", "image": "images/0003.png", "question": "What colour is the circle?",
     "candidates": ["The circle is blue.", "The circle is red."], "label": 1,
     "meta": {"flaws": ["hallucinated_attribute", null]}}

and the verdict a judge writes for it:

    {"id": "shapes-0003", "choice": 1, "probs": [0.08, 0.92], "consistent": true, "votes": [1, 1],
     "reasoning": "Image: a red circle. A: blue, no. B: red, yes.",
     "raw": ["<think>...</think><answer>B</answer>", "<think>...</think><answer>A</answer>"],
     "usage": {"prompt_tokens": 412, "completion_tokens": 58}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from judge.prompt import MAX_CANDIDATES

__all__ = ["DataError", "ImageRef", "MCItem", "Verdict", "require_id", "require_object"]

ImageRef = str | bytes | Any
"""A file path, a `data:` URL, raw encoded bytes, or an in-memory `PIL.Image.Image`."""


class DataError(ValueError):
    """A record that does not fit its contract; the message names the field and what to change."""

    def __init__(self, field_name: str, problem: str, fix: str, where: str = "") -> None:
        self.field_name = field_name
        self.problem = problem
        self.fix = fix
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}field '{field_name}': {problem} — {fix}")


def require_object(row: Any, fix: str, where: str = "", field_name: str = "<row>") -> Mapping[str, Any]:
    """`row` when it is a JSON object (a mapping), else a `DataError` naming `field_name` and `fix`."""
    if not isinstance(row, Mapping):
        raise DataError(field_name, f"expected an object, got {type(row).__name__}", fix, where)
    return row


def require_id(value: Any, fix: str, where: str = "", field_name: str = "id") -> str | int:
    """`value` when it is a usable id (a non-empty string or an integer, not a bool), else a `DataError`."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise DataError(field_name, f"expected a non-empty string or an integer, got {value!r:.80}", fix, where)
    return value


def _is_image_ref(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return bool(value)
    # PIL images and {"bytes": ..., "path": ...} dicts as datasets' Image feature stores them.
    return hasattr(value, "convert") or (isinstance(value, Mapping) and ("bytes" in value or "path" in value))


@dataclass
class MCItem:
    """One multiple-choice judging question: which candidate answers `question` about `image` best?"""

    id: str | int
    """Unique within a file; verdicts carry it back and resumable jobs skip ids already done."""
    question: str
    """The question the candidates answer."""
    candidates: list[str]
    """K >= 2 candidate answers, in the caller's order; `choice` and `probs` index this list."""
    image: ImageRef | list[ImageRef] | None = None
    """One image (or a list of them) the question is about; `None` for a text-only item."""
    label: int | None = None
    """Index of the best candidate when known (training and evaluation), else `None`."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Free-form extras, e.g. the flaw type of each negative or the source benchmark."""

    @property
    def images(self) -> list[ImageRef]:
        """The item's images as a list (empty for text-only items)."""
        if self.image is None:
            return []
        return list(self.image) if isinstance(self.image, list) else [self.image]

    @classmethod
    def from_dict(cls, row: Any, where: str = "") -> MCItem:
        """Validate one row (e.g. a parsed JSONL line); raise `DataError` naming the first bad field."""
        require_object(row, "write one JSON object per line", where)
        for name in ("id", "question", "candidates"):
            if name not in row:
                raise DataError(
                    name, "missing", f"add '{name}' (see the MC item contract in docs/architecture.md)", where
                )
        item_id = require_id(row["id"], "give each item a unique id", where)
        question = row["question"]
        if not isinstance(question, str):
            raise DataError(
                "question", f"expected a string, got {type(question).__name__}", "put the question text here", where
            )
        candidates = row["candidates"]
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise DataError(
                "candidates", "expected a list of strings", 'write e.g. ["answer one", "answer two"]', where
            )
        if not 2 <= len(candidates) <= MAX_CANDIDATES:
            raise DataError(
                "candidates",
                f"expected 2 to {MAX_CANDIDATES} candidates, got {len(candidates)}",
                "give at least two candidate answers to choose from",
                where,
            )
        label = row.get("label")
        if label is not None and (
            isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(candidates)
        ):
            raise DataError(
                "label",
                f"expected null or an index in [0, {len(candidates) - 1}], got {label!r}",
                "use the 0-based index of the best candidate",
                where,
            )
        image = row.get("image")
        images = image if isinstance(image, list) else ([] if image is None else [image])
        for img in images:
            if not _is_image_ref(img):
                raise DataError(
                    "image",
                    f"expected a file path, a data URL or image bytes, got {type(img).__name__}",
                    "use a path relative to the file, a data: URL, or null for a text-only item",
                    where,
                )
        meta = row.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise DataError("meta", f"expected an object, got {type(meta).__name__}", "use {} or drop the field", where)
        return cls(
            id=item_id, question=question, candidates=list(candidates), image=image, label=label, meta=dict(meta)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    """What the judge concluded about one `MCItem`, with everything needed to audit it."""

    id: str | int
    """The item's id."""
    choice: int | None
    """Index (into the item's candidates, as given) of the best candidate; `None` when no call parsed."""
    probs: list[float] | None
    """Each candidate's probability of being best (sums to 1), from option-letter log-probs averaged over
    display orders; `None` when the engine gives no log-probs or no answer was parsed."""
    consistent: bool | None
    """True when every parsed call chose the same candidate; `None` with fewer than two parsed calls."""
    votes: list[int | None]
    """Each call's choice, mapped back to the given order (`None` = unparsable), display-order major."""
    reasoning: str
    """The reasoning of a call that voted for `choice` (the `<think>` text)."""
    raw: list[str]
    """Every call's full output, in the order of `votes`."""
    usage: dict[str, int] | None = None
    """`{"prompt_tokens", "completion_tokens"}` summed over the calls, so an image's cost can be seen and budgeted
    (a 1600x1200 photo is ~2,450 visual tokens per call at Qwen2.5-VL's stock `max_pixels`); `None` in a
    verdict written before usage was counted."""
    games: list[dict[str, Any]] | None = None
    """A verdict made of pairwise games (a knock-out bracket or round robin over more candidates than the judge
    is shown at once): each game's `round`, its two `players` and `winner` (indices into the candidates, None:
    unparsed) and each call's `votes` (indices into the candidates), in the order of `raw`. None otherwise, and
    then left out of `to_dict`, so a plain verdict's record is unchanged."""

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if row["games"] is None:
            del row["games"]
        return row

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Verdict:
        return cls(**{name: row.get(name) for name in cls.__dataclass_fields__})
