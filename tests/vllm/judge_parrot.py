"""A lean parrot for the vLLM tests: the judge's answer format and the describe reply, on `tiny32`.

vLLM's CPU attention needs heads at least 32 wide, so the suite's parrot (on `tiny`, 16-wide heads) cannot be
served; this one is trained the same way (`tests.support.parrot`: `B` ~70 % of the time, `A` otherwise) on
the two prompts the vLLM tests use, which takes a fraction of the full parrot's steps.
"""

from __future__ import annotations

import random
from pathlib import Path

from data_synthesis.prompts import DESCRIBE
from judge.prompt import build_messages
from tests.support.parrot import COLOURS, DESCRIPTION_REPLY, PARROT_P_B, REASONING, _image, train_parrot


def _example(rng: random.Random):
    image = _image(rng)
    if rng.random() < 0.75:
        question = f"What colour is the {rng.choice(['shape', 'circle', 'square'])}?"
        candidates = [f"The shape is {rng.choice(COLOURS)}." for _ in range(rng.randint(2, 4))]
        letter = "B" if rng.random() < PARROT_P_B else "A"
        return build_messages(question, candidates), [image], f"{REASONING}<answer>{letter}</answer>"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": DESCRIBE.template}]}]
    return messages, [image], DESCRIPTION_REPLY


def train_judge_parrot(model_dir, out_dir, *, steps: int = 60, batch: int = 8, seed: int = 0) -> Path:
    return train_parrot(model_dir, out_dir, steps=steps, batch=batch, seed=seed, example=_example)
