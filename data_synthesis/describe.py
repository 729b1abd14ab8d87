"""Distillation step 1: describe each image in text, so a text-only reasoning model can judge it.

`ModelDescriber` asks an MLLM through any judge backend (batched); `SceneDescriber` writes the exact
description of a synthetic-world scene. Both add `description` and `description_meta` to each row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data_synthesis.prompts import DESCRIBE
from data_synthesis.records import image_refs
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.images import load_image

__all__ = ["ModelDescriber", "SceneDescriber"]

Row = dict[str, Any]


class ModelDescriber:
    """Describe images with an MLLM; one batched backend call per batch of rows."""

    name = "model"

    def __init__(self, backend: Backend, *, max_new_tokens: int = 512, image_root: str | Path | None = None) -> None:
        self.backend, self.max_new_tokens, self.image_root = backend, max_new_tokens, image_root

    def __call__(self, rows: list[Row]) -> list[Row]:
        requests = [
            ChatRequest.user(
                DESCRIBE.template, [load_image(ref, self.image_root) for ref in image_refs(row.get("image"))]
            )
            for row in rows
        ]
        replies = self.backend.generate(requests, SamplingParams(max_new_tokens=self.max_new_tokens))
        meta = {"describer": self.name, "prompt": DESCRIBE.tag}
        return [
            {**row, "description": reply.text.strip(), "description_meta": meta} for row, reply in zip(rows, replies)
        ]


class SceneDescriber:
    """The exact description of a synthetic-world scene."""

    name = "scene"

    def __call__(self, rows: list[Row]) -> list[Row]:
        from data_synthesis.world import Scene, describe_scene

        out = []
        for row in rows:
            if "world" not in row:
                raise ValueError(
                    f"row {row['id']!r} has no synthetic-world scene; use --describer model for other data"
                )
            description = describe_scene(Scene.from_dict(row["world"]["scene"]))
            out.append(
                {**row, "description": description, "description_meta": {"describer": self.name, "prompt": None}}
            )
        return out
