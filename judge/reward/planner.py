"""The reward planner: the one place that decides how loose (prompt, response) samples are judged.

`group_samples` → `plan_request` → `judge.reward.scoring.compute_rewards` → `scatter`: the server's
`/v1/reward` and `/get_reward`, the TRL reward function (`judge.reward`) and the verl / OpenRLHF
integrations (`judge.integrations`) all call it, so the same samples get the same rewards whichever way
they arrive:

- samples with the same prompt text, images and reference form one group; its id (which seeds display
  orders and brackets) is `group_id(prompt, reference, n_images)`, the same on every path;
- 2..`max_options` responses: `listwise` (or the caller's mode); more: a tournament (`tournament`,
  default `knockout`: G - 1 games, where round-robin plays G(G - 1)/2);
- one response: `pairwise` against its reference; without a reference (`None` or `""`) it is
  **unscored**: there is nothing to compare it with, and it is never judged against an empty string;
- a verdict the judge could not parse is **unscored** too (see `judge.reward.scoring`).

Unscored is `None`. Where a framework cannot take `None` (verl, OpenRLHF), `fill_unscored` puts
`NEUTRAL_REWARD` in its place, or the mean of the group's scored rewards when it has some (zero
advantage under group-normalised baselines), and the caller flags and counts it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from judge.reward.scoring import Mode, RewardRequest

__all__ = [
    "NEUTRAL_REWARD",
    "RewardGroup",
    "fill_unscored",
    "group_id",
    "group_samples",
    "plan_cost",
    "plan_request",
    "scatter",
]

NEUTRAL_REWARD = 0.5
"""What an unscored response gets where the framework has no "skip" value: neither good nor bad (a pairwise
reward's midpoint). The caller flags it (`judge_scored = 0`)."""


def plan_cost(request: RewardRequest) -> int:
    """MC items a request puts in front of the judge (knock-out: all its rounds); what batches are sized in.

    >>> plan_cost(RewardRequest("Q?", ["a"] * 5, mode="tournament", tournament="round_robin"))
    10
    """
    g = len(request.responses)
    if request.mode == "listwise":
        return 1
    if request.mode == "pairwise":
        return g
    return g * (g - 1) // 2 if request.tournament == "round_robin" else g - 1


def group_id(prompt: str, reference: str | None, n_images: int) -> str:
    """A group's id: seeds its display orders and bracket, so every path to the judge must compute it alike.

    Images enter by count only: a path, a data URL and a PIL image of the same picture must give one id.
    """
    key = f"{prompt}\x00{reference or ''}\x00{n_images}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def plan_request(
    prompt: str,
    responses: list[str],
    *,
    images: Sequence[Any] = (),
    reference: str | None = None,
    mode: Mode = "listwise",
    tournament: Literal["round_robin", "knockout"] = "knockout",
    max_options: int = 8,
    request_id: str | None = None,
) -> RewardRequest | None:
    """How one group is judged, or `None` when it cannot be (one response, or pairwise, with no reference).

    >>> plan_request("Q?", ["a"]) is None, plan_request("Q?", ["a"], reference="b").mode
    (True, 'pairwise')
    >>> plan_request("Q?", ["a"] * 9).tournament
    'knockout'
    """
    reference = reference or None  # "" (OpenRLHF's "no label") is no reference
    common = dict(prompt=prompt, responses=list(responses), images=list(images), reference=reference)
    common["id"] = request_id if request_id is not None else group_id(prompt, reference, len(images))
    if mode == "pairwise" or len(responses) == 1:
        return None if reference is None else RewardRequest(**common, mode="pairwise")
    if mode == "listwise" and len(responses) > max_options:
        return RewardRequest(**common, mode="tournament", tournament=tournament)
    return RewardRequest(**common, mode=mode, tournament=tournament)


@dataclass
class RewardGroup:
    """Samples with one prompt, image set and reference: where they sit in the input, and their plan."""

    prompt: str
    images: list[Any]
    reference: str | None
    indices: list[int] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    request: RewardRequest | None = None
    """`None`: unscored by rule (see `plan_request`)."""


def group_samples(
    prompts: Sequence[str],
    responses: Sequence[str],
    *,
    images: Sequence[Sequence[Any]] | None = None,
    image_keys: Sequence[Any] | None = None,
    references: Sequence[str | None] | None = None,
    mode: Mode = "listwise",
    tournament: Literal["round_robin", "knockout"] = "knockout",
    max_options: int = 8,
) -> list[RewardGroup]:
    """Group samples by (prompt, images, reference) in first-seen order, and plan each group.

    Args:
        prompts, responses: one per sample.
        images: each sample's images (any reference the judge can load).
        image_keys: each sample's hashable image identity (a digest or the reference strings); default: the
            images themselves when they are strings, else their count.
        references: each sample's reference answer; `None` or `""` means none.
    """
    n = len(responses)
    if len(prompts) != n:
        raise ValueError(f"got {len(prompts)} prompts for {n} responses; pass one prompt per response")
    images = images if images is not None else [[] for _ in range(n)]
    references = references if references is not None else [None] * n
    groups: dict[tuple[Any, ...], RewardGroup] = {}
    for i in range(n):
        own = list(images[i] or [])
        key_images = image_keys[i] if image_keys is not None else tuple(x if isinstance(x, str) else "" for x in own)
        reference = references[i] or None
        group = groups.setdefault((prompts[i], key_images, reference), RewardGroup(prompts[i], own, reference))
        group.indices.append(i)
        group.responses.append(responses[i])
    for group in groups.values():
        group.request = plan_request(
            group.prompt, group.responses, images=group.images, reference=group.reference, mode=mode,
            tournament=tournament, max_options=max_options,
        )  # fmt: skip
    return list(groups.values())


def scatter(
    n: int, groups: Sequence[RewardGroup], results: Sequence[Sequence[float | None] | None]
) -> list[float | None]:
    """Each group's rewards back at its samples' places; `None` for unplanned or failed groups."""
    rewards: list[float | None] = [None] * n
    for group, result in zip(groups, results):
        if group.request is not None and result is not None:
            for i, r in zip(group.indices, result):
                rewards[i] = r
    return rewards


def fill_unscored(rewards: Sequence[float | None], groups: Sequence[RewardGroup] | None = None) -> list[float]:
    """`rewards` with every `None` replaced, for frameworks that cannot skip a sample.

    An unscored sample takes the mean of its group's scored rewards (its advantage against the group is
    then zero), or `NEUTRAL_REWARD` when nothing in its group was scored.

    >>> fill_unscored([0.2, None, 0.6]), fill_unscored([None])
    ([0.2, 0.4, 0.6], [0.5])
    """
    out = [NEUTRAL_REWARD if r is None else float(r) for r in rewards]
    for indices in [g.indices for g in groups] if groups is not None else [list(range(len(rewards)))]:
        scored = [rewards[i] for i in indices if rewards[i] is not None]
        if scored:
            mean = sum(scored) / len(scored)  # type: ignore[arg-type]
            for i in indices:
                if rewards[i] is None:
                    out[i] = mean
    return out
