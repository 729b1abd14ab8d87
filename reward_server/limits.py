"""Wire parsing for the reward server: bodies in, library types out, every refusal a `WireError`.

Nothing here trusts the network. Each check names the field it refuses (`items[2].candidates`,
`images[0]`) so a client can fix its request without reading server logs, and nothing a client sends can
make the server read a local file (unless `allow_local_images` names a folder), decode a decompression
bomb, or hold more than `max_body_bytes` of body. Images come out as `PendingImage`s (header read, pixels
counted against `max_request_pixels`); the app decodes them once the request's work budget has passed.

    items = parse_judge_body(parse_json(raw), config)           # list[MCItem], images pending
    request = parse_reward_body(parse_json(raw), config)        # RewardRequest, validated

`POST /get_reward` (OpenRLHF) is read by `reward_server.get_reward.parse_openrlhf_body`, with these helpers.
"""

from __future__ import annotations

import difflib
import hmac
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from judge.reward_scoring import MODES, RewardRequest
from judge.types import DataError, MCItem
from reward_server.config import ServerConfig
from reward_server.errors import WireError, invalid, quote, too_large, type_name
from reward_server.wire_images import ImageBudget

__all__ = [
    "WireError",
    "check_api_key",
    "parse_json",
    "parse_judge_body",
    "parse_reward_body",
]

TOURNAMENTS = ("round_robin", "knockout")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
ITEM_FIELDS = ("id", "question", "candidates", "image", "label", "meta")
GET_REWARD_FIELDS = ("query", "prompts", "labels", "images", "tournament")

# Old private names, kept for callers of this module.
_invalid, _too_large, _type_name = invalid, too_large, type_name


# -- authentication ---------------------------------------------------------------------------------------


def check_api_key(authorization: str | None, api_key: str | None) -> None:
    """Refuse (401) unless `authorization` is `Bearer <api_key>`; constant-time, so timing reveals nothing."""
    if api_key is None:
        return
    challenge = {"WWW-Authenticate": "Bearer"}
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise WireError(
            401, "Authorization", "missing API key; send `Authorization: Bearer KEY`", "unauthorized", challenge
        )
    if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise WireError(401, "Authorization", "wrong API key", "unauthorized", challenge)


# -- JSON and plain fields --------------------------------------------------------------------------------


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object: 400 when it is not JSON, 422 when it is JSON but not an object or when
    any string in it (key or value) cannot be encoded as UTF-8 (JSON lets `"\\ud800"` through)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise WireError(400, "body", f"malformed JSON ({quote(str(exc))})", "invalid_json") from None
    if not isinstance(body, dict):
        raise _invalid("body", f"expected a JSON object, got {_type_name(body)}")
    if _SURROGATE_ESCAPE.search(raw):  # raw bytes are valid UTF-8 (or loads failed): only escapes can hide one
        _check_utf8(body)
    return body


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path_name(keys: list[Any]) -> str:
    """`items[0].question` from the keys and indices that lead to a value."""
    out = ""
    for key in keys:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            shown = key if key.isidentifier() else quote(key)
            out += f".{shown}" if out else shown
    return out or "body"


