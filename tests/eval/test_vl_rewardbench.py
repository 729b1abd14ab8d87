"""VL-RewardBench: grouping, the official parse and vote, metrics against hand-computed values."""

from __future__ import annotations

import json

import pytest

from eval import vl_rewardbench as vlrb
from eval.vl_rewardbench import VLRBConfig, call_outcome, item_outcome, official_predict, parse_official, score
from jobs.jsonl import InputError
from tests.eval.fixtures import VLRB_IDS, ScriptedJudge, write_vlrb_jsonl, write_vlrb_parquet


@pytest.fixture
def items(tmp_path):
    return vlrb.load_vl_rewardbench(write_vlrb_jsonl(tmp_path))


def test_groups_from_id_prefix_including_povid(items):
    assert [(i.source, i.group) for i in items] == [
        ("povid", "hallucination"),
        ("rlaif_v", "hallucination"),
        ("rlhf_v", "hallucination"),
        ("mathverse", "reasoning"),
        ("mmmu", "reasoning"),
        ("wildvision", "general"),
        ("vlfeedback", "general"),
        ("povid", "hallucination"),
    ]
    assert [i.preferred for i in items] == [p for _, p in VLRB_IDS]


def test_parquet_with_image_bytes_loads_like_jsonl(tmp_path, items):
    from judge.images import load_image

    parquet = vlrb.load_vl_rewardbench(write_vlrb_parquet(tmp_path / "pq"))
    assert [(i.id, i.preferred, i.group) for i in parquet] == [(i.id, i.preferred, i.group) for i in items]
    assert load_image(parquet[0].image).size == (84, 84)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Overall Judgment: Answer 2 is better.", 2),
        ("**Overall Judgment**: **Answer 1** is slightly better", 1),
        ("Accuracy...\nOverall Judgment:\nAnswer 2\nis the better one", 2),
        ("Therefore, Answer 1 is better than Answer 2.", 1),
        # `.*` is greedy: the last "Answer N is better" after the first cue wins.
        ("Overall Judgment: Answer 1 is better. On reflection, Answer 2 is better.", 2),
        ("Answer 1 is better.", None),
        ("<think>...</think><answer>B</answer>", None),
        ("", None),
    ],
)
def test_official_regex(text, expected):
    assert parse_official(text) == expected


def test_call_outcome_follows_the_official_rule():
    # Preferred response 0 shown second ([1, 0]): the rejected one sits at position 1.
    assert call_outcome(1, [1, 0], preferred=0) == "reject"
    assert call_outcome(2, [1, 0], preferred=0) == "agree"
    assert call_outcome(1, [0, 1], preferred=0) == "agree"
    assert call_outcome(2, [0, 1], preferred=1) == "agree"
    assert call_outcome(3, [0, 1], preferred=0) == "agree"  # any number but the rejected position agrees
    assert call_outcome(None, [0, 1], preferred=0) == "doesntMatch"


def test_item_outcome_majority_and_ties():
    assert item_outcome(["agree"] * 6 + ["reject"] * 4) == "agree"
    assert item_outcome(["agree"] * 5 + ["reject"] * 5) == "other"  # a tie is no majority
    assert item_outcome(["doesntMatch"] * 2 + ["agree"]) == "doesntMatch"
    assert item_outcome(["agree", "reject", "doesntMatch"]) == "other"


def test_metrics_by_hand(items):
    preds = [0, 0, None, 0, 1, 1, 0, 0]  # agree, reject, unparsed, agree, agree, reject, agree, agree
    rows = [{"id": i.id, "pred": p} for i, p in zip(items, preds)]
    rows[2]["status"] = "other"
    m = score(items, rows)
    assert m["accuracy_hallucination"] == pytest.approx(2 / 3)
    assert m["accuracy_reasoning"] == 1.0
    assert m["accuracy_general"] == 0.5
    assert m["overall_accuracy"] == pytest.approx(5 / 7)
    assert m["macro_accuracy"] == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    assert (m["n"], m["decided"], m["unparsed"], m["no_majority"]) == (8, 7, 1, 1)
    assert (m["accuracy_povid"], m["accuracy_rlaif_v"], m["accuracy_rlhf_v"]) == (1.0, 0.0, None)
    assert (m["accuracy_mathverse"], m["accuracy_mmmu"], m["accuracy_wildvision"], m["accuracy_vlfeedback"]) == (
        1.0,
        1.0,
        0.0,
        1.0,
    )
    assert "consistency" not in m


def test_consistency_and_bad_predictions(items):
    rows = [{"id": i.id, "pred": i.preferred, "consistent": n % 2 == 0} for n, i in enumerate(items)]
    assert score(items, rows)["consistency"] == 0.5
    with pytest.raises(InputError, match="match no row of the data"):
        score(items, [{"id": "nope", "pred": 0}])
    with pytest.raises(InputError, match="'pred' must be 0, 1 or null"):
        score(items, [{"id": items[0].id, "pred": 2}])


