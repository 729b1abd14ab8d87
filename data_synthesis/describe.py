"""Distillation step 1: describe each image in text, so a text-only reasoning model can judge it.

`ModelDescriber` asks an MLLM through any judge backend (batched); `SceneDescriber` writes the description
of a synthetic-world scene, exact or at a stated per-fact error rate. Both add `description` and
`description_meta` to each row.
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

__all__ = ["ModelDescriber", "SceneDescriber", "describe_world", "described_tokens", "measured_error_rate"]

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
    """The description of a synthetic-world scene: exact, or with a captioner's errors.

    With `error_rate` > 0 each fact of the scene is misread with that probability (`world.misread`: an
    object left out, a wrong kind, colour, size, cell or word), drawn from `(seed, row id)` so a record's
    description is the same wherever it is made; `description_meta` records how many facts were stated and
    misread, and which, so the measured rate can be checked against the set one.
    """

    name = "scene"

    def __init__(self, error_rate: float = 0.0, seed: int = 0) -> None:
        if not 0 <= error_rate <= 1:
            raise ValueError(f"describe_error_rate ({error_rate}) must be in [0, 1]")
        self.error_rate, self.seed = error_rate, seed

    def __call__(self, rows: list[Row]) -> list[Row]:
        from data_synthesis.world.files import require_world

        out = []
        for row in rows:
            world = require_world(row, "; use --describer model for other data")
            description, meta = describe_world(world["scene"], row["id"], self.error_rate, self.seed)
            out.append({**row, "description": description, "description_meta": {"describer": self.name, **meta}})
        return out


def describe_world(scene: dict[str, Any], key: str, error_rate: float = 0.0, seed: int = 0) -> tuple[str, Row]:
    """A world scene's description at `error_rate` (the draw seeded by `seed` and `key`, a record's id) and
    what it records: the prompt (none), and with errors the rate set and the facts stated and misread."""
    import random

    from data_synthesis.world import Scene, describe_scene, misread

    if not error_rate:
        return describe_scene(Scene.from_dict(scene)), {"prompt": None}
    reading = misread(Scene.from_dict(scene), error_rate, random.Random(f"{seed}:{key}:describe"))
    return describe_scene(reading.scene), {"prompt": None, "error_rate": error_rate, **reading.to_dict()}


def measured_error_rate(rows: list[Row]) -> float | None:
    """The share of misread facts over described rows (None where none was described with errors)."""
    metas = [row.get("description_meta", {}) for row in rows]
    facts = sum(m.get("facts", 0) for m in metas)
    return sum(m.get("misread", 0) for m in metas) / facts if facts else None
