"""tiny_world.rule_judge: the candidate with the highest `score=N` wins, the first on a tie; `abstain` leaves the
answer out; the scored judge's log-probs are the softmax of the tags."""

from __future__ import annotations

import math

import pytest

from judge.backends.base import ChatRequest, SamplingParams
from tiny_world.rule_judge import RuleJudgeBackend, ScoredRuleBackend, SlowRuleBackend

PARAMS = SamplingParams(max_new_tokens=8)


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("Q?\nA. score=1\nB. score=5\nC. score=3", "<answer>B</answer>"),  # the highest tag
        ("Q?\nA. score=4\nB. score=4", "<answer>A</answer>"),  # a tie: the first
        ("Q?\nA. no tag\nB. score=0", "<answer>A</answer>"),  # no tag counts 0: a tie again
        ("Q?\nA. score=9\nB. I abstain", "<think>cannot tell</think>"),  # abstain anywhere: no answer
        ("Q? with no candidates", "<answer>A</answer>"),  # nothing to read: A, never a crash
    ],
)
def test_the_rule(prompt, answer):
    backend = RuleJudgeBackend()
    [generation] = backend.generate([ChatRequest.user(prompt)], PARAMS)
    assert generation.text.endswith(answer)
    assert (backend.calls, backend.requests) == (1, 1)


def test_the_slow_judge_records_its_batches():
    backend = SlowRuleBackend(delay_s=0.01)
    backend.generate([ChatRequest.user("Q?\nA. score=1\nB. score=2")] * 3, PARAMS)
    assert backend.batches == [3] and backend.started.is_set()


def test_the_scored_judge_gives_the_softmax_of_the_tags():
    [generation] = ScoredRuleBackend().generate([ChatRequest.user("Q?\nA. score=1\nB. score=2")], PARAMS)
    probabilities = [math.exp(lp) for lp in generation.label_logprobs]
    assert probabilities == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)])
