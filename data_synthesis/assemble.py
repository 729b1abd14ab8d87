"""Assembly: records with negatives → multiple-choice judge items, balanced letters, leak-free splits.

Each record with at least one negative becomes one MC item with 2–4 options: the reference answer and
negatives drawn for it (seeded by the record id). The *position* of the right answer is balanced, not just
random: within each (split, number of options) group, items are ordered by a seeded hash and the label
position cycles A, B, C, …, so every letter is right equally often (±1) and a judge cannot win by
preferring a position. Splits are made by record *group* (`records.group_of`), so turns of one
conversation never straddle train and validation.

An item (also the judge-RL unit):

    {"id": "world-000003", "image": "images/world-000003.png", "question": "How many circles are there?",
     "candidates": ["There are 4 circles.", "There are 3 circles."], "label": 1,
     "meta": {"split": "train", "group": "world-000003", "source": "world/count",
              "flaws": ["hallucinated_count", null], "description": "...", "world": {...}}}

and `to_sft_example` turns an item and a judge completion into a TRL conversational example
(`write_sft_examples`: every kept trace, by split, into sft/{train,val}.jsonl).
"""

from __future__ import annotations

import random
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_synthesis.image_paths import rebase_row
from data_synthesis.prompts import DESCRIBE
from data_synthesis.records import group_of, image_refs
from jobs.jsonl import write_jsonl_atomic
from judge.config import setting
from judge.prompt import PromptConfig, build_messages, option_letters

__all__ = [
    "AssembleConfig",
    "assemble_items",
    "build_items",
    "letter_histogram",
    "plan_labels",
    "split_of",
    "summarize_items",
    "to_description_example",
    "to_sft_example",
    "write_sft_examples",
]

Row = dict[str, Any]


@dataclass
class AssembleConfig:
    min_options: int = setting(2, "fewest options per item")
    max_options: int = setting(
        4, "most options per item; each item's count is drawn from [min, max], capped by negatives + 1"
    )
    val_fraction: float = setting(0.1, "share of record groups held out for validation")
    seed: int = setting(0, "seeds option counts, negatives, letters and the split")

    def __post_init__(self) -> None:
        if not 2 <= self.min_options <= self.max_options <= 26:
            raise ValueError(f"need 2 <= min_options ({self.min_options}) <= max_options ({self.max_options}) <= 26")
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"val_fraction ({self.val_fraction}) must be in [0, 1)")


def _hash(seed: int, *parts: object) -> int:
    return zlib.crc32("\x00".join(map(str, (seed, *parts))).encode())


def split_of(record_id: str, config: AssembleConfig) -> str:
    """ "val" or "train", decided by the record's group alone (no leakage across splits)."""
    return (
        "val" if _hash(config.seed, "split", group_of(record_id)) % 10_000 < config.val_fraction * 10_000 else "train"
    )


def _option_draw(row: Row, config: AssembleConfig) -> tuple[int, random.Random] | None:
    """How many options the row's item gets, and the generator that then draws its negatives (both seeded
    by the row id); None when the row has too few negatives."""
    most = min(config.max_options, len(row.get("negatives") or []) + 1)
    if most < config.min_options:
        return None
    rng = random.Random(_hash(config.seed, "options", row["id"]))
    return rng.randint(config.min_options, most), rng


def plan_labels(rows: list[Row], config: AssembleConfig) -> tuple[list[tuple[int, int] | None], Counter]:
    """The global step: `(options, label position)` for each row, None for a row with too few negatives.

    Within each (split, number of options) group, items are ordered by a seeded hash and the label
    position cycles A, B, C, …; this needs every row's id, so it runs once, where all rows are.
    """
    skipped: Counter = Counter()
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        draw = _option_draw(row, config)
        if draw is None:
            skipped["too_few_negatives"] += 1
            continue
        groups[(split_of(row["id"], config), draw[0])].append(index)
    plan: list[tuple[int, int] | None] = [None] * len(rows)
    for (_, k), members in groups.items():
        members.sort(key=lambda i: _hash(config.seed, "label", rows[i]["id"]))
        for rank, i in enumerate(members):
            plan[i] = (k, rank % k)
    return plan, skipped


def build_items(planned: list[tuple[Row, tuple[int, int]]], config: AssembleConfig) -> list[Row]:
    """The per-row step: each planned row's MC item (its negatives drawn and shuffled, seeded by its id)."""
    items = []
    for row, (k, label) in planned:
        _, rng = _option_draw(row, config)
        shuffled = list(rng.sample(row["negatives"], k - 1))
        random.Random(_hash(config.seed, "order", row["id"])).shuffle(shuffled)
        shuffled.insert(label, {"text": row["answer"], "flaw": None})
        meta = {
            "split": split_of(row["id"], config),
            "group": group_of(row["id"]),
            "source": row.get("source", ""),
            "flaws": [c["flaw"] for c in shuffled],
        }
        for key in ("description", "world"):
            if key in row:
                meta[key] = row[key]
        items.append(
            {
                "id": row["id"],
                "image": row.get("image"),
                "question": row["question"],
                "candidates": [c["text"] for c in shuffled],
                "label": label,
                "meta": meta,
            }
        )
    return items


