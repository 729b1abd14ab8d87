"""Datasets for the two training stages, read from the data engine's output.

- SFT: `sft/{train,val}.jsonl` (TRL conversational: user = image + judge prompt, assistant = trace) →
  the *prompt/completion* form, so TRL computes the loss on the assistant's completion only (TRL refuses
  `assistant_only_loss` for VLMs), with `images`.
- GRPO: `rl/{train,val}.jsonl` MC items → `prompt` (the judge's own messages, `judge.prompt`), `image`,
  and the reward's columns `label` and `n_options`.

Images stay references (absolute paths or data URLs) in the dataset and are decoded per batch by a
`datasets` transform (`with_transform`) when the trainer's data loader reads the rows: a rank decodes
only the batches it trains on, and building the dataset costs no decoding and no memory for pixels.
Missing image files are still caught at load time, before a model is loaded (a file check, no decode).

Text-only rows in a set that has images are dropped, with their count in the log: under DeepSpeed ZeRO-3
a rank whose batch has no image skips the vision tower, so its share of the tower's gathered parameters
never arrives and every rank waits forever (the known Qwen-VL hang). `keep_text_only=True` keeps them
(safe on one process or without ZeRO-3).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jobs.jsonl import read_jsonl
from judge.images import load_image
from judge.prompt import PromptConfig, build_messages
from judge.types import DataError, MCItem

__all__ = ["ImageDecoder", "drop_text_only", "load_grpo_dataset", "load_sft_dataset", "resolve_image_ref"]

logger = logging.getLogger(__name__)
IMAGE_COLUMNS = ("image", "images")


class ImageDecoder:
    """The `with_transform` function: decodes the image columns of the rows being read, nothing else.

    A class rather than a closure so the dataset stays picklable (data-loader workers, fingerprints).
    """

    def __init__(self, columns: tuple[str, ...] = IMAGE_COLUMNS) -> None:
        self.columns = columns

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for column in self.columns:
            if column in batch:
                batch[column] = [_decode(value) for value in batch[column]]
        return batch


def _decode(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [load_image(ref) for ref in value]
    return load_image(value)


def resolve_image_ref(ref: Any, base_dir: Path, where: str, field: str = "images") -> Any:
    """`ref` as the transform will read it: relative paths made absolute and checked to exist (not decoded)."""
    if isinstance(ref, str) and not ref.startswith("data:"):
        path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
        if not path.is_file():
            raise DataError(field, f"image file not found: {path}", "fix the path (relative to the JSONL file)", where)
        return str(path.resolve())
    if isinstance(ref, str):
        return ref
    raise DataError(field, f"expected a path or data URL, got {type(ref).__name__}", "write image paths", where)


def drop_text_only(rows: list[dict[str, Any]], column: str, path: str | Path) -> list[dict[str, Any]]:
    """`rows` without the text-only ones when some rows have images (see the module docstring: ZeRO-3 hang)."""
    with_images = [row for row in rows if row.get(column)]
    if not with_images or len(with_images) == len(rows):
        return rows
    logger.warning(
        "%s: dropped %d text-only row(s) of %d: a batch without images on one rank hangs ZeRO-3 training "
        "(keep_text_only_rows=true keeps them where that cannot happen)",
        path,
        len(rows) - len(with_images),
        len(rows),
    )
    return with_images


def _dataset(rows: list[dict[str, Any]], path: str | Path) -> Any:
    import datasets

    if not rows:
        raise DataError("<file>", f"{path} holds no examples", "run `mrjudge synth all` (or point to another file)")
    return datasets.Dataset.from_list(rows).with_transform(ImageDecoder())


def load_sft_dataset(path: str | Path, *, keep_text_only: bool = False) -> Any:
    """Judge SFT examples as a prompt/completion `datasets.Dataset`; `images` decode to PIL as rows are read."""
    path = Path(path)
    rows = []
    for number, row in read_jsonl(path):
        where = f"{path} line {number}"
        messages = row.get("messages")
        if not isinstance(messages, list) or len(messages) < 2 or messages[-1].get("role") != "assistant":
            raise DataError(
                "messages",
                "expected the user turn(s) then one assistant turn",
                "write TRL conversational examples",
                where,
            )
        images = [resolve_image_ref(ref, path.parent, where) for ref in row.get("images") or []]
        rows.append({"prompt": messages[:-1], "completion": messages[-1:], "images": images})
    return _dataset(rows if keep_text_only else drop_text_only(rows, "images", path), path)


def load_grpo_dataset(path: str | Path, prompt: PromptConfig | None = None, *, keep_text_only: bool = False) -> Any:
    """Judge RL items as a GRPO dataset: the MC prompt with its image(s), plus `label` and `n_options`.

    One image per item goes in `image`, several in `images` (TRL reads either); images decode as rows are read.
    """
    path = Path(path)
    rows = []
    for number, raw in read_jsonl(path):
        where = f"{path} line {number}"
        item = MCItem.from_dict(raw, where=where)
        if item.label is None:
            raise DataError(
                "label", "missing: GRPO rewards need the right answer", "use labelled items (rl/train.jsonl)", where
            )
        images = [resolve_image_ref(ref, path.parent, where) for ref in item.images]
        rows.append(
            {
                "prompt": build_messages(item.question, item.candidates, n_images=len(images), config=prompt),
                "label": item.label,
                "n_options": len(item.candidates),
                "images": images,
            }
        )
    if not keep_text_only:
        rows = drop_text_only(rows, "images", path)
    if all(len(row["images"]) <= 1 for row in rows):  # the common case, in TRL's one-image column
        for row in rows:
            images = row.pop("images")
            row["image"] = images[0] if images else None
    return _dataset(rows, path)
