"""The judge scores one group of responses: G responses to one prompt in, G rewards out.

This is the scoring behind `POST /v1/reward`, `POST /get_reward` and the in-process TRL reward function;
each of them only adapts a wire format to `RewardRequest` (through `judge.reward.planner`) and calls
`compute_rewards`, which judges every request of a batch in one `Judge.select` call.

Modes (G = number of responses):

- `listwise`: one MC item with all G responses; each response's reward is its de-biased probability of
  being best (option-letter probabilities averaged over display orders, or the share of votes when the
  engine gives no log-probs). Needs 2 ≤ G ≤ `max_options`.
- `pairwise`: each response against the `reference`; the reward is the response's probability of beating it.
- `tournament`: for G above the judge's option limit. `round_robin` judges every pair and rewards the
  share of games won (a drawn or undecided game is half a win each); `knockout` plays a seeded bracket
  (a bye for an odd one out) and rewards the rounds survived over the rounds played, so the champion gets
  1.0 and first-round losers 0.0.

    judge = Judge(make_backend("runs/judge"), JudgeConfig(orders=2))
    [result.rewards for result in compute_rewards(judge, [RewardRequest("Q?", ["a", "b"], images=[img])])]

A verdict the judge could not parse is **unscored** (`None`), never a silent 1/k: listwise, every response
of the group; pairwise, that response; round-robin, a response with no scored game (the others get their
share of *scored* games won); knock-out, both players of an unscored game.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from judge.judging import Judge, candidate_scores, item_rng
from judge.types import DataError, MCItem, Verdict

__all__ = ["MODES", "RewardRequest", "RewardResult", "compute_rewards", "unscored"]

MODES = ("listwise", "pairwise", "tournament")
Mode = Literal["listwise", "pairwise", "tournament"]


@dataclass
class RewardRequest:
    """G responses to one prompt (with its images), to be scored against each other or a reference."""

    prompt: str
    responses: list[str]
    images: list[Any] = field(default_factory=list)
    """Image references (paths, data URLs, bytes, PIL images) the prompt is about."""
    reference: str | None = None
    """The answer each response is compared with in `pairwise` mode."""
    mode: Mode = "listwise"
    tournament: Literal["round_robin", "knockout"] = "round_robin"
    id: str = ""
    """Caller's id; seeds display orders and the knock-out bracket."""

    def validate(self, max_options: int) -> None:
        """Raise `DataError` naming the field when the request cannot be judged as asked."""
        if self.mode not in MODES:
            raise DataError("mode", f"unknown mode {self.mode!r}", f"use one of {', '.join(MODES)}")
        if not self.responses:
            raise DataError("responses", "empty", "send at least one response")
        if self.mode == "listwise" and not 2 <= len(self.responses) <= max_options:
            raise DataError(
                "responses",
                f"listwise judging needs 2 to {max_options} responses, got {len(self.responses)}",
                "use mode 'tournament' for larger groups, or 'pairwise' with a reference",
            )
        if self.mode == "pairwise" and self.reference is None:
            raise DataError("reference", "missing", "pairwise mode compares each response with a reference answer")
        if self.mode == "tournament" and self.tournament not in ("round_robin", "knockout"):
            raise DataError("tournament", f"unknown format {self.tournament!r}", "use 'round_robin' or 'knockout'")
        if self.mode == "tournament" and len(self.responses) < 2:
            raise DataError("responses", "a tournament needs at least 2 responses", "send 2 or more, or use pairwise")


@dataclass
class RewardResult:
    """Rewards in [0, 1], one per response (`None`: unscored), with the verdicts that made them."""

    rewards: list[float | None]
    verdicts: list[Verdict]
    timing: dict[str, float] = field(default_factory=dict)
    games: list[tuple[int, int, int]] = field(default_factory=list)
    """A tournament's games, one per verdict: `(round, i, j)`, the players as indices into the responses
    (the verdict's choice 0 means `i` won)."""


def unscored(verdict: Verdict) -> bool:
    """True when no call of the verdict parsed: the judge said nothing, so no reward may be read from it."""
    return verdict.choice is None


def _pair(request: RewardRequest, tag: str, first: str, second: str) -> MCItem:
    return MCItem(
        id=f"{request.id}#{tag}", question=request.prompt, candidates=[first, second], image=request.images or None
    )


def _plan(request: RewardRequest) -> list[MCItem]:
    """The MC items a request needs in its first round (knock-out adds rounds later)."""
    responses = request.responses
    if request.mode == "listwise":
        return [
            MCItem(id=request.id, question=request.prompt, candidates=list(responses), image=request.images or None)
        ]
    if request.mode == "pairwise":
        assert request.reference is not None
        return [_pair(request, f"ref{i}", r, request.reference) for i, r in enumerate(responses)]
    if request.tournament == "round_robin":
        return [
            _pair(request, f"rr{i}-{j}", responses[i], responses[j])
            for i in range(len(responses))
            for j in range(i + 1, len(responses))
        ]
    return []  # knock-out rounds are planned as they are played


