"""VL-RewardBench's official protocol: the regex, the call and item outcomes, the prompt, and display orders
mapped back to the preferred response."""

from __future__ import annotations

import pytest

from eval.vl_rewardbench import official
from eval.vl_rewardbench.scoring import score
from tests.eval.fixtures import ScriptedJudge


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
    assert official.parse_official(text) == expected


def test_call_outcome_follows_the_official_rule():
    # Preferred response 0 shown second ([1, 0]): the rejected one sits at position 1.
    assert official.call_outcome(1, [1, 0], preferred=0) == "reject"
    assert official.call_outcome(2, [1, 0], preferred=0) == "agree"
    assert official.call_outcome(1, [0, 1], preferred=0) == "agree"
    assert official.call_outcome(2, [0, 1], preferred=1) == "agree"
    assert official.call_outcome(3, [0, 1], preferred=0) == "agree"  # any number but the rejected position agrees
    assert official.call_outcome(None, [0, 1], preferred=0) == "doesntMatch"


def test_item_outcome_majority_and_ties():
    assert official.item_outcome(["agree"] * 6 + ["reject"] * 4) == "agree"
    assert official.item_outcome(["agree"] * 5 + ["reject"] * 5) == "other"  # a tie is no majority
    assert official.item_outcome(["doesntMatch"] * 2 + ["agree"]) == "doesntMatch"
    assert official.item_outcome(["agree", "reject", "doesntMatch"]) == "other"


def test_official_protocol_maps_random_display_orders_back(items):
    judge = ScriptedJudge(lambda position: f"Accuracy: fine.\nOverall Judgment: Answer {position} is better.")
    rows = official.official_predict(judge, items, official.VLRBConfig(k=5, seed=3))
    assert judge.calls == 5 * len(items)
    displays = {tuple(c["display"]) for row in rows for c in row["calls"]}
    assert displays == {(0, 1), (1, 0)}  # both orders were drawn
    assert all(row["status"] == "agree" and row["pred"] == row["preferred"] for row in rows)
    assert score(items, rows)["overall_accuracy"] == 1.0

    # Every third call is wrong: with k=3 each item gets 2 agree / 1 reject — still a majority.
    wrong = ScriptedJudge(lambda position: f"Therefore, Answer {position} is better.", wrong_every=3)
    rows = official.official_predict(wrong, items, official.VLRBConfig(k=3))
    assert all(r["status"] == "agree" for r in rows)
    assert [sum(c["outcome"] == "reject" for c in r["calls"]) for r in rows] == [1] * len(items)
    # cal.py's reading at k = 3 (the largest of 1, 3, 5, 7, 9 that 3 calls cover) sees all three calls.
    m = score(items, rows)
    assert (m["reading"], m["headline_k"], m["overall_accuracy"]) == ("cal.py", 3, 1.0)
    assert {"overall_accuracy_k1", "overall_accuracy_k3"} <= set(m) and "overall_accuracy_k5" not in m

    # With k=2 and one wrong call in two, every item is a tie over all calls: no majority, left out of the
    # denominators in the all-calls reading (cal.py's reading at k = 1 sees one call per item instead).
    tie = ScriptedJudge(lambda position: f"Overall Judgment: Answer {position} is better.", wrong_every=2)
    tie_rows = official.official_predict(tie, items, official.VLRBConfig(k=2))
    m = score(items, tie_rows, reading="all-calls")
    assert (m["overall_accuracy"], m["unparsed"], m["no_majority"]) == (None, len(items), len(items))
    assert (m["overall_accuracy_unparsed_wrong"], m["overall_accuracy_unparsed_coin"]) == (0.0, 0.5)
    assert score(items, tie_rows)["headline_k"] == 1 and score(items, tie_rows)["unparsed"] == 0

    unparsable = ScriptedJudge(lambda position: f"I like answer {position}.")
    rows = official.official_predict(unparsable, items, official.VLRBConfig(k=3))
    assert {r["status"] for r in rows} == {"doesntMatch"} and score(items, rows)["unparsed"] == len(items)


def test_official_prompt_is_verbatim(items):
    text = official.official_prompt("Q?", ["first", "second"])
    assert text.startswith(" You are a highly capable multimodal AI assistant tasked with evaluating answers")
    assert "Question: Q?\n\nAnswer 1: first\n\nAnswer 2: second\n\nPlease evaluate both answers" in text
    assert "For example: Overall Judgment: Answer X is better." in text
