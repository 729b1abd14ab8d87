"""Images off the wire: checked at the header, counted against the request's budget, decoded last.

Parsing a request reads only each image's header (format and size). The pixels are decoded after every
budget check has passed, just before the work is queued, and each image is resized into the judge's range
as it is decoded (`judge.images.fit_pixels`), so no request makes the server hold a full-size RGB copy of a
large image, and a request over a budget costs no decoding at all. This is the one resize on the server's
path: the decoded image reaches the judge as a `FittedImage`, which it uses as it is.

    budget = ImageBudget(config)
    pending = budget.images(body["images"], "images")   # list[PendingImage]; 413 / 415 / 422 here
    fitted = decode_pending(pending[0], PixelRange(max_pixels=1_003_520))   # FittedImage
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from judge.images import (
    IMAGE_FORMATS,
    FittedImage,
    ImageLoadError,
    PixelRange,
    UnsupportedImageFormat,
    fit_pixels,
    open_header,
)
from judge.judging import Judge
from reward_server.config import ServerConfig
from reward_server.errors import WireError, invalid, quote, too_large, type_name

__all__ = ["ImageBudget", "PendingImage", "audit_ref", "decode_pending", "decode_range", "read_image"]

_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_WHITESPACE = re.compile(r"\s+")


@dataclass(eq=False)
class PendingImage:
    """An image whose header passed every check; `data` is decoded by `decode_pending`."""

    field: str
    data: bytes
    width: int
    height: int
    format: str


def _unsupported(field: str, message: str) -> WireError:
    return WireError(415, field, message, "unsupported_media_type")


class ImageBudget:
    """The images of one request: each distinct string read once, header pixels summed against
    `max_request_pixels` (what decoding the request would cost)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.pixels = 0
        self._seen: dict[str, PendingImage] = {}

    def image(self, value: Any, field: str) -> PendingImage:
        if isinstance(value, str) and value in self._seen:
            return self._seen[value]
        pending = read_image(value, field, self.config)
        self.pixels += pending.width * pending.height
        if self.pixels > self.config.max_request_pixels:
            raise too_large(
                field,
                f"the request's images hold {self.pixels} pixels so far, above max_request_pixels "
                f"({self.config.max_request_pixels}); send fewer or smaller images per request",
            )
        if isinstance(value, str):
            self._seen[value] = pending
        return pending

    def images(self, value: Any, field: str) -> list[PendingImage]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise invalid(field, f"expected an array of images, got {type_name(value)}")
        if len(value) > self.config.max_images:
            raise too_large(field, f"{len(value)} images is above the limit of {self.config.max_images} (max_images)")
        return [self.image(ref, f"{field}[{j}]") for j, ref in enumerate(value)]


def read_image(value: Any, field: str, config: ServerConfig) -> PendingImage:
    """A wire image (data URL or base64; a path only inside `allow_local_images`), header checked.

    The pixel count is read from the header, so a small file that claims a huge canvas (a decompression
    bomb) is refused without allocating it; formats outside `IMAGE_FORMATS` are refused (415) before any
    of their decoder code runs.
    """
    if not isinstance(value, str) or not value:
        raise invalid(field, f"expected a data URL or a base64 string, got {type_name(value)}")
    if value.startswith("data:"):
        head, comma, payload = value.partition(",")
        mime = head[5:].split(";")[0].strip().lower()
        if not mime.startswith("image/"):
            raise _unsupported(
                field, f"data URL says {quote(mime or '(no type)')}; send an image type (data:image/png;base64,...)"
            )
        if not comma or ";base64" not in head:
            raise invalid(field, "data URL images must be base64-encoded (data:image/png;base64,...)")
        return _header(_b64decode(payload, field, config), field, config)
    if "." not in value and "\\" not in value and ":" not in value:
        compact = _WHITESPACE.sub("", value)
        if compact and len(compact) % 4 == 0 and _BASE64.match(compact):
            return _header(_b64decode(compact, field, config), field, config)
        if not value.startswith(("/", "~")):
            raise invalid(field, "invalid base64; send the image as a data URL or a base64 string")
    return _header(_read_local(value, field, config), field, config)  # base64 has no '.', so this is a path


