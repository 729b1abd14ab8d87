"""A source's images, checked and kept as they came: what `sources` calls for every row's pictures.

Every image is fully decoded once here (a truncated JPEG fails now, with its row, rather than hours into
training), in a pool of threads: Pillow releases the GIL while it decodes, so threads scale with cores
without pickling image bytes to other processes.

Nothing is re-encoded. An image that is a file stays where it is and is referenced by path (big image
folders are never copied); encoded bytes (Parquet, a `datasets` Image feature, a data URL) are written
under `out_dir/images/` byte for byte, with the suffix of their format; only an image that never had an
encoding (a `PIL.Image` in memory) is written as PNG.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from judge.images import ImageLoadError

__all__ = ["ImageStore", "check_image", "safe_name"]

_SUFFIX = {"JPEG": ".jpg", "MPO": ".jpg", "PNG": ".png", "WEBP": ".webp", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tif"}


def safe_name(record_id: str) -> str:
    """A file name for an id (which may hold `/` or `#`): readable, deterministic, collision-free."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", record_id).strip("._")[:80] or "record"
    return slug if slug == record_id else f"{slug}-{hashlib.sha1(record_id.encode()).hexdigest()[:8]}"


def check_image(data: bytes | Path, what: str) -> str:
    """Decode `data` (bytes or a file) completely; return Pillow's format name, or raise `ImageLoadError`."""
    try:
        with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
            image.load()  # the whole pixel data, not just the header: truncated files fail here
            return image.format or "PNG"
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types (and DecompressionBombError); all mean "unusable"
        raise ImageLoadError(f"cannot decode {what} as an image ({type(exc).__name__}: {exc})") from exc


class ImageStore:
    """Turns a row's image values into references that `out_dir/records.jsonl` resolves.

    Args:
        out_dir: the records' folder; written images go to `out_dir/images/`, and paths inside `out_dir`
            are referenced relative to it (absolute otherwise).
        base_dir: where relative image paths in the source start (the source's folder, or `--image-root`).
    """

    def __init__(self, out_dir: str | Path, base_dir: Path) -> None:
        self.out_dir = Path(out_dir).resolve()
        self.base_dir = base_dir

    def keep(self, values: list[Any], record_id: str) -> list[str]:
        """References for a row's images (one file name per image; a folder per record when there are several)."""
        stem = safe_name(record_id)
        names = [stem] if len(values) == 1 else [f"{stem}/{k}" for k in range(len(values))]
        return [self._keep_one(value, name) for value, name in zip(values, names)]

    def _keep_one(self, value: Any, name: str) -> str:
        if isinstance(value, Mapping):
            if value.get("bytes"):
                value = value["bytes"]
            elif value.get("path"):
                value = value["path"]
            else:
                raise ImageLoadError("image mapping has neither 'bytes' nor 'path'")
        if isinstance(value, (str, os.PathLike)) and not str(value).startswith("data:"):
            return self._reference(Path(value).expanduser())
        if isinstance(value, str):  # a data URL: its payload is the encoded file
            value = _data_url_bytes(value)
        if isinstance(value, (bytes, bytearray)):
            data = bytes(value)
            suffix = _SUFFIX.get(check_image(data, "image bytes"), ".img")
            return self._write(name + suffix, data)
        if isinstance(value, Image.Image):  # never had a file: PNG is the lossless way to give it one
            buffer = io.BytesIO()
            value.save(buffer, format="PNG")
            return self._write(name + ".png", buffer.getvalue())
        raise ImageLoadError(f"unsupported image value of type {type(value).__name__} (use a path, bytes or data URL)")

    def _reference(self, path: Path) -> str:
        path = (path if path.is_absolute() else self.base_dir / path).resolve()
        if not path.is_file():
            raise ImageLoadError(f"image file not found: {path}")
        check_image(path, str(path))
        return path.relative_to(self.out_dir).as_posix() if path.is_relative_to(self.out_dir) else str(path)

    def _write(self, relative: str, data: bytes) -> str:
        target = self.out_dir / "images" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # a crash never leaves a torn file
        partial.write_bytes(data)
        os.replace(partial, target)
        return target.relative_to(self.out_dir).as_posix()


def _data_url_bytes(url: str) -> bytes:
    head, _, payload = url.partition(",")
    if ";base64" not in head:
        raise ImageLoadError("data URL images must be base64-encoded (data:image/png;base64,...)")
    try:
        return base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise ImageLoadError(f"bad base64 in data URL ({exc})") from exc
