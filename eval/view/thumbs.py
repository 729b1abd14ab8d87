"""Thumbnails embedded in the page: each distinct image once, downscaled, as a JPEG data URL.

The page must open offline and from a mail attachment, so the pictures travel inside it; at full size a run
of photos would weigh gigabytes, so each is shrunk to `THUMB_SIDE` pixels on its longer side (a JPEG is
decoded at a reduced scale first: a 24-megapixel photo costs a few milliseconds). The original stays linked.
An image that cannot be read gets no thumbnail: the row shows a placeholder with its path and the reason.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from judge.images import ImageLoadError, default_image_workers, load_image

__all__ = ["THUMB_SIDE", "ImageRef", "Thumbnails", "image_ref"]

THUMB_SIDE = 160
"""Pixels on a thumbnail's longer side: enough to tell scenes apart (the demo's scenes: ~1.5 KB each)."""


@dataclass(frozen=True)
class ImageRef:
    """Where a row's image is: a resolved file path, or an inline reference (data URL, bytes)."""

    key: str
    """The thumbnail's key in the page (the path, or a digest of the inline data)."""
    path: Path | None
    inline: Any = None


def image_ref(ref: Any, base_dir: Path | None) -> ImageRef | None:
    """A row's image reference resolved against the folder its file is in (None: the row has no image)."""
    if ref is None:
        return None
    if isinstance(ref, Mapping) and not ref.get("bytes"):
        ref = ref.get("path")
        if ref is None:
            return None
    if isinstance(ref, str) and ref.startswith("image:"):  # the reward audit's digest of an in-memory image
        return ImageRef(key=ref, path=None)
    if isinstance(ref, str) and not ref.startswith("data:"):
        path = Path(ref).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return ImageRef(key=str(path), path=path)
    data = ref.encode() if isinstance(ref, str) else repr(ref).encode()
    return ImageRef(key="inline:" + hashlib.sha1(data).hexdigest()[:16], path=None, inline=ref)


def _thumbnail(ref: ImageRef, side: int) -> str:
    """The image as a small JPEG data URL; raises ImageLoadError (or OSError) when it cannot be read."""
    if ref.path is not None:
        if not ref.path.is_file():
            raise ImageLoadError("file not found")
        try:
            with Image.open(ref.path) as opened:
                opened.draft("RGB", (side * 2, side * 2))  # JPEG: decode at a reduced scale
                image = opened.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - PIL raises many types, all of which mean "cannot show it"
            raise ImageLoadError(f"cannot decode ({exc})") from exc
    elif ref.inline is None:
        raise ImageLoadError("an image given in memory: only its digest was recorded")
    else:
        image = load_image(ref.inline)
    image.thumbnail((side, side))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=75)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class Thumbnails:
    """Every image the page shows, made once each (in threads: Pillow decodes without the GIL)."""

    def __init__(self, side: int = THUMB_SIDE, out_dir: Path | None = None) -> None:
        self.side = side
        self.out_dir = out_dir
        self.refs: dict[str, ImageRef] = {}

    def add(self, ref: Any, base_dir: Path | None) -> dict[str, Any] | None:
        """Register a row's image; returns what the row carries: the thumbnail key, the path shown and linked."""
        resolved = image_ref(ref, base_dir)
        if resolved is None:
            return None
        self.refs.setdefault(resolved.key, resolved)
        shown = {"key": resolved.key}
        if resolved.key.startswith("image:"):
            shown["label"] = "an in-memory image (its digest only)"
        if resolved.path is not None:
            shown["path"] = str(resolved.path)
            shown["href"] = self._href(resolved.path)
        return shown

    def _href(self, path: Path) -> str:
        """A link to the original, relative to the page where it can be (the folder moves with the page)."""
        absolute = path.resolve()
        if self.out_dir is not None:
            try:
                return Path(os.path.relpath(absolute, self.out_dir.resolve())).as_posix()
            except ValueError:  # another drive on Windows
                pass
        return absolute.as_uri()

    def render(self, keys: Iterable[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
        """`(thumbnails, problems)`: key → data URL for the images that read, key → reason for the others."""
        wanted = [self.refs[k] for k in (keys if keys is not None else self.refs)]
        thumbs: dict[str, str] = {}
        problems: dict[str, str] = {}

        def one(ref: ImageRef) -> tuple[str, str | None, str | None]:
            try:
                return ref.key, _thumbnail(ref, self.side), None
            except (ImageLoadError, OSError, ValueError) as exc:
                return ref.key, None, str(exc)

        with ThreadPoolExecutor(max_workers=default_image_workers()) as pool:
            for key, url, problem in pool.map(one, wanted):
                if url is not None:
                    thumbs[key] = url
                else:
                    problems[key] = problem or "cannot read"
        return thumbs, problems
