"""The parser is total and reads every supported form; cases are a table, one comment each."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge.parser import extract_reasoning, is_well_formed, parse_answer, parse_choice

CASES = [
    ("<think>A is wrong.</think><answer>B</answer>", 2, 1),  # the trained form
    ("<answer> C </answer>", 3, 2),  # spaces inside the tag
    ("<answer>(A)</answer>", 2, 0),  # parenthesised
    ("<answer>Option B.</answer>", 2, 1),  # a word before the letter
    ("<answer>b</answer>", 2, 1),  # lower case inside the tag
    ("<answer>A</answer> then <answer>B</answer>", 2, 1),  # the last decisive answer wins
    ("<answer>B", 2, 1),  # no closing tag (truncated output)
    ("The answer is \\boxed{B}.", 2, 1),  # boxed
    ("\\boxed{\\text{A}}", 2, 0),  # boxed text
    ("Overall Judgment: Answer 2 is better.", 2, 1),  # VL-RewardBench, numbers from 1
    ("**Overall Judgment**: **Answer 1** is slightly better", 2, 0),  # with markdown emphasis
    ("Answer: C", 3, 2),  # phrase
    ("Final answer: (B)", 2, 1),  # phrase with parentheses
    ("The best answer is A.", 2, 0),  # phrase
    ("I think the correct option is B!", 3, 1),  # phrase
    ("Answer: A ... wait, the best answer is B.", 2, 1),  # last phrase wins
    ("<answer>A</answer> Answer: B", 2, 0),  # the tag outranks a later phrase
    ("<answer>D</answer>", 3, None),  # refused: outside the three options
    ("Overall Judgment: Answer 3 is better", 2, None),  # refused: outside the two answers
    ("<answer>Apple</answer>", 2, None),  # a word, not a letter
    ("I cannot decide.", 2, None),  # nothing decisive
    ("", 2, None),  # empty
]


@pytest.mark.parametrize(("text", "k", "expected"), CASES)
def test_known_forms(text, k, expected):
    assert parse_choice(text, k) == expected


def test_position_points_at_the_label():
    text = "<think>x</think><answer>B</answer>"
    found = parse_answer(text, 2)
    assert found is not None and text[found.start] == "B" and found.form == "tag"
    judged = parse_answer("Overall Judgment: Answer 2 is better", 2)
    assert judged is not None and judged.form == "judgment" and judged.label == "2"


@pytest.mark.parametrize("bad", [None, 3, b"<answer>A</answer>", ["<answer>A</answer>"]])
def test_non_strings_give_none(bad):
    assert parse_choice(bad, 2) is None


@settings(max_examples=400, deadline=None)
@given(st.text(), st.integers(min_value=-3, max_value=30))
def test_total_on_arbitrary_strings(text, k):
    result = parse_answer(text, k)
    assert result is None or 0 <= result.index < k


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_characters="<>\\"), max_size=200),
    st.integers(min_value=2, max_value=26),
    st.data(),
)
def test_tag_after_any_reasoning(prefix, k, data):
    index = data.draw(st.integers(min_value=0, max_value=k - 1))
    letter = chr(ord("A") + index)
    assert parse_choice(f"<think>{prefix}</think><answer>{letter}</answer>", k) == index


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=2, max_value=25), st.data())
def test_letters_beyond_k_are_refused(k, data):
    index = data.draw(st.integers(min_value=k, max_value=25))
    assert parse_choice(f"<answer>{chr(ord('A') + index)}</answer>", k) is None


def test_reasoning_extraction():
    assert extract_reasoning("<think> A is blue. </think><answer>B</answer>") == "A is blue."
    assert extract_reasoning("B is right.<answer>B</answer>") == "B is right."
    assert extract_reasoning(None) == ""


WELL_FORMED_CASES = [
    ("<think>B shows red.</think><answer>B</answer>", True),  # the contract
    ("  <think>x</think>\n<answer> B </answer>\n", True),  # whitespace around the parts
    ("<think></think><answer>B</answer>", False),  # empty reasoning
    ("<think>x</think><answer>B</answer> more", False),  # text after the answer
    ("<think>a <answer>A</answer> b</think><answer>B</answer>", False),  # an answer nested in the reasoning
    ("<think>x</think><answer>b</answer>", False),  # a lower-case letter parses, but is not the contract
    ("The best answer is B.", False),  # a fallback phrase parses, but is not the contract
    (None, False),  # total, like the parser: anything in, never a raise
]


@pytest.mark.parametrize(("text", "ok"), WELL_FORMED_CASES)
def test_is_well_formed(text, ok):
    assert is_well_formed(text) is ok
