"""Reverse response-candidate synthesis: the reference answer is the best candidate; write flawed ones.

Two generators turn a batch of rows (SFT records, optionally with their synthetic-world scene) into the
same rows with `negatives: [{"text", "flaw"}, …]` and `negatives_meta` (generator, prompt version,
attempts, rejection counts):

- `ModelNegatives`: an MLLM through any judge backend is shown the image, question and correct answer and
  asked for a JSON list of flawed answers with flaw types. Replies are validated; rows still short of `n`
  are asked again (a new seed per attempt, all such rows in one batch); negatives equal to the reference,
  restating it, or repeating another are rejected and counted.
- `SceneNegatives`: for the synthetic world, the scene is perturbed so each flaw is exact by construction.

A row after this stage:

    {"id": "world-000003", "image": "images/world-000003.png", "question": "How many circles are there?",
     "answer": "There are 3 circles.", "source": "world/count",
     "negatives": [{"text": "There are 4 circles.", "flaw": "hallucinated_count"}, ...],
     "negatives_meta": {"generator": "scene", "prompt": null, "attempts": 1, "rejected": {...}}}
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from data_synthesis.prompts import NEGATIVES
from data_synthesis.records import FLAWS, Negative, image_refs
from data_synthesis.sampling import generate_rows, sampling_for
from data_synthesis.thinking import read_reply
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.images import load_image

__all__ = [
    "PAPER_CATEGORIES",
    "ModelNegatives",
    "SceneNegatives",
    "negatives_tokens",
    "normalize_answer",
    "parse_negatives_reply",
    "screen_negatives",
]

Row = dict[str, Any]

_STOPWORDS = frozenset("a an the is are was were it this that there of in on at to and or be its".split())
REJECTION_KINDS = ("truncated", "invalid_json", "invalid_flaw", "equals_reference", "restates_reference", "duplicate")


PAPER_CATEGORIES: dict[str, str] = {
    "hallucinated_object": "hallucination",
    "hallucinated_attribute": "hallucination",
    "hallucinated_count": "hallucination",
    "hallucinated_spatial": "hallucination",
    "hallucinated_text": "hallucination",
    "incomplete": "incompleteness",
    "incorrect_reasoning": "incorrect_reasoning",
    "incorrect_knowledge": "incorrect_knowledge",
}
"""The eight fine flaw types → the error kinds MR. Judge's negative-synthesis prompt asks for (Pi et al. 2025,
arXiv 2505.13403, Table 1: hallucination, incompleteness, incorrect reasoning, incorrect knowledge)."""


def normalize_answer(text: str) -> str:
    """Lower case, single spaces, no trailing punctuation: `" The cat."` → `"the cat"`."""
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(" .!?;:")


def _content_words(text: str) -> Counter:
    return Counter(w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS)


def screen_negatives(
    reference: str, candidates: Sequence[Negative], accepted: Sequence[Negative] = ()
) -> tuple[list[Negative], Counter]:
    """Keep the candidates that are really different answers; count why the others were dropped.

    A candidate equal to the reference (after normalisation) or with the same content words in another
    order ("3 circles are there" for "There are 3 circles") says nothing new and would teach the judge
    to reject correct answers.
    """
    rejected: Counter = Counter()
    kept: list[Negative] = []
    seen = {normalize_answer(n.text) for n in accepted}
    ref_norm, ref_words = normalize_answer(reference), _content_words(reference)
    for candidate in candidates:
        norm = normalize_answer(candidate.text)
        if candidate.flaw not in FLAWS:
            rejected["invalid_flaw"] += 1
        elif norm == ref_norm:
            rejected["equals_reference"] += 1
        elif _content_words(candidate.text) == ref_words:
            rejected["restates_reference"] += 1
        elif norm in seen or not norm:
            rejected["duplicate"] += 1
        else:
            seen.add(norm)
            kept.append(candidate)
    return kept, rejected


def parse_negatives_reply(text: str) -> list[Negative] | None:
    """The JSON list in a model's reply, as negatives; `None` when there is no valid list.

    >>> parse_negatives_reply('Sure: [{"answer": "It is blue.", "flaw": "Hallucinated attribute"}]')
    [Negative(text='It is blue.', flaw='hallucinated_attribute')]
    """
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return None
    try:
        items = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None
        answer = item.get("answer", item.get("text"))
        flaw = item.get("flaw", item.get("type"))
        if not isinstance(answer, str) or not isinstance(flaw, str):
            return None
        out.append(Negative(text=answer.strip(), flaw=re.sub(r"[\s\-]+", "_", flaw.strip().lower())))
    return out


def _meta(generator: str, prompt: str | None, attempts: int, rejected: Counter) -> dict[str, Any]:
    return {
        "generator": generator,
        "prompt": prompt,
        "attempts": attempts,
        "rejected": {kind: rejected.get(kind, 0) for kind in REJECTION_KINDS},
    }


class ModelNegatives:
    """Ask an MLLM (any `judge` backend) for flawed answers, batched, validated, retried.

    A reply cut at the token budget is counted as `truncated` (its JSON is never trusted) and the row is
    asked again; a thinking model's thinking is set aside, so a JSON list it drafted while thinking is not
    read as its answer.

    Args:
        backend: the generator model.
        n: negatives wanted per record.
        max_attempts: calls per record before settling for fewer than `n`.
        params: decoding (default: the generator's, `data_synthesis.sampling`); `temperature`, `top_p` and
            `max_new_tokens` override single fields.
        seed: attempt a of row r is seeded from (seed, r, a); None leaves sampling unseeded.
        image_root: folder relative image paths are resolved against.
    """

    name = "model"

    def __init__(
        self,
        backend: Backend,
        *,
        n: int = 3,
        max_attempts: int = 3,
        params: SamplingParams | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        seed: int | None = 0,
        image_root: str | Path | None = None,
    ) -> None:
        if n < 1 or max_attempts < 1:
            raise ValueError(f"n ({n}) and max_attempts ({max_attempts}) must be at least 1")
        params = params or sampling_for("generator")
        overrides = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
        params = replace(params, **{k: v for k, v in overrides.items() if v is not None})
        self.backend, self.n, self.max_attempts, self.params = backend, n, max_attempts, params
        self.seed, self.image_root = seed, image_root

    def _request(self, row: Row) -> ChatRequest:
        images = [load_image(ref, self.image_root) for ref in image_refs(row.get("image"))]
        return ChatRequest.user(NEGATIVES.format(n=str(self.n), question=row["question"], answer=row["answer"]), images)

    def __call__(self, rows: list[Row]) -> list[Row]:
        kept: dict[str, list[Negative]] = {row["id"]: [] for row in rows}
        rejected: dict[str, Counter] = {row["id"]: Counter() for row in rows}
        attempts: dict[str, int] = {row["id"]: 0 for row in rows}
        spent: dict[str, int] = {row["id"]: 0 for row in rows}
        requests = {row["id"]: self._request(row) for row in rows}  # images decoded once, reused by retries
        pending = list(rows)
        for attempt in range(self.max_attempts):
            if not pending:
                break
            seed = None if self.seed is None else self.seed * 1000 + attempt
            params = replace(self.params, seed=seed)
            ids = [row["id"] for row in pending]
            generations = generate_rows(self.backend, [requests[i] for i in ids], params, ids, salt=attempt)
            for row, reply in zip(pending, map(read_reply, generations)):
                attempts[row["id"]] += 1
                spent[row["id"]] += reply.tokens
                if reply.truncated:
                    rejected[row["id"]]["truncated"] += 1
                    continue
                parsed = parse_negatives_reply(reply.body)
                if parsed is None:
                    rejected[row["id"]]["invalid_json"] += 1
                    continue
                new, why = screen_negatives(row["answer"], parsed, kept[row["id"]])
                kept[row["id"]].extend(new[: self.n - len(kept[row["id"]])])
                rejected[row["id"]].update(why)
            pending = [row for row in pending if len(kept[row["id"]]) < self.n]
        return [
            {
                **row,
                "negatives": [n.to_dict() for n in kept[row["id"]]],
                "negatives_meta": {
                    **_meta(self.name, NEGATIVES.tag, attempts[row["id"]], rejected[row["id"]]),
                    "completion_tokens": spent[row["id"]],
                },
            }
            for row in rows
        ]


class SceneNegatives:
    """Exact negatives for synthetic-world rows, by perturbing their scene (`data_synthesis.world`)."""

    name = "scene"

    def __init__(self, *, n: int = 3, seed: int = 0) -> None:
        self.n, self.seed = n, seed

    def __call__(self, rows: list[Row]) -> list[Row]:
        from data_synthesis.world import scene_negatives, world_item_from_row
        from data_synthesis.world.files import require_world

        out = []
        for row in rows:
            require_world(
                row, ": the scene generator works on `mrjudge synth world` output; use --generator model for other data"
            )
            rng = random.Random(f"{self.seed}:{row['id']}:negatives")
            made = scene_negatives(world_item_from_row(row), self.n, rng)
            kept, rejected = screen_negatives(row["answer"], made)
            out.append(
                {**row, "negatives": [n.to_dict() for n in kept], "negatives_meta": _meta(self.name, None, 1, rejected)}
            )
        return out


def summarize_negatives(rows: list[Row]) -> dict[str, Any]:
    """Counts for the stage summary: negatives per flaw type, rejections, rows short of negatives."""
    flaws = Counter(n["flaw"] for row in rows for n in row["negatives"])
    rejected: Counter = Counter()
    for row in rows:
        rejected.update(row["negatives_meta"]["rejected"])
    return {
        "negatives": sum(flaws.values()),
        "negatives_per_flaw": dict(sorted(flaws.items())),
        "negatives_per_paper_category": dict(
            sorted(Counter(PAPER_CATEGORIES.get(f, f) for f in flaws.elements()).items())
        ),
        "rejected": dict(sorted(rejected.items())),
        "rows_without_negatives": sum(not row["negatives"] for row in rows),
        "mean_attempts": round(sum(r["negatives_meta"]["attempts"] for r in rows) / max(len(rows), 1), 3),
        "truncated": rejected.get("truncated", 0),
    }


def negatives_tokens(row: Row) -> int:
    """Completion tokens a negatives row cost (for the progress bar's tokens/s)."""
    return int(row.get("negatives_meta", {}).get("completion_tokens", 0))
