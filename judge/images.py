"""Turn the image references records carry (paths, data URLs, bytes) into PIL images, and back; and size
them for the model.

Records keep images as references so that JSONL stays small; pixels are only decoded when a backend
needs them. The image size range (`PixelRange`, Qwen's `min_pixels` / `max_pixels`) is checked once, where
it is set, and an image is resized into it once, by `fit_pixels`, where it enters the judge: the `Judge`
for images it loads, the reward server's decode for images off the wire (`FittedImage`).
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

__all__ = [
    "IMAGE_FORMATS",
    "FittedImage",
    "ImageLoadError",
    "PixelRange",
    "UnsupportedImageFormat",
    "check_decodes",
    "default_image_workers",
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


@dataclass(frozen=True)
class PixelRange:
    """Qwen's image size range (`min_pixels`, `max_pixels`), checked once as it is made; an unset bound means
    the model's processor config decides.

    >>> PixelRange(max_pixels=1_003_520).options()
    {'max_pixels': 1003520}
    >>> bool(PixelRange())
    False
    """

    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        smallest = QWEN_FACTOR * QWEN_FACTOR
        for name, value in (("min_pixels", self.min_pixels), ("max_pixels", self.max_pixels)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < smallest):
                raise ValueError(
                    f"{name} ({value!r}) must be an integer of at least {smallest} (one 28x28 patch group), e.g. "
                    "1003520 = 1280*28*28 for at most 1,280 visual tokens; leave it unset for the model's own"
                )
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")

    def __bool__(self) -> bool:
        return self.min_pixels is not None or self.max_pixels is not None

    def options(self) -> dict[str, int]:
        """The bounds that are set, by name: `fit_pixels`' keywords, backend options, `mm_processor_kwargs`."""
        return {k: v for k, v in (("min_pixels", self.min_pixels), ("max_pixels", self.max_pixels)) if v is not None}


@dataclass(frozen=True, eq=False)
class FittedImage:
    """A decoded image already resized into the judge's range where it entered (the reward server's decode):
    the `Judge` takes it as it is, so no image is resized twice."""

    image: Image.Image


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


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
"""`https://…`, `s3://…`: a remote reference, never read as a relative path."""


def _encoded(ref: Any, base_dir: str | Path | None) -> tuple[bytes, str]:
    """The encoded bytes an image reference stands for, and how to name it in an error."""
    if isinstance(ref, Mapping):
        if ref.get("bytes"):
            return bytes(ref["bytes"]), "image bytes"
        if ref.get("path"):
            return _encoded(ref["path"], base_dir)
        raise ImageLoadError("image mapping has neither 'bytes' nor 'path'")
    if isinstance(ref, (bytes, bytearray)):
        return bytes(ref), "image bytes"
    if isinstance(ref, str):
        if ref.startswith("data:"):
            head, _, payload = ref.partition(",")
            if ";base64" not in head:
                raise ImageLoadError("data URL images must be base64-encoded (data:image/png;base64,...)")
            try:
                return base64.b64decode(payload, validate=False), "data URL"
            except Exception as exc:  # noqa: BLE001
                raise ImageLoadError(f"bad base64 in data URL ({exc})") from exc
        if _URL.match(ref):
            raise ImageLoadError(
                f"{ref[:80]} is a URL: remote images are not fetched; download them and give the file path"
            )
        path = Path(ref)
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        if not path.is_file():
            raise ImageLoadError(f"image file not found: {path}")
        return path.read_bytes(), str(path)
    raise ImageLoadError(f"unsupported image reference of type {type(ref).__name__}")


def load_image(ref: Any, base_dir: str | Path | None = None) -> Image.Image:
    """Decode one image reference to an RGB `PIL.Image`.

    Args:
        ref: a `PIL.Image`, raw encoded bytes, a `data:image/...;base64,` URL, a file path, or a
            `{"bytes": ..., "path": ...}` mapping (how `datasets`' Image feature stores images).
        base_dir: relative paths are resolved against it (usually the folder of the JSONL file).
    """
    if isinstance(ref, Image.Image):
        return ref.convert("RGB")
    return _open(*_encoded(ref, base_dir))


def default_image_workers() -> int:
    """Image decoding threads: one per core, at most 16 (decoding is CPU-bound; Pillow releases the GIL)."""
    return max(1, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def check_decodes(ref: Any, base_dir: str | Path | None = None) -> None:
    """Decode a reference's image through to its last byte, or raise `ImageLoadError` saying why.

    A header can be read from a truncated file, so checking that a file exists (or opening it) lets a
    broken image through to the middle of a run. The whole of the data is decoded here (a JPEG at a reduced
    scale, which reads every byte at about half the cost), so the check catches what the model would.
    """
    if isinstance(ref, Image.Image):
        return
    data, what = _encoded(ref, base_dir)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (64, 64))  # JPEG: decode at 1/8 scale; other formats ignore it
            image.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many types (and DecompressionBombError); all mean unusable
        raise ImageLoadError(f"cannot decode {what} as an image ({exc})") from exc


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

    The one resize an image gets before the model's processor sees it. Shrinking first is what keeps a
    12-megapixel photo from becoming ~16k visual tokens; an image already inside the range is left alone
    (no resampling, no re-encoding), and the processor, given the same range, then only rounds its sides.
    Unset bounds mean no bound. An image only opened (`open_header`: header read, pixels not decoded) is
    decoded here as RGB, shrinking as it decodes (`_decode_shrunk`), so a large one is never held full size.

    Raises:
        ImageLoadError: Qwen's rule cannot fit the image (it refuses aspect ratios above 200).

    >>> fit_pixels(Image.new("RGB", (1600, 1200)), max_pixels=200_704).size
    (504, 364)
    >>> fit_pixels(Image.new("RGB", (100, 80)), max_pixels=200_704).size
    (100, 80)
    >>> buffer = io.BytesIO(); Image.new("RGB", (1600, 1200), "red").save(buffer, "JPEG")
    >>> fit_pixels(open_header(buffer.getvalue()), max_pixels=200_704).size
    (504, 364)
    """
    width, height = image.size
    area = width * height
    opened = bool(getattr(image, "tile", None))  # Pillow empties `tile` once the pixels are decoded
    if (max_pixels is None or area <= max_pixels) and (min_pixels is None or area >= min_pixels):
        return _decoded_rgb(image) if opened else image
    try:
        size = fitted_size(width, height, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
    except ValueError as exc:
        raise ImageLoadError(
            f"cannot fit a {width}x{height} image to min_pixels={min_pixels}, max_pixels={max_pixels} ({exc})"
        ) from None
    if opened and size[0] * size[1] < area:
        return _decode_shrunk(image, size)
    return (_decoded_rgb(image) if opened else image).resize(size, Image.Resampling.BICUBIC)


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


def _decoded_rgb(image: Image.Image) -> Image.Image:
    image.load()
    return image if image.mode == "RGB" else image.convert("RGB")


def _decode_shrunk(image: Image.Image, target: tuple[int, int]) -> Image.Image:
    """An opened (header-only) image decoded straight down to `target`, as RGB.

    The full-size picture is never converted to RGB: JPEGs are decoded at a reduced scale (`Image.draft`,
    1/2 to 1/8 in the decoder itself), other formats in their own mode (1 byte a pixel for palette and
    grey images) and shrunk before the RGB conversion. GIFs and animated WEBPs give their first frame.
    """
    width, height = image.size
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
