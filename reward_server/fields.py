"""The wire's field types: the checks a value must pass inside a `reward_server.protocol` model.

Each check raises the `WireError` the client gets (413 for a value over a `ServerConfig` limit, 422 for
any other), at the value's path: `_wire` carries it through pydantic, with the server's config as the
validation context, and `errors.from_validation` turns it back into a refusal.

    prompt: Text                                         # a string of at most max_text_chars
    responses: Annotated[list[Text], array("responses", "max_responses")]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

from reward_server.config import ServerConfig
from reward_server.errors import WireError, as_pydantic, invalid, shown, too_large, type_name

__all__ = [
    "ITEM_COUNT",
    "NONE_IF_EMPTY",
    "NONE_IF_FALSY",
    "AdapterName",
    "Candidates",
    "Images",
    "ItemId",
    "ScalarId",
    "Text",
    "WireImage",
    "array",
    "fit_text",
]


def _wire(check: Callable[[Any, ServerConfig], Any]) -> Callable[[Any, ValidationInfo], Any]:
    """`check(value, config)` as a pydantic validator (the config is the validation context)."""

    def validator(value: Any, info: ValidationInfo) -> Any:
        try:
            return check(value, info.context)
        except WireError as exc:
            raise as_pydantic(exc) from None

    return validator


def fit_text(text: str, config: ServerConfig, field: str = "") -> str:
    """`text`, refused (413) when longer than `max_text_chars`."""
    if len(text) > config.max_text_chars:
        raise too_large(field, f"{len(text)} characters is above the limit of {config.max_text_chars}")
    return text


def _count(value: Any, what: str, high: int, limit: str, low: int = 1) -> list[Any]:
    if not isinstance(value, list):
        raise invalid("", f"expected an array of {what}, got {type_name(value)}")
    if len(value) > high:
        raise too_large("", f"{len(value)} {what} is above the limit of {high} ({limit})")
    if len(value) < low:
        raise invalid("", f"expected at least {low} {what}, got {len(value)}")
    return value


def array(what: str, limit: str, low: int = 1) -> BeforeValidator:
    """An array of `low` to `config.<limit>` entries, counted before any entry is checked."""
    return BeforeValidator(_wire(lambda value, config: _count(value, what, getattr(config, limit), limit, low)))


def _items(value: Any, config: ServerConfig) -> list[Any]:
    rows = _count(value, "items", config.max_items, "max_items")
    if len(rows) > config.max_request_items:
        raise too_large("", f"{len(rows)} items is above max_request_items ({config.max_request_items})")
    return rows


def _candidates(value: Any, config: ServerConfig) -> list[Any]:
    if not isinstance(value, list):
        raise invalid("", f"expected an array of candidate answers, got {type_name(value)}")
    if len(value) > config.max_candidates:
        high = config.max_candidates
        raise too_large("", f"{len(value)} candidates is above the judge's limit of {high} (max_candidates)")
    if len(value) < 2:
        raise invalid("", f"expected 2 to {config.max_candidates} candidates, got {len(value)}")
    return value


def _image_ref(value: Any, config: ServerConfig | None = None) -> Any:
    if not isinstance(value, str) or not value:
        raise invalid("", f"expected a data URL or a base64 string, got {type_name(value)}")
    return value


def _images(value: Any, config: ServerConfig) -> Any:
    """One image, an array of them, or null."""
    if isinstance(value, list):
        _count(value, "images", config.max_images, "max_images", low=0)
        for j, ref in enumerate(value):
            try:
                _image_ref(ref)
            except WireError as exc:
                raise as_pydantic(exc, j) from None
        return value
    return None if value is None else _image_ref(value)


def _scalar_id(value: Any, config: ServerConfig) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise invalid("", f"expected a string or an integer, got {type_name(value)}")
    return value


def _item_id(value: Any, config: ServerConfig) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise invalid("", f"expected a non-empty string or an integer, got {shown(value)}")
    return value


def _adapter_name(value: Any, config: ServerConfig) -> Any:
    if value is not None and (not isinstance(value, str) or not value):
        raise invalid("", "must be a string such as 'judge@prod' or 'judge@<revision>'")
    return value


def _falsy_is_none(value: Any) -> Any:
    return value or None


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


Text = Annotated[str, AfterValidator(_wire(fit_text))]
"""A string of at most `max_text_chars` characters."""
WireImage = Annotated[str, BeforeValidator(_wire(_image_ref))]
"""An image: a data URL or base64 (a path only under `--allow-local-images`)."""
Images = Annotated[str | list[str] | None, BeforeValidator(_wire(_images))]
"""One image, an array of up to `max_images` of them, or null."""
Candidates = Annotated[list[Text], BeforeValidator(_wire(_candidates))]
"""2 to `max_candidates` answers."""
ItemId = Annotated[str | int, BeforeValidator(_wire(_item_id))]
ScalarId = Annotated[str | int, BeforeValidator(_wire(_scalar_id))]
AdapterName = Annotated[str | None, BeforeValidator(_wire(_adapter_name))]
ITEM_COUNT = BeforeValidator(_wire(_items))
"""1 to `max_items` MC items, and at most `max_request_items`."""
NONE_IF_EMPTY = BeforeValidator(_empty_is_none)
"""`""` is read as null."""
NONE_IF_FALSY = BeforeValidator(_falsy_is_none)
"""Any false value (`""`, `0`, `[]`, …) is read as null."""
