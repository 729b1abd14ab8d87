"""Tiny benchmark files in each benchmark's official schema, written on the fly."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

# (id, preferred index) — every VL-RewardBench id prefix the official grouping knows, POVID included.
VLRB_IDS = [
    ("hallucination_pair_1", 0),
    ("RLAIF-V_2", 1),
    ("RLHF-V_3", 0),
    ("mathverse_4", 0),
    ("mmmu_5", 1),
    ("wildvision-battle_6", 0),
    ("vlfeedback_7", 0),
    ("hallucination-9", 0),
]


def _png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (84, 84), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def vlrb_rows(folder: Path) -> list[dict]:
    """VL-RewardBench rows; the preferred response says 'correct', the other 'wrong'."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, preferred) in enumerate(VLRB_IDS):
        responses = ["wrong answer", "wrong answer"]
        responses[preferred] = "correct answer"
        (folder / f"images/{i}.png").write_bytes(_png((30 * i, 90, 160)))
        rows.append(
            {
                "id": item_id,
                "query": f"What is in picture {i}?",
                "response": responses,
                "image": f"images/{i}.png",
                "human_ranking": [0, 1] if preferred == 0 else [1, 0],
                "models": ["m1", "m2"],
                "query_source": item_id.split("_")[0],
            }
        )
    return rows


def write_vlrb_jsonl(folder: Path) -> Path:
    path = folder / "vlrb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in vlrb_rows(folder)))
    return path


def write_vlrb_parquet(folder: Path) -> Path:
    """The hub's layout: one Parquet file whose `image` column is a datasets Image (PNG bytes)."""
    import datasets

    rows = vlrb_rows(folder)
    for row in rows:
        row["image"] = {"bytes": (folder / row["image"]).read_bytes(), "path": None}
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "query": datasets.Value("string"),
            "response": datasets.Sequence(datasets.Value("string")),
            "image": datasets.Image(),
            "human_ranking": datasets.Sequence(datasets.Value("int64")),
            "models": datasets.Sequence(datasets.Value("string")),
            "query_source": datasets.Value("string"),
        }
    )
    path = folder / "test-00000-of-00001.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


MMRB_ROWS = [
    # (ID, Category, Better)
    ("nocaps_1", "open_generation/correctness_task", "Output1"),
    ("visitbench_2", "open_generation/preference_task", "Output2"),
    ("pairs_3", "safety", "Output1"),
    ("toxic_4", "safety", "Output2"),
    ("math_5", "reasoning", "Output2"),
    ("code_6", "reasoning", "Output1"),
    ("mmmu_7", "knowledge", "Output1"),
    ("vqa_8", "vqa", "Output2"),
]


def write_mmrb(folder: Path) -> Path:
    """`all_data.json` with images under `images/`; the better output says 'correct'."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, category, better) in enumerate(MMRB_ROWS):
        (folder / f"images/{i}.png").write_bytes(_png((100, 25 * i, 60)))
        good, bad = "correct answer", "wrong answer"
        rows.append(
            {
                "ID": item_id,
                "Text": f"Describe picture {i}.",
                "Image": f"images/{i}.png",
                "Output1": good if better == "Output1" else bad,
                "Output2": good if better == "Output2" else bad,
                "Better": better,
                "Category": category,
            }
        )
    path = folder / "all_data.json"
    path.write_text(json.dumps(rows))
    return path


class ScriptedJudge:
    """A `Backend` standing in for a judge model that always prefers the response saying 'correct'.

    It reads the prompt it is sent, so it checks that display orders are built and mapped back right;
    `reply` formats its verdict from the 1-based display position (None: an unparsable reply).
    """

    name = "scripted"

    def __init__(self, reply, wrong_every: int = 0) -> None:
        self.reply = reply
        self.wrong_every = wrong_every
        self.calls = 0

    def generate(self, requests, params):
        from judge.backends.base import Generation

        out = []
        for request in requests:
            self.calls += 1
            text = next(p["text"] for p in request.messages[-1]["content"] if p["type"] == "text")
            first, second = _shown_answers(text)
            position = 1 if "correct" in first else 2
            if self.wrong_every and self.calls % self.wrong_every == 0:
                position = 3 - position
            out.append(Generation(text=self.reply(position)))
        return out


def _shown_answers(text: str) -> tuple[str, str]:
    if "Answer 1:" in text:
        first = text.split("Answer 1:")[1].split("Answer 2:")[0]
        second = text.split("Answer 2:")[1]
        return first, second
    first = text.split("[The Start of Assistant A's Answer]")[1].split("[The End")[0]
    second = text.split("[The Start of Assistant B's Answer]")[1].split("[The End")[0]
    return first, second
