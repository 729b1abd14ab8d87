from __future__ import annotations

import json

import pytest

from judge.prompt import build_messages, build_prompt_text, option_letters
from judge.types import DataError, MCItem, Verdict

GOOD = {"id": "a", "image": "img.png", "question": "q?", "candidates": ["x", "y"], "label": 1, "meta": {"src": "t"}}


def test_round_trip():
    item = MCItem.from_dict(GOOD)
    assert item.to_dict() == GOOD
    verdict = Verdict(id="a", choice=1, probs=[0.2, 0.8], consistent=True, votes=[1, 1], reasoning="r", raw=["x", "y"])
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


@pytest.mark.parametrize(
    ("change", "field_name"),
    [
        ({"id": None}, "id"),
        ({"question": 3}, "question"),
        ({"candidates": ["only one"]}, "candidates"),
        ({"candidates": "x, y"}, "candidates"),
        ({"label": 2}, "label"),
        ({"label": True}, "label"),
        ({"image": 5}, "image"),
        ({"meta": [1]}, "meta"),
    ],
)
def test_bad_fields_are_named(change, field_name):
    with pytest.raises(DataError) as info:
        MCItem.from_dict({**GOOD, **change}, where="f.jsonl line 3")
    assert info.value.field_name == field_name
    assert str(info.value).startswith("f.jsonl line 3: field '" + field_name + "'")


def test_missing_field():
    row = dict(GOOD)
    del row["candidates"]
    with pytest.raises(DataError, match="field 'candidates': missing"):
        MCItem.from_dict(row)


def test_prompt_letters_and_order():
    assert option_letters(4) == ["A", "B", "C", "D"]
    with pytest.raises(ValueError):
        option_letters(1)
    text = build_prompt_text("Which?", ["first", "second", "third"])
    assert "A. first\nB. second\nC. third" in text
    assert "harmlessness" in text and "<answer>X</answer>" in text
    messages = build_messages("Which?", ["a", "b"], n_images=2)
    assert [p["type"] for p in messages[0]["content"]] == ["image", "image", "text"]
