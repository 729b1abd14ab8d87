"""The reward planner: loose samples grouped by prompt, images and reference; each group's mode and cost."""

from __future__ import annotations

import pytest

from judge.reward.planner import NEUTRAL_REWARD, fill_unscored, group_id, group_samples, plan_cost, plan_request


def test_planner_groups_by_prompt_images_and_reference():
    groups = group_samples(
        ["P", "P", "Q", "P", "P", "P"],
        ["a", "b", "c", "d", "e", "f"],
        images=[["x.png"], ["x.png"], [], ["y.png"], ["x.png"], ["x.png"]],
        references=[None, None, "ref", None, None, ""],  # "" is no reference: same group as None
    )
    assert [g.indices for g in groups] == [[0, 1, 4, 5], [2], [3]]
    assert [None if g.request is None else g.request.mode for g in groups] == ["listwise", "pairwise", None]
    assert groups[0].request.id == group_id("P", None, 1)


@pytest.mark.parametrize(
    ("kwargs", "mode", "cost"),
    [
        (dict(responses=["a"]), None, 0),  # alone, no reference: unscored by rule
        (dict(responses=["a"], reference=""), None, 0),  # OpenRLHF's empty label is no reference
        (dict(responses=["a"], reference="r"), "pairwise", 1),
        (dict(responses=["a"] * 4), "listwise", 1),
        (dict(responses=["a"] * 9), "tournament", 8),  # above max_options: knock-out, G - 1 games
        (dict(responses=["a"] * 4, mode="pairwise"), None, 0),  # pairwise needs a reference
        (dict(responses=["a"] * 4, mode="tournament", tournament="round_robin"), "tournament", 6),
    ],
)
def test_plan_request_rules_and_cost(kwargs, mode, cost):
    request = plan_request("Q?", **kwargs)
    assert (None if request is None else request.mode) == mode
    assert (0 if request is None else plan_cost(request)) == cost


def test_fill_unscored_uses_the_group_mean_then_neutral():
    groups = group_samples(["P", "P", "P", "Q"], ["a", "b", "c", "d"])
    assert fill_unscored([0.2, None, 0.6, None], groups) == pytest.approx([0.2, 0.4, 0.6, NEUTRAL_REWARD])
