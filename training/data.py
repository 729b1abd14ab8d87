"""Datasets for the two training stages, read from the data engine's output.

- SFT: `sft/{train,val}.jsonl` (TRL conversational: user = image + judge prompt, assistant = trace) →
  the *prompt/completion* form, so TRL computes the loss on the assistant's completion only (TRL refuses
  `assistant_only_loss` for VLMs), with `images` decoded to PIL.
- GRPO: `rl/{train,val}.jsonl` MC items → `prompt` (the judge's own messages, `judge.prompt`), `image`,
  and the reward's columns `label` and `n_options`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.images import load_image
from judge.jsonl import read_jsonl
from judge.prompt import PromptConfig, build_messages
from judge.types import DataError, MCItem

__all__ = ["load_grpo_dataset", "load_sft_dataset"]


def _dataset(rows: list[dict[str, Any]], path: str | Path) -> Any:
    import datasets

    if not rows:
        raise DataError("<file>", f"{path} holds no examples", "run `mrjudge synth all` (or point to another file)")
    return datasets.Dataset.from_list(rows)


def load_sft_dataset(path: str | Path) -> Any:
    """Judge SFT examples as a prompt/completion `datasets.Dataset` with PIL images."""
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
        try:
            images = [load_image(ref, path.parent) for ref in row.get("images") or []]
        except ValueError as exc:
            raise DataError("images", str(exc), "fix the image path (relative to the JSONL file)", where) from exc
        rows.append({"prompt": messages[:-1], "completion": messages[-1:], "images": images})
    return _dataset(rows, path)


def load_grpo_dataset(path: str | Path, prompt: PromptConfig | None = None) -> Any:
    """Judge RL items as a GRPO dataset: the MC prompt with its image, plus `label` and `n_options`."""
    path = Path(path)
    rows = []
    for number, raw in read_jsonl(path):
        where = f"{path} line {number}"
        item = MCItem.from_dict(raw, where=where)
        if item.label is None:
            raise DataError(
                "label", "missing: GRPO rewards need the right answer", "use labelled items (rl/train.jsonl)", where
            )
        images = [load_image(ref, path.parent) for ref in item.images]
        row: dict[str, Any] = {
            "prompt": build_messages(item.question, item.candidates, n_images=len(images), config=prompt),
            "label": item.label,
            "n_options": len(item.candidates),
        }
        if len(images) == 1:
            row["image"] = images[0]
        elif images:
            row["images"] = images
        rows.append(row)
    return _dataset(rows, path)
