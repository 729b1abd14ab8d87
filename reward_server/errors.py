"""`WireError`, the one refusal type of the reward server, its typed envelope, and the helpers that keep its
text safe.

An error message is written back to the client, so it must never fail to encode (a lone surrogate the
client sent) nor echo back a huge value: `quote` cuts a value to `QUOTE_CHARS` and escapes what UTF-8
cannot carry, and `WireError.body` applies the same to the whole message and field name. A check inside a
pydantic model raises the same `WireError` (`as_pydantic` carries it through pydantic), and
`from_validation` turns pydantic's first error back into one, its field the path pydantic found it at.

    raise WireError(422, "items[0].question", "expected a string, got number", "invalid_request")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

__all__ = [
    "QUOTE_CHARS",
    "REFUSALS",
    "ErrorInfo",
    "ErrorResponse",
    "WireError",
    "as_pydantic",
    "field_path",
    "from_validation",
    "invalid",
    "quote",
    "safe_text",
    "shown",
    "too_large",
    "type_name",
]

QUOTE_CHARS = 200
"""Characters of a client's value an error message repeats back."""


def safe_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (saying how many were left out) and made encodable as UTF-8."""
    cut = text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit} characters)"
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def quote(value: str) -> str:
    """A client's value as an error message shows it: quoted, at most `QUOTE_CHARS` characters."""
    if len(value) <= QUOTE_CHARS:
        return repr(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{safe_text(repr(value[:QUOTE_CHARS]), QUOTE_CHARS + 2)}… ({len(value)} characters)"


def shown(value: Any) -> str:
    """A client's value in a message: a string quoted (`quote`), anything else by its JSON type."""
    return quote(value) if isinstance(value, str) else type_name(value)


def type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


def field_path(keys: Sequence[Any]) -> str:
    """`items[0].question` from the keys and indices that lead to a value.

    >>> field_path(["items", 0, "question"]), field_path(["labels", 2, "a key"]), field_path([])
    ('items[0].question', "labels[2].'a key'", 'body')
    """
    out = ""
    for key in keys:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            shown_key = key if key.isidentifier() else quote(key)
            out += f".{shown_key}" if out else shown_key
    return out or "body"


class ErrorInfo(BaseModel):
    """What was refused, where, and why."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    message: str
    """What is wrong and what to do about it (a client's value is quoted to at most 200 characters)."""
    field: str | None
    """The field at fault as a path (`items[0].question`, `images[2]`, `body`, `Authorization`); null when the
    refusal is about the request as a whole (a full queue, a timeout)."""
    type: str
    """The kind of refusal: `invalid_request`, `invalid_json`, `too_large`, `unsupported_media_type`,
    `unauthorized`, `timeout`, `overloaded`, `shutting_down`, `unknown_model`, `internal`, …"""


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    error: ErrorInfo
    """The refusal."""


REFUSALS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": meaning}
    for status, meaning in [
        (400, "Malformed JSON"),
        (401, "Missing or wrong API key"),
        (408, "The body did not arrive within body_timeout_s"),
        (413, "Over a limit (the message names the ServerConfig field)"),
        (415, "An image format that is not accepted"),
        (422, "A field that does not fit the contract (the error names it)"),
        (503, "Overloaded (Retry-After) or shutting down"),
        (504, "Not judged within request_timeout_s"),
    ]
}
"""The refusals a request-reading route can answer with, as FastAPI's `responses=` documents them."""


class WireError(Exception):
    """A request the server refuses: HTTP status, the field at fault, and a message that says what to do.

    Rendered as `ErrorResponse`: `{"error": {"message", "field", "type"}}`.
    """

    def __init__(
        self, status: int, field: str, message: str, kind: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.status = status
        self.field = field
        self.message = message
        self.kind = kind
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        field = safe_text(self.field, QUOTE_CHARS) or None
        info = ErrorInfo(message=safe_text(self.message, 4 * QUOTE_CHARS), field=field, type=self.kind)
        return ErrorResponse(error=info).model_dump()


def invalid(field: str, message: str) -> WireError:
    return WireError(422, field, message, "invalid_request")


def too_large(field: str, message: str) -> WireError:
    return WireError(413, field, message, "too_large")


def as_pydantic(error: WireError, *at: str | int) -> PydanticCustomError:
    """`error`, raised inside a pydantic validator, as pydantic records it: at the value's path, then `at`,
    then `error.field` (a check inside a model naming one of its fields)."""
    keys = (*at, error.field) if error.field else at
    context = {"message": error.message, "status": error.status, "at": keys, "headers": error.headers}
    return PydanticCustomError(error.kind, "{message}", context)


_BUILTIN_MESSAGES = {
    "missing": "missing",
    "string_type": "expected a string, got {type}",
    "int_type": "expected an integer, got {type}",
    "list_type": "expected an array, got {type}",
    "dict_type": "expected an object, got {type}",
    "literal_error": "expected one of {expected}, got {shown}",
}


def from_validation(exc: ValidationError) -> WireError:
    """The first error pydantic found, as the refusal the client gets; its field is where it was found."""
    first = exc.errors(include_url=False)[0]
    context = first.get("ctx") or {}
    path = [*first["loc"], *context.get("at", ())]
    if "status" in context:  # a `WireError` a validator raised (`as_pydantic`)
        return WireError(context["status"], field_path(path), context["message"], first["type"], context["headers"])
    template = _BUILTIN_MESSAGES.get(first["type"])
    value = first.get("input")
    message = (
        first["msg"]
        if template is None
        else template.format(type=type_name(value), shown=shown(value), expected=context.get("expected", ""))
    )
    return invalid(field_path(path), message)
