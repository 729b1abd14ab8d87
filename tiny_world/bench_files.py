"""Tiny files in the benchmarks' real formats: VL-RewardBench, Multimodal RewardBench and MM-Vet.

Each writer puts a handful of rows with small PIL images in a folder, in the layout the official release
ships (so `mrjudge eval` reads them exactly as it reads the real download), with answers a reader can
score by hand: in the two reward benchmarks the preferred response says "correct" and the other "wrong";
MM-Vet's candidates are graded by `tiny_world.servers.grader_server` as noted beside `MMVET_CANDIDATES`.
Tests, `benchmarks/outputs_unchanged.py` and the docs' examples use them; they need no download.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

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


def png_bytes(colour: tuple[int, int, int]) -> bytes:
    """An 84x84 PNG of one colour."""
    buffer = io.BytesIO()
    Image.new("RGB", (84, 84), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def vlrb_rows(folder: Path) -> list[dict]:
    """VL-RewardBench rows (images written under `folder/images/`); the preferred response says 'correct'."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, preferred) in enumerate(VLRB_IDS):
        responses = ["wrong answer", "wrong answer"]
        responses[preferred] = "correct answer"
        (folder / f"images/{i}.png").write_bytes(png_bytes((30 * i, 90, 160)))
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
    """`folder/vlrb.jsonl`: VL-RewardBench rows with image paths relative to the file."""
    path = folder / "vlrb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in vlrb_rows(folder)))
    return path


def write_vlrb_parquet(folder: Path) -> Path:
    """The hub's layout: one Parquet file whose `image` column is a datasets Image (PNG bytes)."""
    import datasets

    rows = vlrb_rows(folder)
    for row in rows:
        row["image"] = {"bytes": (folder / row["image"]).read_bytes(), "path": None}
    path = folder / "test-00000-of-00001.parquet"
    datasets.Dataset.from_list(rows, features=vlrb_features()).to_parquet(str(path))
    return path


def vlrb_features(*, sources: bool = True) -> Any:
    """VL-RewardBench's hub schema as datasets `Features`; `sources=False` leaves out `models` and `query_source`
    (the columns the loader does not need), as a minimal hand-made file would."""
    import datasets

    columns = {
        "id": datasets.Value("string"),
        "query": datasets.Value("string"),
        "response": datasets.Sequence(datasets.Value("string")),
        "image": datasets.Image(),
        "human_ranking": datasets.Sequence(datasets.Value("int64")),
    }
    if sources:
        columns.update(models=datasets.Sequence(datasets.Value("string")), query_source=datasets.Value("string"))
    return datasets.Features(columns)


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
    """Multimodal RewardBench's `all_data.json` with images under `images/`; the better output says 'correct'."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, category, better) in enumerate(MMRB_ROWS):
        (folder / f"images/{i}.png").write_bytes(png_bytes((100, 25 * i, 60)))
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


MMVET = {
    "v1_0": {"imagename": "v1_0.png", "question": "What is x in the equation?", "answer": "-1<AND>-5",
             "capability": ["ocr", "math"]},
    "v1_1": {"imagename": "v1_1.png", "question": "What colour is the car?", "answer": "red<OR>crimson",
             "capability": ["rec"]},
    "v1_2": {"imagename": "v1_2.png", "question": "What is written on the sign?", "answer": "STOP",
             "capability": ["ocr", "rec"]},
    "v1_3": {"imagename": "v1_3.png", "question": "How many apples are there?", "answer": "3",
             "capability": ["rec", "know"]},
}  # fmt: skip
MMVET_JUNK = "[[junk]]"  # the stand-in grader, given junk_marker=MMVET_JUNK, never grades a prediction carrying it
MMVET_CANDIDATES = [  # file j holds candidate j; the stand-in grader's grades are in the comments
    {"v1_0": "x = -1", "v1_1": "The car is Red.", "v1_2": "It says go.", "v1_3": "There are 3 apples."},  # 0 1 0 1
    {"v1_0": "x = -1 or x = -5", "v1_1": "It is crimson.", "v1_2": "It says stop.", "v1_3": "Two apples."},  # 1 1 1 0
    {"v1_0": "x = 3", "v1_1": "Blue.", "v1_2": "stop", "v1_3": f"Four apples. {MMVET_JUNK}"},  # 0 0 1 0 (junk)
]


def write_mmvet(root: Path, entries: dict = MMVET) -> Path:
    """MM-Vet's `mm-vet.json` (id → imagename, question, answer, capability) with images under `images/`."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    for i, key in enumerate(entries):
        Image.new("RGB", (56, 56), (40 * i, 200 - 40 * i, 90)).save(root / "images" / f"{key}.png")
    path = root / "mm-vet.json"
    path.write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return path


def write_mmvet_candidates(root: Path, tables: list[dict] = MMVET_CANDIDATES) -> list[Path]:
    """One `policy_j.json` per candidate set, in MM-Vet's results format ({id: answer})."""
    paths = []
    for j, table in enumerate(tables):
        paths.append(root / f"policy_{j}.json")
        paths[-1].write_text(json.dumps(table), encoding="utf-8")
    return paths
