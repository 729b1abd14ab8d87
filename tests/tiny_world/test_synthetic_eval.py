"""Benchmark sets made from the synthetic world: the official loaders read them, the exact grader grades
through MM-Vet's real grading path, and best-of-N through pairwise games picks a knock-out champion."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from eval.mmvet import MMVetQuestion, grade_predictions, load_mmvet
from eval.vl_rewardbench import load_vl_rewardbench
from judge.types import MCItem, Verdict
from tiny_world.synthetic_eval import (
    ExactGrader,
    KnockoutSelector,
    best_of_n_candidates,
    write_mmvet_set,
    write_vlrb_set,
)


def _image(folder: Path, name: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (28, 28), (200, 30, 30)).save(folder / name)
    return name


def test_vlrb_set_round_trips_through_the_official_loader(tmp_path):
    src = tmp_path / "src"
    items = [
        MCItem(
            id=f"world-00000{i}",
            image=_image(src, f"{i}.png"),
            question="What colour is the circle?",
            candidates=["The circle is red.", "The circle is blue."][:: 1 if i % 2 == 0 else -1],
            label=i % 2,
            meta={"kind": "attribute", "flaw": "hallucinated_attribute"},
        )
        for i in range(3)
    ]
    path = write_vlrb_set(items, src, tmp_path / "set" / "heldout.jsonl")
    loaded = load_vl_rewardbench(path)
    assert [p.preferred for p in loaded] == [0, 1, 0]
    assert all(p.responses[p.preferred] == "The circle is red." for p in loaded)
    assert all(Path(p.image).is_file() and "set/images" in p.image for p in loaded)
    assert {p.group for p in loaded} == {"general"}  # no VL-RewardBench source prefix in the ids


def test_mmvet_set_loads_with_capabilities(tmp_path):
    rows = [
        {"id": "world-1", "image": _image(tmp_path / "src", "a.png"), "question": "Where is the square?",
         "answer": "The square is at the top left.", "kind": "spatial"},
    ]  # fmt: skip
    questions = load_mmvet(write_mmvet_set(rows, tmp_path / "src", tmp_path / "mmvet"))
    assert questions[0].capabilities == ("rec", "spat") and questions[0].image.is_file()


@pytest.mark.parametrize(
    ("prediction", "score"),
    [
        ("The circle is red.", 1.0),  # the ground truth itself
        ("the circle is red", 1.0),  # case and final full stop do not matter
        ("The circle is blue.", 0.0),  # an exact negative
        ("The circle is red. It is big.", 0.0),  # anything added is not the gold answer
    ],
)
def test_exact_grader_through_the_official_grading_path(prediction, score):
    question = MMVetQuestion("q", Path("x.png"), "What colour is the circle?", "The circle is red.", ("rec",))
    (grade,) = grade_predictions(ExactGrader(), [(question, prediction)])
    assert grade.score == score and grade.tries == 1 and not grade.failed


def test_best_of_n_candidates_are_seeded_and_mixed():
    rows = [{"id": f"q{i}", "answer": "right", "negatives": ["w1", "w2", "w3"]} for i in range(200)]
    first = best_of_n_candidates(rows, 4, gold_share=0.35, seed=0)
    assert first == best_of_n_candidates(rows, 4, gold_share=0.35, seed=0)
    assert first != best_of_n_candidates(rows, 4, gold_share=0.35, seed=1)
    share = sum(c == "right" for answers in first.values() for c in answers) / 800
    assert 0.28 < share < 0.42
    for answers in first.values():  # negatives repeat only once all three are used
        wrong = [c for c in answers if c != "right"]
        assert len(set(wrong)) == min(len(wrong), 3)
    with pytest.raises(ValueError):
        best_of_n_candidates(rows, 1, gold_share=0.5, seed=0)


class _LongestWins:
    """A fake judge: picks the longer candidate; records the items it was shown."""

    backend = type("B", (), {"name": "fake"})()
    config = type("C", (), {"seed": 0})()

    def __init__(self) -> None:
        self.shown: list[MCItem] = []

    def fit_images(self, refs):  # a real judge resizes them once per request; these games have none
        return list(refs)

    def select(self, items):
        self.shown += items
        return [
            Verdict(item.id, max(range(len(item.candidates)), key=lambda i: len(item.candidates[i])), None, True,
                    [0, 0], "", ["<answer>A</answer>"])
            for item in items
        ]  # fmt: skip


def test_knockout_selector_plays_pairwise_games():
    judge = _LongestWins()
    item = MCItem(id="q", question="?", candidates=["aa", "a", "aaaa", "aaa"], image=None)
    (verdict,) = KnockoutSelector(judge, max_options=2).select([item])
    assert verdict.choice == 2 and verdict.consistent is True
    assert len(judge.shown) == 3 and all(len(shown.candidates) == 2 for shown in judge.shown)  # N - 1 games

    two = MCItem(id="p", question="?", candidates=["a", "aa"], image=None)
    assert KnockoutSelector(judge, max_options=2).select([two])[0].choice == 1
    assert len(judge.shown) == 4  # within the option limit: one plain judge call
