"""One source row → its id, its (question, answer) turns and its image values: the three row shapes.

- LLaVA: `{"id", "image": "coco/x.jpg" | [..], "conversations": [{"from": "human", "value": "<image>\\n…"},
  {"from": "gpt", "value": "…"}, …]}`.
- TRL's conversational VLM format (read from TRL 1.16's `docs/source/dataset_formats.md` "Vision datasets"
  and `trl.data_utils.prepare_multimodal_messages`): `{"messages": [{"role": "user", "content": [{"type":
  "image"}, {"type": "text", "text": "…"}]}, {"role": "assistant", "content": …}], "images": [..]}`, or
  the same split as `prompt` / `completion` message lists. Contents may also be plain strings (TRL then
  puts every image before the first user message); an image part may carry its own image (`"image"`).
- Flat rows (JSONL, Parquet, `datasets`), read through a `FieldMap`.

Multi-turn rows give one record per (user, assistant) turn; every turn keeps all the row's images, since
a later question may refer to any of them. Nothing here decodes an image: `source_images` does that, in
parallel, after the text of the row has passed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from judge.types import DataError, require_id, require_object

__all__ = ["DEFAULT_COLUMNS", "FieldMap", "ParsedRow", "parse_row", "row_id"]

DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "id": ("id",),  # when absent, ids are derived as "<source-name>-<row index>"
    "image": ("image", "images", "image_path", "img"),
    "question": ("question", "query", "prompt", "instruction"),
    "answer": ("answer", "response", "output", "gt_answer"),
}
_WHAT = {"id": "a unique id", "image": "the image", "question": "the question", "answer": "the reference answer"}
_IMAGE_TOKEN = re.compile(r"\n?<image>\n?")
_HUMAN, _GPT = {"human", "user"}, {"gpt", "assistant"}


@dataclass
class FieldMap:
    """Column names in the source; `None` takes the first of `DEFAULT_COLUMNS[field]` present in the row."""

    id: str | None = None
    """`None` → the row's `id` if it has one, else `"<source-name>-<row index>"`."""
    image: str | None = None
    """`None` → first of image/images/image_path/img. A flat row with none of them is refused unless
    `text_only`: a misnamed image column must not turn a multimodal set into text-only data in silence."""
    question: str | None = None
    answer: str | None = None
    text_only: bool = False
    """The set has no images on purpose: flat rows without an image column are text-only records."""

    def column(self, field: str, row: Mapping[str, Any]) -> str | None:
        explicit: str | None = getattr(self, field)
        return explicit if explicit is not None else next((c for c in DEFAULT_COLUMNS[field] if c in row), None)


@dataclass
class ParsedRow:
    """A row whose text passed: its records' ids and turns, and the image values still to be checked."""

    id: str
    pairs: list[tuple[str, str]]
    images: list[Any]

    @property
    def record_ids(self) -> list[str]:
        return [self.id] if len(self.pairs) == 1 else [f"{self.id}#t{turn}" for turn in range(len(self.pairs))]


def row_id(row: Any, fields: FieldMap) -> str | None:
    """The row's own id when it has a usable one (for reports about a row that failed), else `None`."""
    if not isinstance(row, Mapping):
        return None
    column = fields.column("id", row)
    value = row.get(column) if column else None
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "" else None


def parse_row(row: Any, index: int, where: str, fields: FieldMap, name: str, seen: set[str]) -> ParsedRow:
    """Check a row's id and text and collect its image values; raise `DataError` naming the field and the fix."""
    require_object(row, "write one object per row", where)
    id_column = fields.column("id", row)
    if id_column is None:
        record_id = f"{name}-{index}"
    elif id_column not in row:
        raise _missing("id", fields, row, where)
    else:
        record_id = str(require_id(row[id_column], "give each row an id", where))
    if record_id in seen:
        raise DataError("id", f"duplicate id {record_id!r}", "give each row a unique id, or set --id-field", where)
    seen.add(record_id)

    inline: list[Any] = []
    placeholders = 0
    if fields.question is None and "conversations" in row:
        pairs = _llava_turns(row["conversations"], where)
    elif fields.question is None and _is_messages(row.get("messages")):
        pairs, placeholders, inline = _message_turns(row["messages"], where)
    elif fields.question is None and _is_messages(row.get("prompt")) and _is_messages(row.get("completion")):
        pairs, placeholders, inline = _message_turns([*row["prompt"], *row["completion"]], where)
    else:
        question, answer = (_field_text(row, field, fields, where) for field in ("question", "answer"))
        pairs = [(question, answer)]
        if fields.column("image", row) is None and not fields.text_only:
            raise DataError(
                "image",
                f"no image column (looked for {', '.join(DEFAULT_COLUMNS['image'])}; columns here: {list(row)})",
                "set --image-field (synth all: fields.image=…) to the column that holds the image, or pass --text-only "
                "(fields.text_only=true) for a set without images",
                where,
            )
    images = _image_values(row, fields, record_id, where) or inline
    if placeholders and len(images) != placeholders:
        raise DataError(
            "images",
            f"record {record_id!r}: {placeholders} image part(s) in the messages but {len(images)} image(s)",
            'give one image per {"type": "image"} part, in order',
            where,
        )
    return ParsedRow(record_id, pairs, images)


def _missing(field: str, fields: FieldMap, row: Mapping[str, Any], where: str) -> DataError:
    column = getattr(fields, field)
    problem = "missing" if column is None else f"column {column!r} not in the row"
    fix = f"set --{field}-field (synth all: fields.{field}=…) to the column that holds {_WHAT[field]} (columns here: {list(row)})"
    return DataError(field, problem, fix, where)


