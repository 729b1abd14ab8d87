"""Wire parsing for the reward server: bodies in, library types out, every refusal a `WireError`.

Nothing here trusts the network. Each check names the field it refuses (`items[2].candidates`,
`images[0]`) so a client can fix its request without reading server logs, and nothing a client sends can
make the server read a local file (unless `allow_local_images` names a folder), decode a decompression
bomb, or hold more than `max_body_bytes` of body.

    items = parse_judge_body(parse_json(raw), config)           # list[MCItem], images decoded
    request = parse_reward_body(parse_json(raw), config)        # RewardRequest, validated

`POST /get_reward` (OpenRLHF) is read by `judge.server.get_reward.parse_openrlhf_body`, with these helpers.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from judge.rewarding import MODES, RewardRequest
from judge.server.config import ServerConfig
from judge.types import DataError, MCItem

__all__ = [
    "WireError",
    "check_api_key",
    "decode_image",
    "parse_json",
    "parse_judge_body",
    "parse_reward_body",
]

TOURNAMENTS = ("round_robin", "knockout")
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_WHITESPACE = re.compile(r"\s+")


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
        return {"error": {"message": self.message, "field": self.field or None, "type": self.kind}}


def _invalid(field: str, message: str) -> WireError:
    return WireError(422, field, message, "invalid_request")


def _too_large(field: str, message: str) -> WireError:
    return WireError(413, field, message, "too_large")


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


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
    """The body as a JSON object: 400 when it is not JSON, 422 when it is JSON but not an object."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise WireError(400, "body", f"malformed JSON ({exc})", "invalid_json") from None
    if not isinstance(body, dict):
        raise _invalid("body", f"expected a JSON object, got {_type_name(body)}")
    return body


def _refuse_unknown(body: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for name in body:
        if name not in known:
            raise _invalid(name, f"unknown field; this endpoint takes {', '.join(known)}")


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


# -- images -----------------------------------------------------------------------------------------------


def decode_image(value: Any, field: str, config: ServerConfig) -> Image.Image:
    """A wire image (data URL or base64; a path only inside `allow_local_images`) as a checked RGB image.

    The pixel count is read from the header before any decoding, so a small file that claims a huge
    canvas (a decompression bomb) is refused without allocating it.
    """
    if not isinstance(value, str) or not value:
        raise _invalid(field, f"expected a data URL or a base64 string, got {_type_name(value)}")
    if value.startswith("data:"):
        head, comma, payload = value.partition(",")
        if not comma or ";base64" not in head:
            raise _invalid(field, "data URL images must be base64-encoded (data:image/png;base64,...)")
        return _open(_b64decode(payload, field, config), field, config)
    if "." not in value and "\\" not in value and ":" not in value:
        compact = _WHITESPACE.sub("", value)
        if compact and len(compact) % 4 == 0 and _BASE64.match(compact):
            return _open(_b64decode(compact, field, config), field, config)
        if not value.startswith(("/", "~")):
            raise _invalid(field, "invalid base64; send the image as a data URL or a base64 string")
    return _open(_read_local(value, field, config), field, config)  # base64 has no '.', so this is a path


def _b64decode(payload: str, field: str, config: ServerConfig) -> bytes:
    compact = _WHITESPACE.sub("", payload)
    if len(compact) * 3 // 4 > config.max_image_bytes:
        raise _too_large(
            field, f"image of about {len(compact) * 3 // 4} bytes is above max_image_bytes ({config.max_image_bytes})"
        )
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _invalid(field, f"invalid base64 ({exc}); send the image as a data URL or a base64 string") from None


def _read_local(value: str, field: str, config: ServerConfig) -> bytes:
    if config.allow_local_images is None:
        raise _invalid(
            field,
            "file paths are not read from the network; send the image as a data URL or base64 "
            "(or start the server with --allow-local-images DIR to allow paths under DIR)",
        )
    root = Path(config.allow_local_images).resolve()
    path = Path(value.removeprefix("file://")).expanduser()
    path = (path if path.is_absolute() else root / path).resolve()
    if not path.is_relative_to(root):
        raise _invalid(field, f"path is outside the folder allowed by --allow-local-images ({root})")
    if not path.is_file():
        raise _invalid(field, f"no such image file under the allowed folder: {value}")
    size = path.stat().st_size
    if size > config.max_image_bytes:
        raise _too_large(field, f"image file of {size} bytes is above max_image_bytes ({config.max_image_bytes})")
    return path.read_bytes()


def _open(data: bytes, field: str, config: ServerConfig) -> Image.Image:
    if len(data) > config.max_image_bytes:
        raise _too_large(field, f"image of {len(data)} bytes is above max_image_bytes ({config.max_image_bytes})")
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError as exc:
        raise _too_large(field, f"decompression bomb refused ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - PIL raises many types; all mean "not an image"
        raise _invalid(field, f"not a decodable image ({type(exc).__name__})") from None
    width, height = image.size
    if width * height > config.max_image_pixels:
        raise _too_large(
            field, f"{width}x{height} pixels is above max_image_pixels ({config.max_image_pixels}); resize it"
        )
    try:
        image.load()
        return image.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise _too_large(field, f"decompression bomb refused ({exc})") from None
    except Exception as exc:  # noqa: BLE001
        raise _invalid(field, f"cannot decode the image ({type(exc).__name__}: {exc})") from None


def _images(value: Any, field: str, config: ServerConfig, cache: dict[str, Image.Image] | None = None) -> list[Any]:
    if value is None:
        return []
    _list(value, field, low=0, high=config.max_images, what="images", limit_name="max_images")
    cache = {} if cache is None else cache
    out = []
    for j, ref in enumerate(value):
        key = ref if isinstance(ref, str) else None
        if key is not None and key in cache:
            out.append(cache[key])
            continue
        image = decode_image(ref, f"{field}[{j}]", config)
        if key is not None:
            cache[key] = image
        out.append(image)
    return out


# -- POST /v1/judge ---------------------------------------------------------------------------------------


def parse_judge_body(body: Mapping[str, Any], config: ServerConfig) -> list[MCItem]:
    """`{"items": [MC item, ...]}` → checked `MCItem`s with decoded images."""
    _refuse_unknown(body, ("items",))
    rows = _list(_required(body, "items"), "items", low=1, high=config.max_items, what="items", limit_name="max_items")
    items = []
    for i, row in enumerate(rows):
        where = f"items[{i}]"
        if not isinstance(row, dict):
            raise _invalid(where, f"expected an MC item object, got {_type_name(row)}")
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
            item.image = _images(item.image, f"{where}.image", config) or None
        elif item.image is not None:
            item.image = decode_image(item.image, f"{where}.image", config)
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
        raise _invalid("mode", f"expected one of {', '.join(MODES)}, got {mode!r}")
    tournament = body.get("tournament") or "round_robin"
    if tournament not in TOURNAMENTS:
        raise _invalid("tournament", f"expected one of {', '.join(TOURNAMENTS)}, got {tournament!r}")
    request_id = body.get("id", "")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        raise _invalid("id", f"expected a string or an integer, got {_type_name(request_id)}")
    images = _images(body.get("images"), "images", config)
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
