"""Benchmarks in their official file formats, made from the synthetic world, where every answer's truth is known.

The demo (and anyone without the real data) evaluates a judge with the real loaders and scorers on sets
written here:

- **VL-RewardBench format** (`write_vlrb_set`): held-out pairs (the reference answer against one exact
  negative) as `{"id", "query", "response", "image", "human_ranking"}` rows, images copied beside the
  file. `eval.vl_rewardbench.load_vl_rewardbench` reads it and `mrjudge eval vl-rewardbench --data FILE`
  runs on it. A row:

      {"id": "world-000017", "query": "What colour is the square?", "image": "images/world-000017.png",
       "response": ["The square at the top left is blue.", "The square at the top left is red."],
       "human_ranking": [1, 0], "kind": "attribute", "flaw": "hallucinated_attribute"}

  The ids carry no VL-RewardBench source prefix, so the official scorer files every item under
  `general` (source `vlfeedback`); `kind` and `flaw` are extra fields the loader ignores.
- **MM-Vet format** (`write_mmvet_set`): `mm-vet.json` + `images/`, capabilities from the question kind.
- **Best-of-N candidates** (`best_of_n_candidates`): N answers per question standing in for N policy
  samples — each is the reference with probability `gold_share`, else one of the question's exact
  negatives — so `first` and `random` score about `gold_share` and the oracle the share of questions with
  at least one right answer.
- **An exact grader** (`ExactGrader`): MM-Vet's grader is GPT-4 comparing a prediction with the ground
  truth from the official few-shot message; here every candidate is the ground-truth sentence or an exact
  negative, so string equality is the grade a perfect grader gives. It is a `Backend`, so
  `eval.mmvet.run_mmvet` runs its real grading path on it (official message, parse, retry rule, cache).
- **Best-of-N through pairwise games** (`KnockoutSelector`): a judge trained on two options picks among
  N > 2 by a seeded knock-out of pairwise games, as the reward server does for groups above the judge's
  option limit (`judge.reward.scoring`).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.jsonl import write_json_atomic, write_jsonl_atomic
from judge.backends.base import ChatRequest, Generation, SamplingParams
from judge.types import MCItem, Verdict

__all__ = [
    "KIND_CAPABILITIES",
    "ExactGrader",
    "KnockoutSelector",
    "best_of_n_candidates",
    "normalize",
    "write_mmvet_set",
    "write_vlrb_set",
]

KIND_CAPABILITIES: dict[str, list[str]] = {
    "attribute": ["rec"],
    "count": ["rec"],
    "spatial": ["rec", "spat"],
    "ocr": ["ocr"],
    "arithmetic": ["ocr", "math"],
}
"""The MM-Vet capabilities each synthetic-world question kind tests."""


def normalize(text: str) -> str:
    """Lower case, single spaces, no trailing punctuation: how two world answers are compared.

    >>> normalize(" The circle is  Red. ") == normalize("the circle is red")
    True
    """
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(" .!?;:")


def _copy_image(src: str | Path, folder: Path) -> str:
    """Copy an image into `folder/images/` (once) and return its path relative to `folder`."""
    src = Path(src)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    dst = folder / "images" / src.name
    if not dst.exists():
        shutil.copyfile(src, dst)
    return os.path.relpath(dst, folder)


def write_vlrb_set(items: Sequence[MCItem], image_root: str | Path, path: str | Path) -> Path:
    """Pairwise MC items (label = the better candidate) as a VL-RewardBench-format JSONL with its images.

    Args:
        items: two-candidate items with `label` set and `meta` holding `kind` and `flaw` (as
            `tiny_world.heldout.heldout_pairs` makes them).
        image_root: folder the items' relative image paths resolve against.
        path: the JSONL to write; images go to `images/` beside it.
    """
    path = Path(path)
    rows = []
    for item in items:
        if len(item.candidates) != 2 or item.label not in (0, 1):
            raise ValueError(f"item {item.id}: VL-RewardBench rows are pairs with a label, got {item.candidates}")
        rows.append(
            {
                "id": str(item.id),
                "query": item.question,
                "response": list(item.candidates),
                "image": _copy_image(Path(image_root) / str(item.image), path.parent),
                "human_ranking": [0, 1] if item.label == 0 else [1, 0],  # rank 0 marks the preferred response
                **{k: item.meta[k] for k in ("kind", "flaw") if k in item.meta},
            }
        )
    write_jsonl_atomic(path, rows)
    return path


def write_mmvet_set(rows: Iterable[Mapping[str, Any]], image_root: str | Path, folder: str | Path) -> Path:
    """World records (`id`, `image`, `question`, `answer`, `kind`) as MM-Vet's `mm-vet.json` + `images/`."""
    folder = Path(folder)
    entries = {}
    for row in rows:
        image = _copy_image(Path(image_root) / row["image"], folder)
        entries[str(row["id"])] = {
            "imagename": Path(image).name,
            "question": row["question"],
            "answer": row["answer"],
            "capability": KIND_CAPABILITIES[row["kind"]],
        }
    write_json_atomic(folder / "mm-vet.json", entries)
    return folder / "mm-vet.json"


