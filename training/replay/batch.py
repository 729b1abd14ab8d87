"""The GRPO micro-batch replay reads (TRL's layout) and the rows that share a prompt, found by content.

TRL shuffles a generation batch before splitting it into micro-batches, so rows are grouped by identical prompt
ids, mask and images, not by position; rows replay cannot reproduce exactly go to the plain path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class ReplayBatch:
    """A GRPO micro-batch in TRL's layout: left-padded prompts, right-padded completions.

    Shapes: prompt_ids/prompt_mask (B, P); completion_ids/completion_mask (B, R); pixel_values (patches, D)
    for all rows' images in row order; image_grid_thw (images, 3); num_images[i] images in row i;
    mm_token_type_ids (B, P + R) with 1 on image tokens (Qwen-VL).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    num_images: list[int] | None = None
    mm_token_type_ids: torch.Tensor | None = None
    unsupported: tuple[str, ...] = ()
    """Multimodal inputs replay does not handle (e.g. `token_type_ids`): every row takes the plain path."""

    _EXTRA_KEYS = ("pixel_attention_mask", "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids",
                   "image_position_ids", "pixel_values_videos", "video_grid_thw")  # fmt: skip

    @classmethod
    def from_trl_inputs(cls, inputs: dict[str, Any]) -> ReplayBatch:
        """From the dict `GRPOTrainer._prepare_inputs` returns."""
        return cls(
            prompt_ids=inputs["prompt_ids"],
            prompt_mask=inputs["prompt_mask"],
            completion_ids=inputs["completion_ids"],
            completion_mask=inputs["completion_mask"],
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            unsupported=tuple(k for k in cls._EXTRA_KEYS if inputs.get(k) is not None),
        )

    @classmethod
    def from_sequences(
        cls, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_length: int, **multimodal: Any
    ) -> ReplayBatch:
        """From prompt+completion rows as `GRPOTrainer._get_per_token_logps_and_entropies` receives them."""
        split = input_ids.size(1) - completion_length
        return cls(
            prompt_ids=input_ids[:, :split],
            prompt_mask=attention_mask[:, :split],
            completion_ids=input_ids[:, split:],
            completion_mask=attention_mask[:, split:],
            pixel_values=multimodal.pop("pixel_values", None),
            image_grid_thw=multimodal.pop("image_grid_thw", None),
            num_images=multimodal.pop("num_images", None),
            mm_token_type_ids=multimodal.pop("mm_token_type_ids", None),
            unsupported=tuple(k for k, v in multimodal.items() if v is not None),
        )

    @property
    def size(self) -> int:
        return self.prompt_ids.size(0)

    def _image_ranges(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Per row: its images' index range in image_grid_thw and its patches' row range in pixel_values."""
        b = self.size
        if self.pixel_values is None or self.image_grid_thw is None:
            return [(0, 0)] * b, [(0, 0)] * b
        counts = self.num_images if self.num_images is not None else [1] * b
        patches = self.image_grid_thw.prod(-1).tolist()
        images, rows, i, p = [], [], 0, 0
        for n in counts:
            images.append((i, i + n))
            rows.append((p, p + sum(patches[i : i + n])))
            i, p = i + n, p + sum(patches[i : i + n])
        return images, rows

    def images_of(self, rows: Sequence[int]) -> dict[str, Any]:
        """`pixel_values`, `image_grid_thw` (and `num_images`) of `rows`, concatenated in their order."""
        if self.pixel_values is None or self.image_grid_thw is None:
            return {}
        image_ranges, patch_ranges = self._image_ranges()
        grids = [self.image_grid_thw[slice(*image_ranges[r])] for r in rows]
        pixels = [self.pixel_values[slice(*patch_ranges[r])] for r in rows]
        if not sum(g.size(0) for g in grids):
            return {}
        return {
            "pixel_values": torch.cat(pixels),
            "image_grid_thw": torch.cat(grids),
            "num_images": [g.size(0) for g in grids],
        }


def _same_prompt(batch: ReplayBatch, a: int, b: int, patch_ranges: list, image_ranges: list) -> bool:
    if not (
        torch.equal(batch.prompt_ids[a], batch.prompt_ids[b])
        and torch.equal(batch.prompt_mask[a], batch.prompt_mask[b])
    ):
        return False
    if batch.pixel_values is None or batch.image_grid_thw is None:
        return True
    ia, ib, pa, pb = image_ranges[a], image_ranges[b], patch_ranges[a], patch_ranges[b]
    return torch.equal(batch.image_grid_thw[slice(*ia)], batch.image_grid_thw[slice(*ib)]) and torch.equal(
        batch.pixel_values[slice(*pa)], batch.pixel_values[slice(*pb)]
    )


def _replayable(batch: ReplayBatch, row: int, image_token_ids: tuple[int, ...], images: bool,
                image_ranges: list) -> bool:  # fmt: skip
    """Can this row be replayed exactly? (See the module docstring for the plain-path cases.)"""
    mask = batch.prompt_mask[row]
    valid = int(mask.sum())
    if valid < 2 or not bool(mask[-valid:].all()):  # one token, or padding that is not on the left
        return False
    done = batch.completion_mask[row]
    if bool((done[1:] > done[:-1]).any()):  # a hole: the completion mask is not ones-then-zeros
        return False
    has_images = image_ranges[row][1] > image_ranges[row][0]
    if batch.mm_token_type_ids is not None:
        types = batch.mm_token_type_ids[row]
        has_images = has_images or bool(types[: batch.prompt_ids.size(1)].any())
        if bool(types[-batch.completion_ids.size(1) :].any()) or int(types[batch.prompt_ids.size(1) - 1]):
            return False  # an image inside the completion, or the prompt ends in an image token
    elif image_token_ids:
        if int(batch.prompt_ids[row, -1]) in image_token_ids:
            return False
        has_images = has_images or bool(
            torch.isin(batch.prompt_ids[row], torch.tensor(image_token_ids, device=batch.prompt_ids.device)).any()
        )
    return images or not has_images


def find_groups(
    batch: ReplayBatch, image_token_ids: tuple[int, ...] = (), min_group: int = 2, images: bool = True
) -> tuple[list[list[int]], list[int]]:
    """Rows that share a prompt (ids, mask and images), and the rows left to the plain forward.

    Groups smaller than `min_group` go to the plain rows: one completion gains nothing from replay.
    `images=False` (a model whose image positions replay does not compute) sends rows with images there too.

    >>> import torch
    >>> p = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6]])
    >>> b = ReplayBatch(p, (p > 0).long(), torch.ones(4, 2, dtype=torch.long), torch.ones(4, 2, dtype=torch.long))
    >>> find_groups(b)
    ([[0, 2, 3]], [1])
    """
    if batch.unsupported:
        return [], list(range(batch.size))
    image_ranges, patch_ranges = batch._image_ranges()
    groups: list[list[int]] = []
    plain: list[int] = []
    for row in range(batch.size):
        if not _replayable(batch, row, image_token_ids, images, image_ranges):
            plain.append(row)
            continue
        for group in groups:
            if _same_prompt(batch, group[0], row, patch_ranges, image_ranges):
                group.append(row)
                break
        else:
            groups.append([row])
    keep = [g for g in groups if len(g) >= min_group]
    plain += [r for g in groups if len(g) < min_group for r in g]
    return keep, sorted(plain)