def summarize_items(items: list[Row], skipped: Counter) -> dict[str, Any]:
    return {
        "items": len(items),
        "skipped": dict(skipped),
        "splits": dict(Counter(item["meta"]["split"] for item in items)),
        "options_histogram": {str(k): n for k, n in sorted(Counter(len(i["candidates"]) for i in items).items())},
        "letter_histogram": letter_histogram(items),
    }


def assemble_items(rows: list[Row], config: AssembleConfig) -> tuple[list[Row], dict[str, Any]]:
    """MC items for every row with negatives, and the assembly summary (counts, letter histogram)."""
    plan, skipped = plan_labels(rows, config)
    items = build_items([(row, p) for row, p in zip(rows, plan) if p is not None], config)
    return items, summarize_items(items, skipped)


def letter_histogram(items: list[Row]) -> dict[str, dict[str, dict[str, int]]]:
    """How often each letter is the right answer, per split and number of options (`"k=3"`).

    Balance is per number of options: with two options only A and B can be right.
    """
    out: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for item in items:
        k = len(item["candidates"])
        out[item["meta"]["split"]][f"k={k}"][option_letters(k)[item["label"]]] += 1
    return {s: {k: dict(sorted(c.items())) for k, c in sorted(by_k.items())} for s, by_k in sorted(out.items())}


def to_sft_example(item: Row, completion: str, prompt: PromptConfig | None = None) -> Row:
    """A TRL conversational VLM example: the judge's own prompt (`judge.prompt.build_messages`, the one it
    sees at inference) with the image, answered by `completion`."""
    images = image_refs(item.get("image"))
    messages = build_messages(item["question"], item["candidates"], n_images=len(images), config=prompt)
    messages.append({"role": "assistant", "content": [{"type": "text", "text": completion}]})
    return {"id": item["id"], "images": images, "messages": messages}


def to_description_example(row: Row, instruction: str) -> Row:
    """A TRL conversational VLM example that asks for the picture's description and answers with the
    describe stage's text (`row["description"]`): dense supervision of what the judge must see."""
    if not row.get("description") or row.get("image") is None:
        raise ValueError(f"row {row.get('id')!r} needs an image and a description (run the describe stage first)")
    images = image_refs(row["image"])
    parts = [{"type": "image"} for _ in images]
    messages = [
        {"role": "user", "content": [*parts, {"type": "text", "text": instruction}]},
        {"role": "assistant", "content": [{"type": "text", "text": row["description"]}]},
    ]
    return {"id": f"{row['id']}/describe", "images": images, "messages": messages}


def write_sft_examples(
    items: list[Row],
    distilled: list[Row],
    out_dir: Path,
    prompt: PromptConfig | None = None,
    *,
    described: list[Row] | None = None,
    describe_share: float = 0.0,
    describe_instruction: str | None = None,
) -> dict[str, Any]:
    """TRL conversational judge-SFT examples from the kept traces, by split, worded with `prompt`.

    With `describe_share` > 0, that share of the training file is image → description examples made from
    the training split's `described` rows (worded with `describe_instruction`, by default the describe
    stage's own prompt), so a judge whose vision has never been trained also learns to see.
    """
    if not 0.0 <= describe_share < 1.0:
        raise ValueError(f"describe_share ({describe_share}) must be in [0, 1)")
    if describe_share and described is None:
        raise ValueError("describe_share needs the describe stage's rows (described=...)")
    by_id = {item["id"]: item for item in items}
    counts = {}
    for split in ("train", "val"):
        examples = [
            to_sft_example(rebase_row(by_id[row["id"]], out_dir, out_dir / "sft"), row["completion"], prompt)
            for row in distilled
            if row["kept"] and by_id[row["id"]]["meta"]["split"] == split
        ]
        if split == "train" and describe_share:
            wanted = round(len(examples) * describe_share / (1.0 - describe_share))
            rows = [r for r in described if r["id"] in by_id and by_id[r["id"]]["meta"]["split"] == split]
            instruction = describe_instruction or DESCRIBE.template
            descriptions = [
                to_description_example(rebase_row(r, out_dir, out_dir / "sft"), instruction) for r in rows[:wanted]
            ]
            examples += descriptions
            counts["sft_train_descriptions"] = len(descriptions)
        write_jsonl_atomic(out_dir / "sft" / f"{split}.jsonl", examples)
        counts[f"sft_{split}"] = len(examples)
    return counts
