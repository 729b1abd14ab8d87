"""Refreshing the judge on the policy's own wrong answers before it becomes that policy's reward.

Why (docs/learning.md, "The policy"): the judge learned from negatives that change one fact of a right
answer, but a tiny policy's wrong answers mix up shapes and copy the question's nouns ("The green square is
below the green square"). Pairwise against the reference, the judge preferred such answers to the truth a
third of the time, and GRPO followed those mistakes. Reward models in RLHF are refreshed on the policy's own
samples for the same reason. Here the world makes it exact:

- the policy answers its own *training* questions (never the questions figures are reported on), several
  samples each at its GRPO temperature;
- every sampled answer that differs from the reference (`tiny_world.synthetic_eval.normalize`) is a negative,
  as the data engine treats every flawed answer: the reference is the best candidate;
- each (reference, wrong answer) pair gets the scene reasoner's exact trace in both display orders
  (`tiny_world.judge_pool.pool_sft_examples`), mixed with as many of the judge's own SFT examples so that it
  keeps what it knew;
- a short SFT continues the judge from where it is.

Measured (docs/learning.md, "Rerun without the warm-up leak"): on the start policy's answers the refreshed
judge overpays less (0.385 → 0.325 of wrong answers preferred to the reference), yet a policy trained against
it got worse (−0.036 exact answers on dev, the policy far from its start): not the default;
`benchmarks/judge_as_reward.py --refresh-steps N` runs it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judge.types import MCItem

__all__ = ["policy_negatives", "refresh_for_policy", "refresh_judge"]

Row = dict[str, Any]


def policy_negatives(
    samples: Sequence[Sequence[str]], rows: Sequence[Row], worlds: dict[str, Row], image_root: str | Path
) -> list[MCItem]:
    """One pair per distinct wrong sampled answer of each question: the reference first (`label` 0), the
    record's world in `meta` (for exact traces), the image path absolute.

    `samples[i]` are the policy's answers to `rows[i]` (`tiny_world.policy_data.world_questions` rows);
    `worlds` maps a record id to its `{"scene", "task"}`."""
    from tiny_world.synthetic_eval import normalize

    missing = [row["id"] for row in rows if row["id"] not in worlds]
    if missing:
        raise ValueError(f"no world scene for {missing[:3]}: `worlds` must hold every question's record")
    pairs = []
    for row, answers in zip(rows, samples):
        wrong = dict.fromkeys(a.strip() for a in answers if a.strip() and normalize(a) != normalize(row["answer"]))
        for j, text in enumerate(wrong):
            pairs.append(
                MCItem(
                    id=f"{row['id']}/p{j}",
                    image=str((Path(image_root) / row["image"]).resolve()),
                    question=row["question"],
                    candidates=[row["answer"], text],
                    label=0,
                    meta={"record": row["id"], "kind": row["kind"], "flaw": "policy", "world": worlds[row["id"]]},
                )
            )
    return pairs


def refresh_judge(
    recipe: Any,
    judge: str | Path,
    pairs: Sequence[MCItem],
    judge_sft: str | Path,
    out: str | Path,
    *,
    steps: int,
    learning_rate: float = 1e-4,
    seed: int = 0,
) -> dict[str, Any]:
    """Continue SFT of `judge` for `steps` on `pairs`' exact traces (both orders) mixed with as many examples
    of `judge_sft` (the judge's own SFT file, image paths relative to it); the model lands in `out/model`.
    Returns the example counts and the wall time."""
    import time

    from jobs.jsonl import read_jsonl, write_jsonl_atomic
    from tiny_world.judge_pool import pool_sft_examples
    from training.recipe import run_recipe
    from training.sft import build_sft_trainer

    out = Path(out)
    new = pool_sft_examples(pairs, recipe.reasoner_style)
    own = [row for _, row in read_jsonl(Path(judge_sft))]
    kept = random.Random(f"{seed}:refresh").sample(own, min(len(own), len(new)))
    mixed = new + [_absolute(row, Path(judge_sft).parent) for row in kept]
    random.Random(seed).shuffle(mixed)
    write_jsonl_atomic(out / "train.jsonl", mixed)
    config = recipe.sft_config(
        judge,
        out / "train.jsonl",
        out / "model",
        max_steps=steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant_with_warmup",
        lr_scheduler_kwargs={},
        warmup_steps=max(1, steps // 10),
        seed=seed,
    )
    start = time.perf_counter()
    run_recipe(build_sft_trainer, config)
    train_s = round(time.perf_counter() - start, 1)
    return {"policy_examples": len(new), "own_examples": len(kept), "steps": steps, "train_s": train_s}


def refresh_for_policy(
    recipe: Any,
    judge: str | Path,
    policy: str | Path,
    rows: Sequence[Row],
    worlds: dict[str, Row],
    image_root: str | Path,
    judge_sft: str | Path,
    out: str | Path,
    *,
    questions: int,
    steps: int,
    learning_rate: float = 1e-4,
    samples: int = 4,
    max_new_tokens: int = 24,
    seed: int = 0,
) -> dict[str, Any]:
    """`refresh_judge` on `policy`'s own answers: `samples` sampled answers (temperature 1) to `questions`
    of its training `rows` (a seeded draw), the wrong ones against the reference. Returns the figures and
    the refreshed `model`."""
    from tiny_world.seeing_policy import exact_answers

    picked = random.Random(f"{seed}:refresh").sample(list(rows), min(questions, len(rows)))
    answers = exact_answers(policy, picked, image_root, samples=samples, max_new_tokens=max_new_tokens, seed=seed)
    pairs = policy_negatives(answers["answers"]["sampled"], picked, worlds, image_root)
    figures = refresh_judge(recipe, judge, pairs, judge_sft, out, steps=steps, learning_rate=learning_rate, seed=seed)
    return {
        "questions": len(picked),
        "policy_exact": answers["sampled"],
        "pairs": len(pairs),
        **figures,
        "model": str(Path(out) / "model"),
    }


def _absolute(row: Row, root: Path) -> Row:
    """An SFT example whose image paths (relative to `root`) are made absolute, so it can move to any file."""
    images = row.get("images")
    if not images:
        return row
    return {**row, "images": [im if Path(im).is_absolute() else str((root / im).resolve()) for im in images]}
