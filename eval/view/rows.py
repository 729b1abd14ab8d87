"""One judged item as the page shows it: the candidates as each display order showed them, each call's
reasoning and answer set apart, the pick, the label and a status.

Verdicts record each call's answer mapped back to the caller's order (`votes`), not the order it was shown
in. The orders are drawn again from the judge's settings (`judge.judging.display_orders` with the item's
seed, as the judge drew them) and checked against every parsed call: the letter a call wrote must stand, in
that order, on the candidate its vote names. Where the settings are unknown or the check fails, two
candidates still give the order away (the letter and the vote name it); more than two are shown as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judge.judging import display_orders, item_rng
from judge.parser import extract_reasoning, parse_answer

__all__ = ["STATUSES", "call_rows", "confidence", "game_calls", "judge_config_of", "judge_row", "status_of"]

STATUSES = ("right", "wrong", "inconsistent", "undecided", "unlabelled")
"""A row's status: undecided (no call parsed) before inconsistent (the orders disagree) before right / wrong."""


def judge_config_of(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JudgeConfig fields in a run's settings record, wherever they sit (`{"judge": {...}}` for `mrjudge
    judge`, `{"judge": {"judge": {...}}}` for best-of-N), or {} when the run recorded none."""
    if not isinstance(settings, Mapping):
        return {}
    if "orders" in settings and "seed" in settings:
        return dict(settings)
    for value in settings.values():
        found = judge_config_of(value) if isinstance(value, Mapping) else {}
        if found:
            return found
    return {}


def _drawn_orders(item_id: Any, k: int, n_calls: int, config: Mapping[str, Any]) -> list[list[int]] | None:
    samples = int(config.get("samples") or 1)
    n_orders = int(config.get("orders") or 2)
    if n_orders * samples != n_calls:
        return None
    rng = item_rng(int(config.get("seed") or 0), item_id, "orders")
    orders = display_orders(k, n_orders, rng=rng, permutation=str(config.get("permutation") or "cyclic"))
    return [order for order in orders for _ in range(samples)]


def call_rows(
    item_id: Any, raw: Sequence[Any], votes: Sequence[int | None], k: int, config: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each call: `order` (the original index at each shown position, or None when it cannot be known), the
    `think` text, the `letter` written, the `pick` (an original index), and the whole `raw` output."""
    letters = [parse_answer(text, k) for text in raw]
    votes = list(votes) + [None] * (len(raw) - len(votes))
    orders = _drawn_orders(item_id, k, len(raw), config) if k > 0 else None
    if orders is not None and not all(
        found is None or vote is None or orders[i][found.index] == vote
        for i, (found, vote) in enumerate(zip(letters, votes))
    ):
        orders = None  # drawn with other settings than these: do not show a guess
    calls = []
    for i, (text, found, vote) in enumerate(zip(raw, letters, votes)):
        order = orders[i] if orders is not None else None
        if order is None and k == 2 and found is not None and vote is not None:
            order = [vote, 1 - vote] if found.index == 0 else [1 - vote, vote]
        calls.append(_call(text, found, vote, order))
    return calls


def _call(text: Any, found: Any, vote: int | None, order: list[int] | None, **extra: Any) -> dict[str, Any]:
    """One call as the page shows it: the order it showed, its reasoning, the letter it wrote and its pick."""
    return {
        "order": order,
        "think": extract_reasoning(text),
        "letter": found.label if found is not None else None,
        "slot": found.index if found is not None else None,
        "pick": vote,
        "raw": text if isinstance(text, str) else "",
        **extra,
    }


def game_calls(games: Sequence[Mapping[str, Any]], raw: Sequence[Any]) -> list[dict[str, Any]]:
    """The calls of a verdict made of pairwise games (`Verdict.games`), in the order of `raw`: each with its
    `game` (an index into `games`) and the two players in the order that call showed them, where its answer
    tells (the letter it wrote names one player, the vote says which)."""
    calls: list[dict[str, Any]] = []
    for number, game in enumerate(games):
        players = [int(p) for p in game.get("players") or ()]
        for vote in game.get("votes") or ():
            text = raw[len(calls)] if len(calls) < len(raw) else ""
            found = parse_answer(text, 2)
            order = None
            if found is not None and vote in players and len(players) == 2:
                other = players[1 - players.index(vote)]
                order = [vote, other] if found.index == 0 else [other, vote]
            calls.append(_call(text, found, vote, order, game=number))
    return calls


def status_of(pick: int | None, label: int | None, consistent: bool | None) -> str:
    """One of `STATUSES`."""
    if pick is None:
        return "undecided"
    if consistent is False:
        return "inconsistent"
    if label is None:
        return "unlabelled"
    return "right" if pick == label else "wrong"


def confidence(pick: int | None, probs: Sequence[float] | None, votes: Sequence[int | None]) -> float | None:
    """How sure the judge was of its pick: its probability where the engine gave log-probs, else its share of
    the parsed votes."""
    if pick is None:
        return None
    if probs and 0 <= pick < len(probs) and probs[pick] is not None:
        return float(probs[pick])
    parsed = [v for v in votes if v is not None]
    return sum(v == pick for v in parsed) / len(parsed) if parsed else None


def judge_row(
    *,
    item_id: Any,
    question: str,
    candidates: Sequence[str],
    label: int | None,
    pick: int | None,
    votes: Sequence[int | None] | None,
    raw: Sequence[Any] | None,
    probs: Sequence[float] | None = None,
    consistent: bool | None = None,
    usage: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    image: Mapping[str, Any] | None = None,
    category: str = "",
    subset: str = "",
    flaw: str = "",
) -> dict[str, Any]:
    """The page's record of one judged item (the keys `view.js` reads)."""
    votes = list(votes or [])
    calls = call_rows(item_id, list(raw or []), votes, len(candidates), config or {})
    return {
        "id": str(item_id),
        "question": question,
        "candidates": list(candidates),
        "label": label,
        "pick": pick,
        "status": status_of(pick, label, consistent),
        "correct": None if pick is None or label is None else pick == label,
        "consistent": consistent,
        "probs": list(probs) if probs else None,
        "confidence": confidence(pick, probs, votes),
        "usage": dict(usage) if usage else None,
        "calls": calls,
        "image": image,
        "category": category,
        "subset": subset,
        "flaw": flaw,
    }