def test_official_protocol_maps_random_display_orders_back(items):
    judge = ScriptedJudge(lambda position: f"Accuracy: fine.\nOverall Judgment: Answer {position} is better.")
    rows = official_predict(judge, items, VLRBConfig(k=5, seed=3))
    assert judge.calls == 5 * len(items)
    displays = {tuple(c["display"]) for row in rows for c in row["calls"]}
    assert displays == {(0, 1), (1, 0)}  # both orders were drawn
    assert all(row["status"] == "agree" and row["pred"] == row["preferred"] for row in rows)
    assert score(items, rows)["overall_accuracy"] == 1.0

    # Every third call is wrong: with k=3 each item gets 2 agree / 1 reject — still a majority.
    wrong = ScriptedJudge(lambda position: f"Therefore, Answer {position} is better.", wrong_every=3)
    rows = official_predict(wrong, items, VLRBConfig(k=3))
    assert all(r["status"] == "agree" for r in rows)
    assert [sum(c["outcome"] == "reject" for c in r["calls"]) for r in rows] == [1] * len(items)
    # cal.py's reading at k = 3 (the largest of 1, 3, 5, 7, 9 that 3 calls cover) sees all three calls.
    m = score(items, rows)
    assert (m["reading"], m["headline_k"], m["overall_accuracy"]) == ("cal.py", 3, 1.0)
    assert {"overall_accuracy_k1", "overall_accuracy_k3"} <= set(m) and "overall_accuracy_k5" not in m

    # With k=2 and one wrong call in two, every item is a tie over all calls: no majority, left out of the
    # denominators in the all-calls reading (cal.py's reading at k = 1 sees one call per item instead).
    tie = ScriptedJudge(lambda position: f"Overall Judgment: Answer {position} is better.", wrong_every=2)
    tie_rows = official_predict(tie, items, VLRBConfig(k=2))
    m = score(items, tie_rows, reading="all-calls")
    assert (m["overall_accuracy"], m["unparsed"], m["no_majority"]) == (None, len(items), len(items))
    assert (m["overall_accuracy_unparsed_wrong"], m["overall_accuracy_unparsed_coin"]) == (0.0, 0.5)
    assert score(items, tie_rows)["headline_k"] == 1 and score(items, tie_rows)["unparsed"] == 0

    unparsable = ScriptedJudge(lambda position: f"I like answer {position}.")
    rows = official_predict(unparsable, items, VLRBConfig(k=3))
    assert {r["status"] for r in rows} == {"doesntMatch"} and score(items, rows)["unparsed"] == len(items)


def test_official_prompt_is_verbatim(items):
    text = vlrb.official_prompt("Q?", ["first", "second"])
    assert text.startswith(" You are a highly capable multimodal AI assistant tasked with evaluating answers")
    assert "Question: Q?\n\nAnswer 1: first\n\nAnswer 2: second\n\nPlease evaluate both answers" in text
    assert "For example: Overall Judgment: Answer X is better." in text


def test_bad_rows_are_reported_with_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "query": "q", "response": ["x"], "image": "i.png", "human_ranking": [0, 1]}\n'
        '{"id": "b", "query": "q", "response": ["x", "y"], "image": "i.png", "human_ranking": [0, 0]}\n'
        '{"id": "c", "response": ["x", "y"], "image": "i.png", "human_ranking": [0, 1]}\n'
    )
    with pytest.raises(InputError) as info:
        vlrb.load_vl_rewardbench(path)
    message = str(info.value)
    assert "line 1: field 'response'" in message
    assert "line 2: field 'human_ranking'" in message
    assert "line 3: field 'query'" in message


def test_missing_images_fail_before_any_model(tmp_path):
    path = write_vlrb_jsonl(tmp_path)
    (tmp_path / "images/3.png").unlink()
    with pytest.raises(InputError, match="image file"):
        vlrb.load_vl_rewardbench(path)


def test_bad_rows_under_max_bad_fraction_are_left_out_and_counted(tmp_path):
    path = write_vlrb_jsonl(tmp_path)
    (tmp_path / "images/3.png").unlink()  # one row's image is gone
    with pytest.raises(InputError, match="1 problem"):
        vlrb.load_vl_rewardbench(path)
    items = vlrb.load_vl_rewardbench(path, max_bad_fraction=0.2)
    assert len(items) == len(VLRB_IDS) - 1 and items.provenance["data_skipped_rows"] == 1
    assert len(items.skipped) == 1 and "field 'image': image file not found" in items.skipped[0]
    assert vlrb.load_vl_rewardbench(write_vlrb_jsonl(tmp_path / "clean")).provenance["data_skipped_rows"] == 0


class _AlwaysA:
    """A backend that answers every MC prompt with option A."""

    name = "always-a"

    def generate(self, requests, params):
        from judge.backends.base import Generation

        return [Generation(text="<think>A.</think><answer>A</answer>") for _ in requests]


def test_a_run_refuses_to_resume_with_other_judge_settings(tmp_path, items):
    from eval.run import Scoring, run_pairwise_benchmark
    from eval.workers import JudgeSpec
    from jobs.resumable import SettingsChanged
    from judge.backends.spec import ModelSpec
    from judge.judging import JudgeConfig

    def judge(**config):
        spec = ModelSpec("always-a")
        spec._built = _AlwaysA()  # the backend, already built: no model to load
        return JudgeSpec(spec, JudgeConfig(**config))

    out = tmp_path / "run"
    run = dict(scoring=Scoring(), out=out, judge_name="always-a", show_progress=False)
    run_pairwise_benchmark(vlrb, items, judge=judge(orders=2), **run)
    before = (out / "predictions.jsonl").read_bytes()
    with pytest.raises(SettingsChanged, match="judge.orders: 2 → 1"):
        run_pairwise_benchmark(vlrb, items, judge=judge(orders=1), **run)
    assert (out / "predictions.jsonl").read_bytes() == before
    run_pairwise_benchmark(vlrb, items, judge=judge(orders=1), overwrite=True, **run)
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(items) and all(len(row["raw"]) == 1 for row in rows)