def best_of_n_candidates(
    rows: Iterable[Mapping[str, Any]], n: int, *, gold_share: float, seed: int
) -> dict[str, list[str]]:
    """N candidate answers per question: the reference with probability `gold_share`, else an exact negative.

    Negatives are drawn without repeats while the question has unused ones. Deterministic in `seed` and
    each question's id.

    >>> rows = [{"id": "q", "answer": "It is red.", "negatives": ["It is blue.", "It is green."]}]
    >>> len(best_of_n_candidates(rows, 4, gold_share=0.5, seed=0)["q"])
    4
    """
    if n < 2:
        raise ValueError(f"best-of-N needs n >= 2, got {n}")
    if not 0 <= gold_share <= 1:
        raise ValueError(f"gold_share must be in [0, 1], got {gold_share}")
    out = {}
    for row in rows:
        rng = random.Random(f"{seed}:{row['id']}:best-of-n")
        pool = list(row["negatives"])
        rng.shuffle(pool)
        candidates = []
        for _ in range(n):
            if rng.random() < gold_share or not row["negatives"]:
                candidates.append(row["answer"])
            else:
                candidates.append(pool.pop() if pool else rng.choice(row["negatives"]))
        out[str(row["id"])] = candidates
    return out


class ExactGrader:
    """A `Backend` that grades MM-Vet grader messages by exact match with the ground truth (1.0 or 0.0).

    It reads the last row of the official few-shot table (`question | ground truth | prediction | `) the
    way the GPT grader does, and needs nothing else: no image, no state. A message it cannot read gets an
    empty reply, which the official retry rule then scores 0.
    """

    name = "exact"
    model_name = "exact-match (synthetic-world gold answers)"

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        from eval.mmvet import GRADER_PROMPT, RETRY_SUFFIX

        out = []
        for request in requests:
            text = request.messages[-1]["content"]
            row = text[len(GRADER_PROMPT) + 1 :] if text.startswith(GRADER_PROMPT) else ""
            row = row.removesuffix(RETRY_SUFFIX)
            parts = row.removesuffix(" | ").split(" | ", 2) if row.endswith(" | ") else []
            if len(parts) != 3:
                out.append(Generation(""))
                continue
            _, truth, prediction = parts
            truth = truth.replace(" <AND> ", "<AND>").replace(" <OR> ", "<OR>")
            out.append(Generation("1.0" if normalize(prediction) == normalize(truth) else "0.0"))
        return out


class KnockoutSelector:
    """`Judge.select` for N candidates through pairwise games: a seeded knock-out bracket when N > `max_options`.

    What `eval.mmvet.run_mmvet` needs from a judge (`select`, `backend`), for a judge trained on two
    options. The returned verdict's `choice` is the bracket's champion; `consistent` is True when every
    game's two display orders agreed; `raw` holds every game's outputs and `games` the bracket (each game's
    round, players, winner and calls' votes); `votes` and `probs` are left empty.
    """

    def __init__(self, judge: Any, max_options: int = 2) -> None:
        self.judge = judge
        self.backend = judge.backend
        self.config = judge.config
        self.max_options = max_options

    def select(self, items: Sequence[MCItem]) -> list[Verdict]:
        from judge.reward.scoring import RewardRequest, compute_rewards

        if all(len(item.candidates) <= self.max_options for item in items):
            return self.judge.select(items)
        requests = [
            RewardRequest(
                prompt=item.question,
                responses=list(item.candidates),
                images=[] if item.image is None else (item.image if isinstance(item.image, list) else [item.image]),
                mode="tournament",
                tournament="knockout",
                id=str(item.id),
            )
            for item in items
        ]
        verdicts = []
        for item, result in zip(items, compute_rewards(self.judge, requests, max_options=self.max_options)):
            scored = [i for i, r in enumerate(result.rewards) if r is not None]  # None: an unparsed game
            champion = max(scored, key=lambda i: (result.rewards[i], -i)) if scored else None
            flags = [v.consistent for v in result.verdicts]
            games = [
                {
                    "round": round_no,
                    "players": [i, j],
                    "winner": None if game.choice is None else (i, j)[game.choice],
                    "votes": [None if v is None else (i, j)[v] for v in game.votes],
                }
                for (round_no, i, j), game in zip(result.games, result.verdicts)
            ]
            verdicts.append(
                Verdict(
                    id=item.id,
                    choice=champion,
                    probs=None,
                    consistent=None if any(f is None for f in flags) else all(flags),
                    votes=[],
                    reasoning="",
                    raw=[text for v in result.verdicts for text in v.raw],
                    games=games,
                )
            )
        return verdicts
