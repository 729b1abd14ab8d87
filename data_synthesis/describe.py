"""Distillation step 1: describe each image in text, so a text-only reasoning model can judge it.

`ModelDescriber` asks an MLLM through any judge backend (batched); `SceneDescriber` writes the exact
description of a synthetic-world scene. Both add `description` and `description_meta` to each row.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from data_synthesis.prompts import DESCRIBE
from data_synthesis.records import image_refs
from data_synthesis.sampling import RequestFailed, generate_rows, sampling_for
from data_synthesis.thinking import read_reply
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.images import load_image

__all__ = ["ModelDescriber", "SceneDescriber", "described_tokens"]

Row = dict[str, Any]


class ModelDescriber:
    """Describe images with an MLLM; one batched backend call per batch of rows.

    A thinking model's thinking is left out of the description. A description cut at the token budget is
    not used: the row fails with reason `truncated` (`described.failed.jsonl`) and is asked again by the
    next run; raise `--describer-max-tokens` if many are.
    """

    name = "model"

    def __init__(
        self,
        backend: Backend,
        params: SamplingParams | None = None,
        *,
        max_new_tokens: int | None = None,
        image_root: str | Path | None = None,
    ) -> None:
        params = params or sampling_for("describer")
        if max_new_tokens is not None:
            params = replace(params, max_new_tokens=max_new_tokens)
        self.backend, self.params, self.image_root = backend, params, image_root

    def __call__(self, rows: list[Row]) -> list[Row]:
        requests = [
            ChatRequest.user(
                DESCRIBE.template, [load_image(ref, self.image_root) for ref in image_refs(row.get("image"))]
            )
            for row in rows
        ]
        replies = [read_reply(r) for r in generate_rows(self.backend, requests, self.params, [r["id"] for r in rows])]
        cut = [row["id"] for row, reply in zip(rows, replies) if reply.truncated]
        if cut:
            raise RequestFailed("truncated", f"description of {cut[0]!r} reached the token budget")
        return [
            {
                **row,
                "description": reply.body,
                "description_meta": {"describer": self.name, "prompt": DESCRIBE.tag, "completion_tokens": reply.tokens},
            }
            for row, reply in zip(rows, replies)
        ]


def described_tokens(row: Row) -> int:
    """Completion tokens a described row cost (for the progress bar's tokens/s)."""
    return int(row.get("description_meta", {}).get("completion_tokens", 0))


class SceneDescriber:
    """The exact description of a synthetic-world scene."""

    name = "scene"

    def __call__(self, rows: list[Row]) -> list[Row]:
        from data_synthesis.world import Scene, describe_scene
        from data_synthesis.world.files import require_world

        out = []
        for row in rows:
            world = require_world(row, "; use --describer model for other data")
            description = describe_scene(Scene.from_dict(world["scene"]))
            out.append(
                {**row, "description": description, "description_meta": {"describer": self.name, "prompt": None}}
            )
        return out
