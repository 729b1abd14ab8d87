"""Turn the image references records carry (paths, data URLs, bytes) into PIL images, and back.

Records keep images as references so that JSONL stays small; pixels are only decoded when a backend
needs them.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

__all__ = [
    "IMAGE_FORMATS",
    "ImageLoadError",
    "UnsupportedImageFormat",
    "decode_fitted",
    "fit_pixels",
    "fitted_size",
    "image_to_data_url",
    "load_image",
    "open_header",
]

# Qwen2.5-VL's patch (14) times its spatial merge (2): the processor's resized sides are multiples of this.
QWEN_FACTOR = 28


IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
"""Formats taken from the network: what photos and screenshots come in. Pillow knows ~40 more (EPS runs
Ghostscript, TIFF and ICO carry many sub-formats); each is decoder code a client could aim at."""


class ImageLoadError(ValueError):
    """An image reference that cannot be decoded; the message says which one and why."""


class UnsupportedImageFormat(ImageLoadError):
    """Bytes Pillow recognises as an image format outside the allow-list."""

    def __init__(self, fmt: str, allowed: tuple[str, ...]) -> None:
        super().__init__(f"{fmt} images are not accepted; send one of {', '.join(allowed)}")
        self.format = fmt


def _open(data: bytes, what: str) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many types; all mean "not an image"
        raise ImageLoadError(f"cannot decode {what} as an image ({exc})") from exc
    return image.convert("RGB")


def load_image(ref: Any, base_dir: str | Path | None = None) -> Image.Image:
    """Decode one image reference to an RGB `PIL.Image`.

    Args:
        ref: a `PIL.Image`, raw encoded bytes, a `data:image/...;base64,` URL, a file path, or a
            `{"bytes": ..., "path": ...}` mapping (how `datasets`' Image feature stores images).
        base_dir: relative paths are resolved against it (usually the folder of the JSONL file).
    """
    if isinstance(ref, Image.Image):
        return ref.convert("RGB")
    if isinstance(ref, Mapping):
        if ref.get("bytes"):
            return _open(ref["bytes"], "image bytes")
        if ref.get("path"):
            return load_image(ref["path"], base_dir)
        raise ImageLoadError("image mapping has neither 'bytes' nor 'path'")
    if isinstance(ref, (bytes, bytearray)):
        return _open(bytes(ref), "image bytes")
    if isinstance(ref, str):
        if ref.startswith("data:"):
            head, _, payload = ref.partition(",")
            if ";base64" not in head:
                raise ImageLoadError("data URL images must be base64-encoded (data:image/png;base64,...)")
            try:
                data = base64.b64decode(payload, validate=False)
            except Exception as exc:  # noqa: BLE001
                raise ImageLoadError(f"bad base64 in data URL ({exc})") from exc
            return _open(data, "data URL")
        path = Path(ref)
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        if not path.is_file():
            raise ImageLoadError(f"image file not found: {path}")
        return _open(path.read_bytes(), str(path))
    raise ImageLoadError(f"unsupported image reference of type {type(ref).__name__}")


def image_to_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """Encode an image as a base64 data URL (how OpenAI-compatible servers take images)."""
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


def fitted_size(
    width: int, height: int, *, min_pixels: int | None = None, max_pixels: int | None = None, factor: int = QWEN_FACTOR
) -> tuple[int, int]:
    """The (width, height) Qwen2.5-VL's processor gives an image under `min_pixels` / `max_pixels`.

    Qwen's rule (`smart_resize`): aspect kept, sides rounded to multiples of `factor`, area inside the range.
    We call transformers' copy of it, from the PIL image processor: `qwen_vl_utils` has the same rule but
    imports torchvision at module level, which cannot be imported beside CPU builds of torch.

    >>> fitted_size(1600, 1200, max_pixels=200_704)
    (504, 364)
    >>> fitted_size(84, 84)
    (84, 84)
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    height_out, width_out = smart_resize(
        height, width, factor=factor, min_pixels=min_pixels or 0, max_pixels=max_pixels or 2**62
    )
    return width_out, height_out


def fit_pixels(
    image: Image.Image, *, min_pixels: int | None = None, max_pixels: int | None = None, factor: int = QWEN_FACTOR
) -> Image.Image:
    """`image` resized to Qwen's size for the pixel range when its area is outside it; else `image` itself.

    Shrinking before an image is sent or batched is what keeps a 12-megapixel photo from becoming ~16k
    visual tokens; an image already inside the range is left alone (no resampling, no re-encoding), and the
    model's processor then only rounds its sides. Unset bounds mean no bound.

    >>> fit_pixels(Image.new("RGB", (1600, 1200)), max_pixels=200_704).size
    (504, 364)
    >>> fit_pixels(Image.new("RGB", (100, 80)), max_pixels=200_704).size
    (100, 80)
    """
    area = image.width * image.height
    if (max_pixels is None or area <= max_pixels) and (min_pixels is None or area >= min_pixels):
        return image
    size = fitted_size(image.width, image.height, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
    return image.resize(size, Image.Resampling.BICUBIC)


def _sniff(prefix: bytes) -> str | None:
    """The Pillow format whose magic `prefix` carries, by the plugins' own cheap `accept` checks (no decoding)."""
    Image.init()
    for fmt, (_, accept) in Image.OPEN.items():
        try:
            if accept is not None and accept(prefix):
                return fmt
        except Exception:  # noqa: BLE001, S112 - a plugin's check failing means "not this format"
            continue
    return None


def open_header(data: bytes, formats: tuple[str, ...] = IMAGE_FORMATS) -> Image.Image:
    """`data` opened lazily (header only, nothing decoded) by the plugins of `formats` alone.

    Raises:
        UnsupportedImageFormat: a format Pillow knows but `formats` leaves out (its decoder never runs).
        ImageLoadError: not an image at all, or a header that cannot be read.
        Image.DecompressionBombError: Pillow's own header-time guard.
    """
    try:
        image = Image.open(io.BytesIO(data), formats=list(formats))
    except Image.DecompressionBombError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many types; all mean "not an allowed image"
        other = _sniff(data[:64])
        if other is not None and other not in formats:
            raise UnsupportedImageFormat(other, formats) from None
        raise ImageLoadError(f"not a decodable image ({type(exc).__name__})") from None
    fmt = "JPEG" if image.format == "MPO" else image.format  # multi-picture JPEG: its first picture
    if fmt not in formats:
        raise UnsupportedImageFormat(str(image.format), formats)
    return image


# Modes Pillow resamples directly (and `reduce`s with a box filter first, so a large image costs little).
_RESAMPLED_MODES = ("RGB", "RGBA", "L", "LA", "CMYK", "RGBX")


def decode_fitted(image: Image.Image, *, max_pixels: int | None) -> Image.Image:
    """An opened (header-only) image decoded and shrunk to Qwen's size under `max_pixels`, as RGB.

    The full-size picture is never converted to RGB: JPEGs are decoded at a reduced scale (`Image.draft`,
    1/2 to 1/8 in the decoder itself), other formats in their own mode (1 byte a pixel for palette and
    grey images) and shrunk before the RGB conversion. GIFs and animated WEBPs give their first frame.

    >>> import io
    >>> buffer = io.BytesIO(); Image.new("RGB", (1600, 1200), "red").save(buffer, "JPEG")
    >>> decode_fitted(open_header(buffer.getvalue()), max_pixels=200_704).size
    (504, 364)
    """
    width, height = image.size
    if max_pixels is None or width * height <= max_pixels:
        image.load()
        return image if image.mode == "RGB" else image.convert("RGB")
    try:
        target = fitted_size(width, height, max_pixels=max_pixels)
    except ValueError as exc:  # Qwen's rule refuses aspect ratios above 200
        raise ImageLoadError(f"cannot fit a {width}x{height} image to {max_pixels} pixels ({exc})") from None
    if image.format in ("JPEG", "MPO"):
        image.draft("RGB", target)  # the decoder scales by 1/2^k, staying at or above `target`
    image.load()
    if image.mode == "1":
        image = image.convert("L")  # 1 byte a pixel, as the decoded 1-bit image already is
    if image.mode in _RESAMPLED_MODES:
        small = image.resize(target, Image.Resampling.BICUBIC, reducing_gap=3.0)
    else:  # palette and 16-bit images resample only by nearest neighbour: step down to 2x, then smooth
        double = (min(width, 2 * target[0]), min(height, 2 * target[1]))
        small = image.resize(double, Image.Resampling.NEAREST).convert("RGB").resize(target, Image.Resampling.BICUBIC)
    return small if small.mode == "RGB" else small.convert("RGB")
