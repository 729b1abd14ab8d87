"""Held-out pairs scored with one rule for undecided items, broken down by kind, flaw and evidence."""

from __future__ import annotations

import pytest

from judge.types import MCItem
from tiny_world.heldout import UNDECIDED_CREDIT, evidence_of, mean_reward, reward_choice, score_choices, score_verdicts


def test_an_undecided_pair_is_a_coin_flip():
    rows = [
        {"choice": 0, "label": 0, "consistent": True, "kind": "count", "flaw": "hallucinated_count"},
        {"choice": 1, "label": 0, "consistent": True, "kind": "count", "flaw": "incomplete"},
        {"choice": None, "label": 1, "consistent": None, "kind": "attribute", "flaw": "hallucinated_attribute"},
        {"choice": 1, "label": 1, "consistent": False, "kind": "attribute", "flaw": "incorrect_knowledge"},
    ]
    scored = score_choices(rows)
    assert UNDECIDED_CREDIT == 0.5
    assert scored["accuracy"] == (1 + 0 + 0.5 + 1) / 4 and scored["accuracy_strict"] == 2 / 4
    assert (scored["n"], scored["decided"], scored["consistency"]) == (4, 3, 0.5)
    assert scored["per_kind"] == {"attribute": 0.75, "count": 0.5}
    assert scored["per_evidence"] == {"image": 0.75, "text": 0.5}
    assert scored["per_flaw"]["hallucinated_attribute"] == 0.5 and scored["flaw_counts"]["incomplete"] == 1
    assert score_choices([{"choice": None, "label": 0}] * 3)["accuracy"] == 0.5  # never answers: chance
    with pytest.raises(ValueError, match="empty"):
        score_choices([])


def test_flaws_are_image_or_text():
    assert {evidence_of(f) for f in ("hallucinated_object", "hallucinated_spatial", "hallucinated_text")} == {"image"}
    assert {evidence_of(f) for f in ("incomplete", "incorrect_reasoning", "incorrect_knowledge")} == {"text"}


def test_verdicts_and_rewards_follow_the_same_rule():
    from judge.types import Verdict

    items = [
        MCItem(id=str(i), image=None, question="q", candidates=["a", "b"], label=0, meta={"kind": "count"})
        for i in range(2)
    ]
    verdicts = [
        Verdict(id="0", choice=0, probs=None, consistent=True, votes=[0, 0], reasoning="", raw=["x", "y"]),
        Verdict(id="1", choice=None, probs=None, consistent=None, votes=[None, None], reasoning="", raw=["", ""]),
    ]
    scored = score_verdicts(items, verdicts)
    assert scored["accuracy"] == 0.75 and scored["call_accuracy"] == 0.5 and scored["unparsed_calls"] == 2
    assert [reward_choice(r) for r in (0.9, 0.1, 0.5, None)] == [0, 1, None, None]
    assert mean_reward([1.0, None, 0.0, 0.5]) == 0.5
