"""A policy's data from the synthetic world, and its sampled answers judged: what policy GRPO against the
judge needs around the trainer (`training.policy`).

- `world_questions`: records of one split with their exact negatives and question kind;
- `write_policy_data`: warm-start SFT conversations (a right answer with probability `correct_share`, else
  one of the question's negatives) and the GRPO prompts (question → prompt, answer → reference);
- `judge_samples`: sampled answers of a policy on held-out questions, each with the judge's reward; an
  unscored answer (the judge could not decide) counts `tiny_world.heldout.UNDECIDED_CREDIT`, as everywhere.

Used by the demo's policy stage and `benchmarks/policy_reward_curve.py`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["judge_samples", "rebase_images", "world_questions", "write_policy_data"]

Row = dict[str, Any]


def world_questions(negatives_dir: str | Path, items_dir: str | Path, split: str) -> list[Row]:
    """Records of one split (`items.jsonl` in `items_dir`) with their exact negatives (texts, from
    `negatives.jsonl` in `negatives_dir`) and kind, sorted by id; image paths relative to `negatives_dir`."""
    from jobs.jsonl import read_jsonl

    splits = {row["id"]: row["meta"]["split"] for _, row in read_jsonl(Path(items_dir) / "items.jsonl")}
    rows = []
    for _, row in read_jsonl(Path(negatives_dir) / "negatives.jsonl"):
        if splits.get(row["id"]) == split and row["negatives"]:
            rows.append(
                {
                    "id": row["id"],
                    "image": row["image"],
                    "question": row["question"],
                    "answer": row["answer"],
                    "kind": row["source"].split("/")[1],
                    "negatives": [n["text"] for n in row["negatives"]],
                }
            )
    return sorted(rows, key=lambda r: r["id"])


def rebase_images(rows: Sequence[Row], image_root: str | Path, folder: str | Path) -> list[Row]:
    """The rows with image paths (relative to `image_root`) made relative to `folder`."""
    return [{**row, "image": os.path.relpath(Path(image_root) / row["image"], folder)} for row in rows]


def write_policy_data(
    train: Sequence[Row],
    folder: str | Path,
    *,
    correct_share: float,
    seed: int,
    wrong_answer: Callable[[Row, random.Random], str] | None = None,
) -> dict[str, Path]:
    """`policy_sft.jsonl` (warm-start conversations) and `prompts.jsonl` (GRPO prompts) in `folder`.

    Each warm-start answer is the reference with probability `correct_share`, else `wrong_answer(row, rng)`
    (default: one of the row's `negatives`). Image paths must already be relative to `folder`.
    """
    from jobs.jsonl import write_jsonl_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{seed}:policy-sft")
    wrong = wrong_answer or (lambda row, r: r.choice(row["negatives"]))
    conversations = []
    for row in train:
        answer = row["answer"] if rng.random() < correct_share else wrong(row, rng)
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": row["question"]}]}
        conversations.append({"images": [row["image"]], "messages": [user, {"role": "assistant", "content": answer}]})
    files = {"sft": folder / "policy_sft.jsonl", "prompts": folder / "prompts.jsonl"}
    write_jsonl_atomic(files["sft"], conversations)
    fields = ("id", "image", "question", "answer")
    write_jsonl_atomic(files["prompts"], [{k: r[k] for k in fields} for r in train])
    return files


def judge_samples(
    policy: str | Path,
    reward: Callable[..., list[float | None]],
    rows: Sequence[Row],
    image_root: str | Path,
    *,
    samples: int,
    max_new_tokens: int,
    seed: int,
) -> list[Row]:
    """`samples` sampled answers (temperature 1) of the policy per held-out question, each judged by
    `reward` (a `judge.reward` reward, pairwise against the row's `answer`). One row per
    answer: the question's row fields, `completion` and `reward` (None: unscored)."""
    from judge.backends.base import ChatRequest, SamplingParams
    from judge.backends.hf import TransformersBackend
    from judge.images import load_image

    backend = TransformersBackend(str(policy), device="cpu", max_batch_size=64)
    images = [load_image(r["image"], image_root) for r in rows]
    requests = [ChatRequest.user(r["question"], [im]) for r, im in zip(rows, images) for _ in range(samples)]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    texts = [g.text for g in backend.generate(requests, params)]
    expanded = [r for r in rows for _ in range(samples)]
    rewards = reward(
        prompts=[r["question"] for r in expanded],
        completions=texts,
        image=[im for im in images for _ in range(samples)],
        answer=[r["answer"] for r in expanded],
    )
    return [{**r, "completion": t, "reward": w} for r, t, w in zip(expanded, texts, rewards)]
