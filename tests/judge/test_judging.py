"""De-biasing bookkeeping: whatever order candidates are shown in, verdicts index them as given.

The backend here is a scripted engine (it reads the prompt and answers by rule), because what is under
test is the judge's mapping and voting, not a model; real models are exercised in test_backends.py.
"""

from __future__ import annotations

import random
import re

import pytest

from judge.backends.base import Generation
from judge.judging import Judge, JudgeConfig, display_orders
from judge.types import MCItem


class RuleJudge:
    """Answers the letter of the candidate with the most stars ("[best]" counts ten); or always `fixed`
    (a position-biased judge)."""

    name = "rule"

    def __init__(self, fixed: str | None = None, logprob_of_shown: list[float] | None = None):
        self.fixed = fixed
        self.logprob_of_shown = logprob_of_shown
        self.calls: list[list[str]] = []

    def generate(self, requests, params):
        out = []
        for request in requests:
            text = request.messages[-1]["content"][-1]["text"]
            shown = re.findall(r"^([A-Z])\. (.*)$", text, flags=re.MULTILINE)
            self.calls.append([c for _, c in shown])
            merit = [c.count("*") + 10 * ("[best]" in c) for _, c in shown]
            letter = self.fixed or shown[merit.index(max(merit))][0]
            lp = self.logprob_of_shown[: len(shown)] if self.logprob_of_shown else None
            out.append(Generation(text=f"<think>checked</think><answer>{letter}</answer>", label_logprobs=lp))
        return out


def _item(k: int, best: int, item_id: str = "x") -> MCItem:
    cands = [f"candidate {i}" + (" [best]" if i == best else "") for i in range(k)]
    return MCItem(id=item_id, question="q?", candidates=cands)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("permutation", ["cyclic", "random"])
def test_every_display_order_maps_back(k, permutation):
    items = [_item(k, best, f"{k}-{best}") for best in range(k)]
    backend = RuleJudge()
    verdicts = Judge(backend, JudgeConfig(orders=k, permutation=permutation, seed=3)).select(items)
    for best, verdict in zip(range(k), verdicts):
        assert verdict.votes == [best] * k
        assert verdict.choice == best and verdict.consistent is True
    shown_first = {calls[0] for calls in backend.calls[:k]}
    assert len(shown_first) > 1, "display orders must actually move the candidates"


def test_cyclic_orders_put_every_candidate_everywhere():
    for k in (2, 3, 5):
        orders = display_orders(k, k, rng=random.Random(7))
        for position in range(k):
            assert sorted(order[position] for order in orders) == list(range(k))


def test_position_biased_judge_is_flagged_inconsistent():
    verdict = Judge(RuleJudge(fixed="A"), JudgeConfig(orders=2)).select([_item(2, 1)])[0]
    assert sorted(verdict.votes) == [0, 1]
    assert verdict.consistent is False
    assert verdict.choice in (0, 1)


def test_probs_follow_the_candidates_not_the_positions():
    # The engine always puts 0.8 on the first *shown* letter: averaged over both orders it is 0.5 each.
    import math

    backend = RuleJudge(fixed="A", logprob_of_shown=[math.log(0.8), math.log(0.2)])
    verdict = Judge(backend, JudgeConfig(orders=2)).select([_item(2, 0)])[0]
    assert verdict.probs == pytest.approx([0.5, 0.5])
    # With one order, the probability belongs to whichever candidate was shown first.
    single = Judge(backend, JudgeConfig(orders=1, seed=0)).select([_item(2, 0, "y")])[0]
    first_shown = single.votes[0]
    assert single.probs[first_shown] == pytest.approx(0.8)
    assert sum(single.probs) == pytest.approx(1.0)


def test_ties_are_broken_by_probs():
    import math

    # Votes split 1-1 between the orders; the probs favour candidate 1 in both orders.
    class Split(RuleJudge):
        def generate(self, requests, params):
            gens = super().generate(requests, params)
            for gen, shown in zip(gens, self.calls[-len(requests) :]):
                best_pos = next(i for i, c in enumerate(shown) if c == "candidate 1")
                lp = [math.log(0.3), math.log(0.3)]
                lp[best_pos] = math.log(0.7)
                gen.label_logprobs = lp
            return gens

    verdict = Judge(Split(fixed="A"), JudgeConfig(orders=2)).select([_item(2, 0)])[0]
    assert verdict.consistent is False and verdict.choice == 1


def test_majority_over_samples():
    class Noisy(RuleJudge):
        def generate(self, requests, params):
            gens = super().generate(requests, params)
            gens[0].text = "<answer>B</answer>"  # one dissenting sample out of three
            return gens

    cfg = JudgeConfig(orders=1, samples=3, temperature=0.7)
    verdict = Judge(Noisy(), cfg).select([_item(3, 2)])[0]
    assert len(verdict.votes) == 3 and verdict.choice == 2 and verdict.consistent is False


def test_unparsable_gives_none():
    class Mute(RuleJudge):
        def generate(self, requests, params):
            return [Generation(text="I cannot tell.") for _ in requests]

    verdict = Judge(Mute(), JudgeConfig()).select([_item(2, 0)])[0]
    assert verdict.choice is None and verdict.probs is None and verdict.consistent is None
    assert verdict.votes == [None, None] and len(verdict.raw) == 2


def test_rank_and_score():
    judge = Judge(RuleJudge(), JudgeConfig(orders=2))
    item = MCItem(id="r", question="q", candidates=["c0", "c1 ***", "c2 *", "c3 **"])
    assert judge.rank([item])[0] == [1, 3, 2, 0]
    scores = judge.score([_item(3, 2)])[0]
    assert scores == pytest.approx([0.0, 0.0, 1.0])


def test_verdicts_do_not_depend_on_batching():
    items = [_item(3, i % 3, f"id{i}") for i in range(7)]
    a = Judge(RuleJudge(fixed="A"), JudgeConfig(orders=2, batch_size=1)).select(items)
    b = Judge(RuleJudge(fixed="A"), JudgeConfig(orders=2, batch_size=7)).select(items)
    assert [v.to_dict() for v in a] == [v.to_dict() for v in b]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(samples=3), "temperature"),
        (dict(orders=0), "orders"),
        (dict(batch_size=0), "batch_size"),
        (dict(permutation="zigzag"), "permutation"),
        (dict(top_p=0), "top_p"),
    ],
)
def test_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JudgeConfig(**kwargs)
