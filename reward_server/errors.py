"""`WireError`, the one refusal type of the reward server, and the helpers that keep its text safe.

An error message is written back to the client, so it must never fail to encode (a lone surrogate the
client sent) nor echo back a huge value: `quote` cuts a value to `QUOTE_CHARS` and escapes what UTF-8
cannot carry, and `WireError.body` applies the same to the whole message and field name.

    raise WireError(422, "items[0].question", "expected a string, got number", "invalid_request")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["QUOTE_CHARS", "WireError", "invalid", "quote", "safe_text", "too_large", "type_name"]

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


def type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


class WireError(Exception):
    """A request the server refuses: HTTP status, the field at fault, and a message that says what to do.

    Rendered as `{"error": {"message", "field", "type"}}`.
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
        message = safe_text(self.message, 4 * QUOTE_CHARS)
        return {"error": {"message": message, "field": safe_text(self.field, QUOTE_CHARS) or None, "type": self.kind}}


def invalid(field: str, message: str) -> WireError:
    return WireError(422, field, message, "invalid_request")


def too_large(field: str, message: str) -> WireError:
    return WireError(413, field, message, "too_large")