def _text(value: Any, field: str, where: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # numeric answers (counts, years) are common in VQA data
    if not isinstance(value, str) or not _IMAGE_TOKEN.sub("", value).strip():
        raise DataError(field, f"expected non-empty text, got {value!r:.80}", f"put {_WHAT[field]} here", where)
    return _IMAGE_TOKEN.sub("", value).strip() if field == "question" else value


def _field_text(row: Mapping[str, Any], field: str, fields: FieldMap, where: str) -> str:
    column = fields.column(field, row)
    if column is None or column not in row:
        raise _missing(field, fields, row, where)
    return _text(row[column], field, where)


class Turns(NamedTuple):
    """How one conversation format names its turns, for `_pair_turns`'s messages."""

    field: str  # the row field the conversation is in
    unit: str  # "turn" or "message"
    ask: Collection[str]  # speakers whose turn is a question
    answer: Collection[str]  # speakers whose turn answers it
    ask_name: str
    answer_name: str
    last: str  # what a conversation must end with


def _pair_turns(turns: Iterable[tuple[Any, Any]], where: str, kinds: Turns, got: str = "") -> list[tuple[str, str]]:
    """(question, answer) pairs from `(speaker, text)` turns that alternate ask and answer; system turns skipped."""
    pairs: list[tuple[str, str]] = []
    pending: str | None = None
    for number, (speaker, value) in enumerate(turns):
        turn_where = f"{where} {kinds.unit} {number}"
        if speaker in kinds.ask and pending is None:
            pending = _text(value, "question", turn_where)
        elif speaker in kinds.answer and pending is not None:
            pairs.append((pending, _text(value, "answer", turn_where)))
            pending = None
        elif speaker != "system":
            expected = kinds.ask_name if pending is None else kinds.answer_name
            article = "an" if expected[0] in "aeiou" else "a"
            problem = f"expected {article} {expected} {kinds.unit}, got {got}{speaker!r}"
            fix = f"alternate {kinds.ask_name} and {kinds.answer_name} {kinds.unit}s"
            raise DataError(kinds.field, problem, fix, turn_where)
    if pending is not None or not pairs:
        problem = f"the last {kinds.ask_name} {kinds.unit} has no answer"
        raise DataError(kinds.field, problem, f"end with {kinds.last}", where)
    return pairs


def _llava_turns(conversation: Any, where: str) -> list[tuple[str, str]]:
    """(human, gpt) pairs of a LLaVA conversation; system turns are skipped."""
    if not isinstance(conversation, list):
        raise DataError("conversations", "expected a list of turns", 'use [{"from": "human", "value": ...}]', where)
    turns = (
        (turn.get("from"), turn.get("value")) if isinstance(turn, Mapping) else (None, None) for turn in conversation
    )
    return _pair_turns(turns, where, Turns("conversations", "turn", _HUMAN, _GPT, "human", "gpt", "a gpt turn"))


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) and "role" in m for m in value)


def _content(content: Any, where: str) -> tuple[str, int, list[Any]]:
    """A message's text, its number of image parts, and the images those parts carry themselves."""
    if isinstance(content, str) or content is None:
        return content or "", 0, []
    if not isinstance(content, list):
        raise DataError(
            "messages",
            f"content must be text or a list of parts, got {type(content).__name__}",
            'use [{"type": "text", "text": ...}]',
            where,
        )
    texts, images, count = [], [], 0
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            texts.append(part.get("text") or "")
        elif kind == "image":
            count += 1
            carried = next((part[k] for k in ("image", "url", "path") if part.get(k)), None)
            if carried is not None:
                images.append(carried)
        else:
            fix = 'use {"type": "text", "text": ...} and {"type": "image"} parts (other media are not read)'
            raise DataError("messages", f"unsupported content part {kind!r}", fix, where)
    return "\n".join(t for t in texts if t), count, images


def _message_turns(messages: list[Mapping[str, Any]], where: str) -> tuple[list[tuple[str, str]], int, list[Any]]:
    """(user, assistant) pairs of a TRL conversation, its image-part count and any images the parts carry."""
    placeholders, inline = 0, []

    def turns() -> Iterator[tuple[Any, str]]:
        nonlocal placeholders, inline
        for number, message in enumerate(messages):  # each message's content is read before its role is checked
            text, count, carried = _content(message.get("content"), f"{where} message {number}")
            placeholders, inline = placeholders + count, inline + carried
            yield message.get("role"), text

    kinds = Turns("messages", "message", ("user",), ("assistant",), "user", "assistant", "an assistant message")
    pairs = _pair_turns(turns(), where, kinds, got="role ")
    if inline and len(inline) != placeholders:
        raise DataError("messages", "some image parts carry an image and some do not", "put all in `images`", where)
    return pairs, placeholders, inline


def _image_values(row: Mapping[str, Any], fields: FieldMap, record_id: str, where: str) -> list[Any]:
    """The row's image values in order; `[]` when it has no image column or an empty list (text-only)."""
    column = fields.column("image", row)
    if column is None:
        return []  # no image column at all: a text-only record
    if column not in row:
        raise _missing("image", fields, row, where)
    value = row[column]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if any(v is None or v == "" for v in values):
        # A present-but-empty image is more likely lost than intended, so it is never silently text-only.
        fix = "give the row its image, or drop the image column for text-only data"
        raise DataError("image", f"record {record_id!r}: column {column!r} is empty", fix, where)
    return values
