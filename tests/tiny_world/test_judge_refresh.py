"""Refreshing the judge on the policy's own wrong answers: which samples become pairs, and the mixed SFT file."""

from __future__ import annotations

import pytest

from jobs.jsonl import read_jsonl
from tiny_world.judge_refresh import policy_negatives, refresh_judge

WORLD = {"scene": {"width": 112, "height": 112, "shapes": [], "texts": []}, "task": {"kind": "count", "params": {}}}


def _row(n: int) -> dict:
    return {
        "id": f"q{n}",
        "image": f"images/{n}.png",
        "question": "How many?",
        "answer": "There is 1 circle.",
        "kind": "count",
    }


def test_only_distinct_wrong_samples_become_pairs_reference_first(tmp_path):
    rows = [_row(0), _row(1)]
    samples = [
        ["there is 1 circle", "There are 2 circles.", "There are 2 circles.", " "],  # right (normalised), a twin, empty
        ["There is 1 circle.", "There is 1 circle.", "There is 1 circle.", "There is 1 circle."],  # all right
    ]
    pairs = policy_negatives(samples, rows, {"q0": WORLD, "q1": WORLD}, tmp_path)
    assert [(p.id, p.candidates, p.label) for p in pairs] == [
        ("q0/p0", ["There is 1 circle.", "There are 2 circles."], 0)
    ]
    assert pairs[0].image == str((tmp_path / "images/0.png").resolve())
    assert pairs[0].meta == {"record": "q0", "kind": "count", "flaw": "policy", "world": WORLD}


def test_a_question_without_its_world_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no world scene for \['q0'\]"):
        policy_negatives([["There are 2 circles."]], [_row(0)], {}, tmp_path)


@pytest.mark.slow
def test_refresh_mixes_as_many_own_examples_and_trains(tmp_path):
    """Exact traces of the policy's pairs in both orders, as many of the judge's own examples (paths made
    absolute), and a short SFT that writes a model."""
    from data_synthesis.pipeline import load_rows, run_negatives
    from tiny_world.model import build_tiny_model
    from tiny_world.policy_data import world_questions
    from tiny_world.recipe import TinyJudgeRecipe, distill_judge_data, write_kind_world

    data = tmp_path / "data"
    recipe = TinyJudgeRecipe(kinds=["count"], world_n=24, negatives_n=2, image_size=84)
    write_kind_world(tmp_path / "world", data, kinds=recipe.kinds, n=24, seed=0, image_size=84)
    run_negatives(data, data, generator="scene", n=2, seed=0, show_progress=False)
    distill_judge_data(data, data, val_fraction=0.25, seed=0)
    rows = world_questions(data, data, "train")[:3]
    worlds = {r["id"]: r["world"] for r in load_rows(data, "records", data)}
    wrong = [[row["negatives"][0]] for row in rows]  # stand-ins for the policy's wrong samples
    pairs = policy_negatives(wrong, rows, worlds, data)
    judge = build_tiny_model(tmp_path / "judge", size="tiny", seed=0)
    figures = refresh_judge(recipe, judge, pairs, data / "sft" / "train.jsonl", tmp_path / "refresh", steps=1)
    assert figures["policy_examples"] == 2 * len(pairs) == figures["own_examples"] == 6
    mixed = [row for _, row in read_jsonl(tmp_path / "refresh" / "train.jsonl")]
    assert len(mixed) == 12 and all(image.startswith("/") for row in mixed for image in row["images"])
    traces = [row["messages"][-1]["content"][0]["text"] for row in mixed if "/p0/" in row["id"]]
    assert len(traces) == 6 and all(t.startswith("<think>") for t in traces)
    assert (tmp_path / "refresh" / "model" / "config.json").is_file()
