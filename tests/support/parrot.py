"""Teach a tiny judge the answer *format* in a few seconds, so real backends have answers to parse.

The parrot answers every judge prompt with `<think>…</think><answer>X</answer>`, writing `B` about 70 %
of the time and `A` otherwise. It knows nothing about images: it is a position-biased judge, which is
exactly what de-biasing must cope with, and its answer-letter distribution (~0.7 / 0.3) is known, which
lets tests check option log-probs against a number.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from PIL import Image

from judge.models import load_model
from judge.prompt import build_messages

PARROT_P_B = 0.7
REASONING = "<think>I compare each candidate with the image.</think>"


def _example(rng: random.Random) -> tuple[list[dict], Image.Image, str]:
    k = rng.randint(2, 4)
    candidates = [f"The shape is {rng.choice(['red', 'blue', 'green', 'yellow'])}." for _ in range(k)]
    image = Image.new("RGB", (56 + 14 * rng.randint(0, 2), 56), tuple(rng.randrange(256) for _ in range(3)))
    letter = "B" if rng.random() < PARROT_P_B else "A"
    return build_messages("What colour is the shape?", candidates), image, f"{REASONING}<answer>{letter}</answer>"


def train_parrot(model_dir: str | Path, out_dir: str | Path, *, steps: int = 80, batch: int = 8, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    loaded = load_model(str(model_dir), device="cpu")
    model, processor, tok = loaded.model, loaded.processor, loaded.tokenizer
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tok.padding_side = "right"
    for _ in range(steps):
        rows = [_example(rng) for _ in range(batch)]
        prompts = [processor.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m, _, _ in rows]
        texts = [p + t + "<|im_end|>" for p, (_, _, t) in zip(prompts, rows)]
        enc = processor(text=texts, images=[img for _, img, _ in rows], padding=True, return_tensors="pt")
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
