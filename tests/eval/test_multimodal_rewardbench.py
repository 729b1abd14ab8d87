"""Multimodal RewardBench: categories, the official prompt and parse, coin flips for unparsed items."""

from __future__ import annotations

import pytest

from eval import multimodal_rewardbench as mmrb
from eval.multimodal_rewardbench import MMRBConfig, official_predict, parse_official, score
from jobs.jsonl import InputError
from judge.judging import item_rng
from tests.eval.fixtures import ScriptedJudge, write_mmrb


@pytest.fixture
def items(tmp_path):
    return mmrb.load_multimodal_rewardbench(write_mmrb(tmp_path))


def test_categories_split_safety_and_reasoning_by_id(items):
    assert [i.group for i in items] == [
        "open_generation/correctness_task",
        "open_generation/preference_task",
        "safety/bias",
        "safety/toxicity",
        "reasoning/math",
        "reasoning/coding",
        "knowledge",
        "vqa",
    ]
    assert [i.preferred for i in items] == [0, 1, 0, 1, 1, 0, 0, 1]


def test_parse_is_the_official_check():
    assert parse_official("... Final verdict: [[B]]") == 1
    assert parse_official("[[A]]") == 0
    assert parse_official("[[B]] first, then [[A]]") == 0  # the official code tests [[A]] first
    assert parse_official("A is better") is None


def test_metrics_by_hand_with_seeded_coins(items):
    preds = [0, 1, 1, None, 1, 0, None, 0]  # right, right, wrong, coin, right, right, coin, wrong
    rows = [{"id": i.id, "pred": p} for i, p in zip(items, preds)]
    coins = {i.id: item_rng(0, i.id, "coin").randrange(2) == i.preferred for i, p in zip(items, preds) if p is None}
    m = score(items, rows)
    assert m["overall_accuracy"] == pytest.approx((4 + sum(coins.values())) / 8)
    assert (m["n"], m["unparsed"]) == (8, 2)
    assert m["accuracy_safety_bias"] == 0.0
    assert m["accuracy_safety_toxicity"] == float(coins["toxic_4"])
    assert m["accuracy_knowledge"] == float(coins["mmmu_7"])
    assert (m["accuracy_reasoning_math"], m["accuracy_reasoning_coding"], m["accuracy_vqa"]) == (1.0, 1.0, 0.0)
    assert m["accuracy_open_generation_correctness_task"] == 1.0
    assert score(items, rows) == m  # the coins are seeded per item
    with pytest.raises(InputError, match=f"the predictions cover 6 of {len(items)} rows; 2 row"):
        score(items, rows[:6])  # a figure on part of the set is not the benchmark's


def test_official_protocol_end_to_end_with_a_scripted_judge(items):
    judge = ScriptedJudge(lambda position: "Explanation. [[A]]" if position == 1 else "Explanation. [[B]]")
    rows = official_predict(judge, items, MMRBConfig())
    assert judge.calls == len(items)  # one call, Output1 shown as A
    assert score(items, rows)["overall_accuracy"] == 1.0
    rows = official_predict(ScriptedJudge(lambda position: "no verdict"), items, MMRBConfig())
    assert score(items, rows)["unparsed"] == len(items)


def test_official_prompt_is_verbatim():
    text = mmrb.official_prompt("Q?", "one", "two")
    assert text.startswith("Please act as an impartial judge and evaluate the quality of the responses")
    assert text.endswith(
        "[User Question]\nQ?\n\n[The Start of Assistant A's Answer]\none\n[The End of Assistant A's Answer]\n\n"
        "[The Start of Assistant B's Answer]\ntwo\n[The End of Assistant B's Answer]"
    )


def test_bad_rows_are_reported(tmp_path):
    path = write_mmrb(tmp_path)
    text = path.read_text().replace('"Better": "Output2"', '"Better": "second"', 1)
    path.write_text(text)
    with pytest.raises(InputError, match="item 1: field 'Better'"):
        mmrb.load_multimodal_rewardbench(path)
    with pytest.raises(InputError, match="image file"):
        mmrb.load_multimodal_rewardbench(write_mmrb(tmp_path / "x"), image_folder=tmp_path / "nowhere")


def test_leaderboard_columns_merge_safety_and_reasoning_and_unparsed_readings(items):
    preds = [0, 1, 0, None, 1, 1, 0, 1]  # right, right, right, coin, right, wrong, right, right
    rows = [
        {"id": i.id, "pred": p, "consistent": [True, None, False][n % 3]} for n, (i, p) in enumerate(zip(items, preds))
    ]
    m = score(items, rows)
    coin = float(item_rng(0, "toxic_4", "coin").randrange(2) == 1)
    assert m["accuracy_safety"] == pytest.approx((1 + coin) / 2)  # bias and toxicity items pooled
    assert m["accuracy_reasoning"] == 0.5  # math right, coding wrong
    assert m["accuracy_safety_unparsed_wrong"] == 0.5 and m["accuracy_safety_unparsed_coin"] == 0.75
    assert m["overall_accuracy_unparsed_wrong"] == 6 / 8 and m["overall_accuracy_unparsed_coin"] == 6.5 / 8
    assert m["overall_accuracy_ci95_low"] <= m["overall_accuracy"] <= m["overall_accuracy_ci95_high"]
    assert score(items, rows) == m  # seeded coins and bootstrap
    # One consistency rule: an item with fewer than two parsed orders (None) counts as not consistent.
    assert (m["consistency"], m["consistency_undetermined"]) == (3 / 8, 3)
    assert [label for label, _ in mmrb.BENCHMARK.columns] == [
        "general correctness", "general preference", "knowledge", "reasoning", "safety", "vqa"
    ]  # fmt: skip
    assert mmrb.BENCHMARK.columns[3][1] == "accuracy_reasoning"


def test_provenance_hashes_rows_and_images(tmp_path):
    first = mmrb.load_multimodal_rewardbench(write_mmrb(tmp_path / "a")).provenance
    assert first == mmrb.load_multimodal_rewardbench(write_mmrb(tmp_path / "b")).provenance | {
        "data_source": first["data_source"]
    }
    path = write_mmrb(tmp_path / "c")
    path.write_text(path.read_text().replace("Describe picture 3.", "Describe picture three."))
    assert mmrb.load_multimodal_rewardbench(path).provenance["data_sha256"] != first["data_sha256"]