def _bracket(
    request: RewardRequest, alive: list[int], round_no: int, seed: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """Seeded pairs for one knock-out round, and the index that gets a bye (if the count is odd)."""
    order = list(alive)
    item_rng(seed, request.id, f"round{round_no}").shuffle(order)
    byes = [order.pop()] if len(order) % 2 else []
    return [(order[i], order[i + 1]) for i in range(0, len(order), 2)], byes


def compute_rewards(judge: Judge, requests: Sequence[RewardRequest], *, max_options: int = 8) -> list[RewardResult]:
    """Rewards for every request; all judging of a round goes to the backend in one batch.

    Each request's responses are judged in a canonical order (sorted by text) and the rewards and listwise
    verdicts mapped back, so a group's rewards depend on which responses it holds, not on the order they
    came in (OpenRLHF's one-sample requests arrive in any order).

    Raises:
        DataError: a request that cannot be judged as asked (checked for all requests before any judging).
    """
    for request in requests:
        request.validate(max_options)
    orders = [sorted(range(len(r.responses)), key=lambda i, r=r: (r.responses[i], i)) for r in requests]
    canonical = [  # images resized once per request here, not once per game or round
        replace(r, responses=[r.responses[i] for i in order], images=judge.fit_images(r.images))
        for r, order in zip(requests, orders)
    ]
    results = _judge_requests(judge, canonical, max_options)
    for request, order, result in zip(requests, orders, results):
        rewards: list[float | None] = [None] * len(order)
        for position, original in enumerate(order):
            rewards[original] = result.rewards[position]
        result.rewards = rewards
        result.games = [(round_no, order[i], order[j]) for round_no, i, j in result.games]
        if request.mode == "listwise":
            result.verdicts = [_unpermute(v, order) for v in result.verdicts]
        elif request.mode == "pairwise":
            verdicts = list(result.verdicts)
            for position, original in enumerate(order):
                result.verdicts[original] = verdicts[position]
    return results


def _unpermute(verdict: Verdict, order: list[int]) -> Verdict:
    """A listwise verdict over canonically ordered candidates, re-indexed to the request's own order."""
    probs = None
    if verdict.probs is not None:
        probs = [0.0] * len(order)
        for position, original in enumerate(order):
            probs[original] = verdict.probs[position]
    return replace(
        verdict,
        choice=None if verdict.choice is None else order[verdict.choice],
        probs=probs,
        votes=[None if v is None else order[v] for v in verdict.votes],
    )


def _round_robin_players(item: MCItem) -> tuple[int, int]:
    """The two players of a round-robin game, from its item id (`…#rr{i}-{j}`)."""
    i, j = (int(x) for x in item.id.rsplit("#rr", 1)[1].split("-"))
    return i, j


def _judge_requests(judge: Judge, requests: Sequence[RewardRequest], max_options: int) -> list[RewardResult]:
    start = time.perf_counter()
    plans = [_plan(r) for r in requests]
    flat = [item for plan in plans for item in plan]
    verdicts = judge.select(flat) if flat else []
    results: list[RewardResult] = []
    cursor = 0
    knockouts: list[int] = []
    for index, (request, plan) in enumerate(zip(requests, plans)):
        got = verdicts[cursor : cursor + len(plan)]
        cursor += len(plan)
        g = len(request.responses)
        rewards: list[float | None]
        if request.mode == "listwise":
            rewards = [None] * g if unscored(got[0]) else list(candidate_scores(got[0], g))
        elif request.mode == "pairwise":
            rewards = [None if unscored(v) else candidate_scores(v, 2)[0] for v in got]
        elif request.tournament == "round_robin":
            wins, games = [0.0] * g, [0] * g
            for item, v in zip(plan, got):
                if unscored(v):  # an unparsed game counts for neither player
                    continue
                i, j = _round_robin_players(item)
                games[i] += 1
                games[j] += 1
                wins[i if v.choice == 0 else j] += 1.0
            rewards = [w / n if n else None for w, n in zip(wins, games)]
        else:
            rewards = []
            knockouts.append(index)
        results.append(RewardResult(rewards=rewards, verdicts=list(got)))
        if request.mode == "tournament" and request.tournament == "round_robin":
            results[-1].games = [(0, *_round_robin_players(item)) for item in plan]
    if knockouts:
        _play_knockouts(judge, [requests[i] for i in knockouts], [results[i] for i in knockouts])
    elapsed = 1000 * (time.perf_counter() - start)
    for result in results:
        result.timing = {"judge_ms": elapsed}
    return results


def _play_knockouts(judge: Judge, requests: Sequence[RewardRequest], results: Sequence[RewardResult]) -> None:
    """Play all knock-out brackets round by round, every round's games of every request in one batch."""
    alive = [list(range(len(r.responses))) for r in requests]
    survived = [[0] * len(r.responses) for r in requests]
    rounds = [math.ceil(math.log2(len(r.responses))) for r in requests]
    lost: list[set[int]] = [set() for _ in requests]  # players of an unscored game
    round_no = 0
    while any(len(a) > 1 for a in alive):
        games: list[tuple[int, int, int]] = []  # (request, i, j)
        items: list[MCItem] = []
        for r, request in enumerate(requests):
            if len(alive[r]) <= 1:
                continue
            pairs, byes = _bracket(request, alive[r], round_no, judge.config.seed)
            for i in byes:
                survived[r][i] += 1
            alive[r] = list(byes)
            for i, j in pairs:
                games.append((r, i, j))
                items.append(_pair(request, f"ko{round_no}-{i}-{j}", request.responses[i], request.responses[j]))
        for (r, i, j), item, verdict in zip(games, items, judge.select(items)):
            if unscored(verdict):  # the bracket goes on by the seeded coin; neither player is scored
                winner = i if item_rng(judge.config.seed, item.id, "coin").randrange(2) == 0 else j
                lost[r].update((i, j))
            else:
                winner = i if verdict.choice == 0 else j
            survived[r][winner] += 1
            alive[r].append(winner)
            results[r].verdicts.append(verdict)
            results[r].games.append((round_no, i, j))
        round_no += 1
    for r, result in enumerate(results):
        result.rewards = [None if i in lost[r] else s / rounds[r] for i, s in enumerate(survived[r])]