def audit_ref(value: str, allow_local_images: str | None) -> str:
    """A wire image (one `read_image` accepted) as the reward audit keeps it: a data URL as sent, bare base64
    as a data URL (the audit file stores a data URL as its digest, and a second judge reads it), a path made
    absolute under `allow_local_images` (what it named)."""
    if value.startswith("data:"):
        return value
    if "." not in value and "\\" not in value and ":" not in value:
        compact = _WHITESPACE.sub("", value)
        if compact and len(compact) % 4 == 0 and _BASE64.match(compact):
            return f"data:image/{_sniffed_format(compact)};base64,{compact}"
    path = Path(value.removeprefix("file://")).expanduser()
    if not path.is_absolute() and allow_local_images is not None:
        path = Path(allow_local_images).resolve() / path
    return str(path)


_MAGIC = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"GIF8", "gif"), (b"BM", "bmp"))


def _sniffed_format(compact: str) -> str:
    """The image type of bare base64 from its first bytes (PNG when unknown: the reader goes by the bytes)."""
    try:
        head = base64.b64decode(compact[:16])
    except (binascii.Error, ValueError):
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return next((name for magic, name in _MAGIC if head.startswith(magic)), "png")


def _b64decode(payload: str, field: str, config: ServerConfig) -> bytes:
    compact = _WHITESPACE.sub("", payload)
    if len(compact) * 3 // 4 > config.max_image_bytes:
        raise too_large(
            field, f"image of about {len(compact) * 3 // 4} bytes is above max_image_bytes ({config.max_image_bytes})"
        )
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid(field, f"invalid base64 ({exc}); send the image as a data URL or a base64 string") from None


def _read_local(value: str, field: str, config: ServerConfig) -> bytes:
    if config.allow_local_images is None:
        raise invalid(
            field,
            "file paths are not read from the network; send the image as a data URL or base64 "
            "(or start the server with --allow-local-images DIR to allow paths under DIR)",
        )
    root = Path(config.allow_local_images).resolve()
    try:
        path = Path(value.removeprefix("file://")).expanduser()
        path = (path if path.is_absolute() else root / path).resolve()
        if not path.is_relative_to(root):
            raise invalid(field, f"path is outside the folder allowed by --allow-local-images ({root})")
        if not path.is_file():
            raise invalid(field, f"no such image file under the allowed folder: {quote(value)}")
        size = path.stat().st_size
        if size > config.max_image_bytes:
            raise too_large(field, f"image file of {size} bytes is above max_image_bytes ({config.max_image_bytes})")
        return path.read_bytes()
    except (OSError, ValueError, RuntimeError) as exc:  # NUL bytes, loops, permissions: the path is bad
        if isinstance(exc, WireError):
            raise
        raise invalid(field, f"cannot read the image path ({type(exc).__name__})") from None


def _header(data: bytes, field: str, config: ServerConfig) -> PendingImage:
    if len(data) > config.max_image_bytes:
        raise too_large(field, f"image of {len(data)} bytes is above max_image_bytes ({config.max_image_bytes})")
    try:
        image = open_header(data)
    except Image.DecompressionBombError as exc:
        raise too_large(field, f"decompression bomb refused ({exc})") from None
    except UnsupportedImageFormat as exc:
        raise _unsupported(field, f"{exc.format} images are not accepted; send {', '.join(IMAGE_FORMATS)}") from None
    except ImageLoadError as exc:
        raise invalid(field, str(exc)) from None
    width, height = image.size
    if width * height > config.max_image_pixels:
        raise too_large(
            field, f"{width}x{height} pixels is above max_image_pixels ({config.max_image_pixels}); resize it"
        )
    return PendingImage(field, data, width, height, str(image.format))


def decode_range(judge: Judge) -> PixelRange:
    """The range images are fitted to as they are decoded: the judge's own, its upper bound defaulting to the
    processor's (what the model would shrink them to anyway; none for an engine behind HTTP, where the per-image
    and per-request pixel budgets still bound what is decoded)."""
    pixels = judge.config.pixels
    if pixels.max_pixels is not None:
        return pixels
    processor = getattr(getattr(judge.backend, "loaded", None), "processor", None)
    size = getattr(getattr(processor, "image_processor", None), "size", None)
    longest = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    if not longest or int(longest) < (pixels.min_pixels or 0):
        return pixels
    return PixelRange(pixels.min_pixels, int(longest))


def decode_pending(pending: PendingImage, pixels: PixelRange) -> FittedImage:
    """The image's pixels, fitted to `pixels` while decoding; a bad stream is a 422 naming its field."""
    try:
        return FittedImage(fit_pixels(open_header(pending.data), **pixels.options()))
    except Image.DecompressionBombError as exc:
        raise too_large(pending.field, f"decompression bomb refused ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt streams surface here, in many types
        raise invalid(pending.field, f"cannot decode the image ({type(exc).__name__}: {quote(str(exc))})") from None
