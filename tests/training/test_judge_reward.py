"""The judge reward on hand-written completions: a table, one comment per case."""

from __future__ import annotations

import pickle

import pytest

from judge.reward.inputs import completion_text
from training.judge_reward import JudgeReward, judge_accuracy_reward, judge_format_reward, judge_reward

CASES = [
    # (completion, label, K, accuracy, format)
    ("<think>B shows red.</think><answer>B</answer>", 1, 2, 1.0, 1.0),  # right and well-formed
    ("<think>A shows red.</think><answer>A</answer>", 1, 2, 0.0, 1.0),  # wrong but well-formed
    ("<answer>B</answer>", 1, 2, 1.0, 0.0),  # right, no reasoning
    ("<think></think><answer>B</answer>", 1, 2, 1.0, 0.0),  # empty reasoning is not reasoning
    ("<think>x</think><answer>B</answer> trailing words", 1, 2, 1.0, 0.0),  # text after the answer
    ("<think>x</think><answer>B</answer><answer>A</answer>", 1, 2, 0.0, 0.0),  # two answers: the last counts
    ("<think>a <think> b</think><answer>B</answer>", 1, 2, 1.0, 0.0),  # nested think
    ("<think>x</think><answer>C</answer>", 2, 2, 0.0, 1.0),  # C does not exist with K = 2: refused
    ("The best answer is B.", 1, 2, 1.0, 0.0),  # a fallback phrase parses, but is not the format
    ("<think>I am not sure", 1, 2, 0.0, 0.0),  # cut off mid-thought
]


@pytest.mark.parametrize(("completion", "label", "k", "accuracy", "form"), CASES)
def test_parts_and_total(completion, label, k, accuracy, form):
    assert judge_accuracy_reward([completion], label=[label], n_options=[k]) == [accuracy]
    assert judge_format_reward([completion]) == [form]
    assert judge_reward([completion], label=[label], n_options=[k]) == [pytest.approx(0.9 * accuracy + 0.1 * form)]


def test_conversational_completions():
    messages = [{"role": "assistant", "content": "<think>ok</think><answer>A</answer>"}]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "<think>ok</think><answer>A</answer>"}]}]
    assert completion_text(messages) == completion_text(parts) == "<think>ok</think><answer>A</answer>"
    assert judge_reward([messages, parts], label=[0, 0], n_options=[2, 2]) == [1.0, 1.0]


def test_too_long_earns_nothing():
    reward = JudgeReward(max_completion_tokens=8)
    good = "<think>ok</think><answer>A</answer>"
    assert reward([good, good], label=[0, 0], n_options=[2, 2], completion_ids=[[1] * 7, [1] * 8]) == [1.0, 0.0]
    by_chars = JudgeReward(max_completion_chars=20)
    assert by_chars([good], label=[0], n_options=[2]) == [0.0]


def test_weights_and_pickling():
    reward = JudgeReward(accuracy_weight=1.0, format_weight=0.0)
    assert reward(["<answer>A</answer>"], label=[0], n_options=[2]) == [1.0]
    clone = pickle.loads(pickle.dumps(JudgeReward(max_completion_tokens=5)))
    assert clone.max_completion_tokens == 5 and clone.__name__ == "judge_reward"
