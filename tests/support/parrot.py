"""Teach a tiny model each prompt's *answer format* in seconds, so real backends have answers to parse.

The parrot knows nothing about images; it recognises which prompt it is given and answers in that
prompt's format:

- the judge's MC prompt → `<think>…</think><answer>X</answer>`, writing `B` about 70 % of the time and `A`
  otherwise: a position-biased judge (what de-biasing must cope with) whose answer-letter distribution
  (~0.7 / 0.3) is known, which lets tests check option log-probs against a number;
- the negatives prompt → a JSON list of three flawed answers (`NEGATIVES_REPLY`);
- the describe prompt → a one-line description;
- the reasoning and rewriting prompts (text only) → a judge trace ending in `<answer>B</answer>`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

from data_synthesis.prompts import DESCRIBE, HINT_REMOVAL, NEGATIVES, REASON, STYLE_ALIGN, hint_sentence
from judge.models import load_model
from judge.prompt import build_messages, lettered_candidates

PARROT_P_B = 0.7
REASONING = "<think>I compare each candidate with the image.</think>"
NEGATIVES_REPLY = json.dumps(
    [
        {"answer": "The shape is purple.", "flaw": "hallucinated_attribute"},
        {"answer": "There are nine shapes.", "flaw": "hallucinated_count"},
        {"answer": "The shape is purple.", "flaw": "hallucinated_attribute"},
        {"answer": "It is a shape.", "flaw": "incomplete"},
    ]
)
"""Four answers, one a duplicate: screening must keep three."""
DESCRIPTION_REPLY = "A single coloured shape on a plain background."
TEXT_TRACE = "<think>The image shows the shape, so B fits.</think><answer>B</answer>"
COLOURS = ["red", "blue", "green", "yellow"]


def _image(rng: random.Random) -> Image.Image:
    return Image.new("RGB", (56 + 14 * rng.randint(0, 2), 56), tuple(rng.randrange(256) for _ in range(3)))


def _user(text: str, image: Image.Image | None) -> list[dict]:
    if image is None:
        return [{"role": "user", "content": text}]
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def _example(rng: random.Random) -> tuple[list[dict], list[Image.Image], str]:
    """One (messages, images, target) pair; the judge prompt is half of the mix, the others share the rest."""
    kind = rng.choice(["judge"] * 5 + ["negatives", "describe", "reason", "rewrite"])
    question = f"What colour is the {rng.choice(['shape', 'circle', 'square'])}?"
    answer = f"The shape is {rng.choice(COLOURS)}."
    if kind == "judge":
        k = rng.randint(2, 4)
        candidates = [f"The shape is {rng.choice(COLOURS)}." for _ in range(k)]
        letter = "B" if rng.random() < PARROT_P_B else "A"
        image = _image(rng)
        return build_messages(question, candidates), [image], f"{REASONING}<answer>{letter}</answer>"
    if kind == "negatives":
        image = _image(rng)
        return _user(NEGATIVES.format(n="3", question=question, answer=answer), image), [image], NEGATIVES_REPLY
    if kind == "describe":
        image = _image(rng)
        return _user(DESCRIBE.template, image), [image], DESCRIPTION_REPLY
    if kind == "reason":
        options = lettered_candidates([answer, f"The shape is {rng.choice(COLOURS)}."])
        text = REASON.format(description=DESCRIPTION_REPLY, question=question, options=options, hint=hint_sentence("B"))
        return _user(text, None), [], TEXT_TRACE
    prompt = rng.choice([HINT_REMOVAL, STYLE_ALIGN])
    return _user(prompt.format(text=TEXT_TRACE), None), [], TEXT_TRACE


def train_parrot(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    steps: int = 140,
    batch: int = 8,
    seed: int = 0,
    example: Callable[[random.Random], tuple[list, list, str]] | None = None,
) -> Path:
    """Train on `example(rng)` rows (messages, images, completion): the suite's mix unless given another."""
    example = example or _example
    torch.manual_seed(seed)
    rng = random.Random(seed)
    loaded = load_model(str(model_dir), device="cpu")
    model, processor, tok = loaded.model, loaded.processor, loaded.tokenizer
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tok.padding_side = "right"
    for _ in range(steps):
        rows = [example(rng) for _ in range(batch)]
        prompts = [processor.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m, _, _ in rows]
        texts = [p + t + "<|im_end|>" for p, (_, _, t) in zip(prompts, rows)]
        images = [img for _, imgs, _ in rows for img in imgs]
        enc = processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        # Right padding: the completion is the last `len(completion tokens)` real tokens of each row.
        completion_lens = [len(tok(t + "<|im_end|>", add_special_tokens=False)["input_ids"]) for _, _, t in rows]
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        for i, (n_real, n_completion) in enumerate(zip(enc["attention_mask"].sum(1).tolist(), completion_lens)):
            labels[i, : n_real - n_completion] = -100
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
    model.eval()
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
