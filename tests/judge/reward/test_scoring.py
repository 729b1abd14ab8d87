"""Rewards from a judge: listwise shares, pairwise against a reference, round-robin and knock-out."""

from __future__ import annotations

import pytest

from judge.judging import Judge, JudgeConfig
from judge.reward.scoring import RewardRequest, compute_rewards
from judge.types import DataError
from tiny_world.rule_judge import RuleJudgeBackend


@pytest.fixture
def judge():
    return Judge(RuleJudgeBackend(), JudgeConfig(orders=2))


def test_listwise_rewards_are_the_best_share(judge):
    [result] = compute_rewards(judge, [RewardRequest("Q?", ["score=1", "score=5", "score=2"], id="g")])
    assert result.rewards == [0.0, 1.0, 0.0] and len(result.verdicts) == 1


def test_pairwise_against_a_reference(judge):
    request = RewardRequest("Q?", ["score=1", "score=9"], reference="score=5", mode="pairwise", id="p")
    [result] = compute_rewards(judge, [request])
    assert result.rewards == [0.0, 1.0] and len(result.verdicts) == 2


def test_round_robin_rewards_the_share_of_wins(judge):
    responses = ["score=3", "score=1", "score=4", "score=2", "abstain"]
    request = RewardRequest("Q?", responses, mode="tournament", tournament="round_robin", id="rr")
    [result] = compute_rewards(judge, [request])
    # Games with the abstainer did not parse: they count for neither player, so the others get their share
    # of the 3 scored games won, and the abstainer (no scored game) is unscored, not 0.5.
    assert result.rewards[:4] == pytest.approx([2 / 3, 0 / 3, 3 / 3, 1 / 3]) and result.rewards[4] is None
    assert len(result.verdicts) == 10


@pytest.mark.parametrize("g", [2, 3, 5, 8, 9])
def test_knockout_champion_is_the_best_and_rewards_are_rounds_survived(judge, g):
    responses = [f"score={(7 * i) % g}" for i in range(g)]
    request = RewardRequest("Q?", responses, mode="tournament", tournament="knockout", id="ko")
    [result] = compute_rewards(judge, [request])
    best = max(range(g), key=lambda i: (7 * i) % g)
    assert result.rewards[best] == 1.0 and sorted(result.rewards)[-2] < 1.0
    assert len(result.verdicts) == g - 1  # a knock-out of g players has g - 1 games
    assert all(0.0 <= r <= 1.0 for r in result.rewards)


def test_requests_are_batched_together(judge):
    requests = [RewardRequest("Q?", ["score=1", "score=2"], id=str(i)) for i in range(5)]
    results = compute_rewards(judge, requests)
    assert [r.rewards for r in results] == [[0.0, 1.0]] * 5
    assert judge.backend.calls == 1  # all five groups in one backend batch


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (RewardRequest("Q?", ["a"] * 9), "responses"),
        (RewardRequest("Q?", ["a", "b"], mode="pairwise"), "reference"),
        (RewardRequest("Q?", ["a", "b"], mode="best"), "mode"),  # type: ignore[arg-type]
        (RewardRequest("Q?", []), "responses"),
    ],
)
def test_bad_requests_name_the_field(judge, request_, field):
    with pytest.raises(DataError) as info:
        compute_rewards(judge, [request_])
    assert info.value.field_name == field


# -- unscored verdicts: explicit None, never 1/k ----------------------------------------------------------


def test_an_unparsed_listwise_verdict_is_unscored_not_uniform(judge):
    [result] = compute_rewards(judge, [RewardRequest("Q?", ["score=1", "abstain", "score=2"], id="u")])
    assert result.rewards == [None, None, None]


def test_an_unparsed_pairwise_game_leaves_only_that_response_unscored(judge):
    request = RewardRequest("Q?", ["score=9", "abstain"], reference="score=5", mode="pairwise", id="p")
    assert compute_rewards(judge, [request])[0].rewards == [1.0, None]


def test_knockout_players_of_an_unparsed_game_are_unscored(judge):
    request = RewardRequest("Q?", ["score=1", "abstain"], mode="tournament", tournament="knockout", id="k")
    assert compute_rewards(judge, [request])[0].rewards == [None, None]


def test_rewards_follow_the_responses_not_the_order_they_came_in(judge):
    # Ties go to the first candidate shown, so without the canonical order the arrival order would decide.
    responses = ["score=5 (a)", "score=5 (b)", "score=1", "score=5 (c)"]
    forward = compute_rewards(judge, [RewardRequest("Q?", responses, id="g")])[0]
    backward = compute_rewards(judge, [RewardRequest("Q?", responses[::-1], id="g")])[0]
    assert forward.rewards == backward.rewards[::-1]
    assert forward.verdicts[0].choice == 3 - backward.verdicts[0].choice  # verdicts index the caller's order