def _children(value: dict | list) -> Iterator[tuple[Any, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _check_utf8(body: dict[str, Any]) -> None:
    """422 naming the first string (value or key, anywhere in `body`) that is not valid Unicode text.

    Depth-first over iterators, so the walk holds one iterator per level, whatever the body's size.
    """
    stack = [_children(body)]
    keys: list[Any] = []  # the key of each open container below the top: len(stack) - 1 of them
    while stack:
        for key, value in stack[-1]:
            if isinstance(key, str) and not _encodable(key):
                raise _invalid(_path_name([*keys, key]), "field name is not valid UTF-8 text (a lone surrogate)")
            if isinstance(value, str):
                if not _encodable(value):
                    raise _invalid(
                        _path_name([*keys, key]), "not valid UTF-8 text (a lone surrogate escape such as \\ud800)"
                    )
            elif isinstance(value, (dict, list)):
                keys.append(key)
                stack.append(_children(value))
                break
        else:
            stack.pop()
            if keys:
                keys.pop()


def _refuse_unknown(
    body: Mapping[str, Any], known: tuple[str, ...], where: str = "", what: str = "this endpoint"
) -> None:
    for name in body:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1) if len(name) <= 64 else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _invalid(f"{where}{name}", f"unknown field{hint}; {what} takes {', '.join(known)}")


def _shown(value: Any) -> str:
    return quote(value) if isinstance(value, str) else _type_name(value)


def _text(value: Any, field: str, config: ServerConfig) -> str:
    if not isinstance(value, str):
        raise _invalid(field, f"expected a string, got {_type_name(value)}")
    if len(value) > config.max_text_chars:
        raise _too_large(field, f"{len(value)} characters is above the limit of {config.max_text_chars}")
    return value


def _list(value: Any, field: str, *, low: int, high: int, what: str, limit_name: str) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(field, f"expected an array of {what}, got {_type_name(value)}")
    if len(value) > high:
        raise _too_large(field, f"{len(value)} {what} is above the limit of {high} ({limit_name})")
    if len(value) < low:
        raise _invalid(field, f"expected at least {low} {what}, got {len(value)}")
    return value


def _required(body: Mapping[str, Any], name: str) -> Any:
    if name not in body:
        raise _invalid(name, "missing")
    return body[name]


# -- POST /v1/judge ---------------------------------------------------------------------------------------


def parse_judge_body(body: Mapping[str, Any], config: ServerConfig) -> list[MCItem]:
    """`{"items": [MC item, ...]}` → checked `MCItem`s whose images are `PendingImage`s (header read)."""
    _refuse_unknown(body, ("items",))
    rows = _list(_required(body, "items"), "items", low=1, high=config.max_items, what="items", limit_name="max_items")
    if len(rows) > config.max_request_items:
        raise _too_large("items", f"{len(rows)} items is above max_request_items ({config.max_request_items})")
    budget = ImageBudget(config)
    items = []
    for i, row in enumerate(rows):
        where = f"items[{i}]"
        if not isinstance(row, dict):
            raise _invalid(where, f"expected an MC item object, got {_type_name(row)}")
        _refuse_unknown(row, ITEM_FIELDS, f"{where}.", "an MC item")
        candidates = row.get("candidates")
        if isinstance(candidates, list) and len(candidates) > config.max_candidates:
            raise _too_large(
                f"{where}.candidates",
                f"{len(candidates)} candidates is above the judge's limit of {config.max_candidates} (max_candidates)",
            )
        try:
            item = MCItem.from_dict(row)
        except DataError as exc:
            raise _invalid(f"{where}.{exc.field_name}", f"{exc.problem} — {exc.fix}") from None
        _text(item.question, f"{where}.question", config)
        for c, candidate in enumerate(item.candidates):
            _text(candidate, f"{where}.candidates[{c}]", config)
        if isinstance(item.image, list):
            item.image = budget.images(item.image, f"{where}.image") or None
        elif item.image is not None:
            item.image = budget.image(item.image, f"{where}.image")
        items.append(item)
    return items


# -- POST /v1/reward --------------------------------------------------------------------------------------


def parse_reward_body(body: Mapping[str, Any], config: ServerConfig) -> RewardRequest:
    """`{"prompt", "images", "responses", "reference", "mode", "tournament", "id"}` → a validated request.

    Without `mode`: listwise for 2..max_candidates responses, a tournament above, pairwise for one
    response with a reference.
    """
    _refuse_unknown(body, ("prompt", "images", "responses", "reference", "mode", "tournament", "id"))
    prompt = _text(_required(body, "prompt"), "prompt", config)
    responses = _list(
        _required(body, "responses"),
        "responses",
        low=1,
        high=config.max_responses,
        what="responses",
        limit_name="max_responses",
    )
    responses = [_text(r, f"responses[{i}]", config) for i, r in enumerate(responses)]
    reference = body.get("reference")
    if reference is not None:
        reference = _text(reference, "reference", config)
    mode = body.get("mode")
    if mode is None:
        mode = "pairwise" if len(responses) == 1 and reference is not None else "listwise"
        if len(responses) > config.max_candidates:
            mode = "tournament"
    elif mode not in MODES:
        raise _invalid("mode", f"expected one of {', '.join(MODES)}, got {_shown(mode)}")
    tournament = body.get("tournament") or "round_robin"
    if tournament not in TOURNAMENTS:
        raise _invalid("tournament", f"expected one of {', '.join(TOURNAMENTS)}, got {_shown(tournament)}")
    request_id = body.get("id", "")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        raise _invalid("id", f"expected a string or an integer, got {_type_name(request_id)}")
    images = ImageBudget(config).images(body.get("images"), "images")
    request = RewardRequest(
        prompt=prompt,
        responses=responses,
        images=images,
        reference=reference,
        mode=mode,
        tournament=tournament,
        id=str(request_id),
    )
    try:
        request.validate(config.max_candidates)
    except DataError as exc:
        raise _invalid(exc.field_name, f"{exc.problem} — {exc.fix}") from None
    return request
