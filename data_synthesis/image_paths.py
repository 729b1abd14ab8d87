"""A row's image paths are relative to the folder of the file it is written in; a row written into another
folder gets them rewritten, so they still resolve (data: URIs and absolute paths stay as they are)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["rebase", "rebase_row"]

Row = dict[str, Any]


def rebase(rows: list[Row], src: Path, dst: Path) -> list[Row]:
    """Rewrite relative image paths written for `src` so they resolve from `dst`."""
    if src.resolve() == dst.resolve():
        return rows
    out = []
    for row in rows:
        image = row.get("image")
        if isinstance(image, list):
            row = {**row, "image": [_rebased_ref(ref, src, dst) for ref in image]}
        elif image is not None:
            row = {**row, "image": _rebased_ref(image, src, dst)}
        out.append(row)
    return out


def rebase_row(row: Row, src: Path, dst: Path) -> Row:
    """`rebase` of one row."""
    return rebase([row], src, dst)[0]


def _rebased_ref(image: Any, src: Path, dst: Path) -> Any:
    if isinstance(image, str) and not image.startswith("data:") and not os.path.isabs(image):
        return os.path.relpath(src / image, dst)
    return image
