"""`cal.py`'s arithmetic, bit for bit: its majority rule, its seeded shuffle of the calls, and its ks.

`cal.py` is what VL-RewardBench's published numbers come from, and it does not take every call: it shuffles
all calls with `random.seed(1234)` and gives each item its first k shuffled calls, for k in 1, 3, 5, 7, 9. A
reading that means to match those numbers has to draw the same shuffles in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from eval.vl_rewardbench.accuracy import Unit

__all__ = ["CALPY_KS", "CALPY_SEED", "calpy_units", "default_headline_k", "majority"]

CALPY_SEED = 1234
CALPY_KS = (1, 3, 5, 7, 9)


def majority(outcomes: Sequence[str]) -> str:
    """`cal.py`'s classification: the outcome with more than half of the calls, else `other`.

    >>> majority(["agree", "agree", "reject"]), majority(["agree", "reject"])
    ('agree', 'other')
    """
    half = len(outcomes) / 2
    for outcome in ("agree", "reject", "doesntMatch"):
        if outcomes.count(outcome) > half:
            return outcome
    return "other"


def default_headline_k(calls_per_item: int) -> int:
    """The largest k of `cal.py`'s list that the run's calls cover (9 for the official 10 calls).

    >>> default_headline_k(10), default_headline_k(3), default_headline_k(1)
    (9, 3, 1)
    """
    fitting = [k for k in CALPY_KS if k <= calls_per_item]
    if not fitting:
        raise ValueError("the cal.py reading needs at least one call per item")
    return fitting[-1]


def _calpy_shuffle(lines: list, rng: random.Random) -> list:
    # cal.py's `shuffle_data`: a swap with a uniformly drawn position for every index, in place.
    for i in range(len(lines)):
        j = rng.randint(0, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
    return lines


def calpy_units(calls: Sequence[tuple[str, str, str, str]], ks: Sequence[int] = CALPY_KS) -> dict[int, list[Unit]]:
    """`{k: units}` for each k of `cal.py`'s list, from `(key, group, source, outcome)` per call in
    inference order. The shuffles run for every k in `CALPY_KS` (each draws from the generator), so k = 9
    gets the same calls it gets in `cal.py` whichever ks are asked for."""
    rng = random.Random(CALPY_SEED)
    out: dict[int, list[Unit]] = {}
    for k in CALPY_KS:
        lines = _calpy_shuffle(list(calls), rng)
        taken: dict[str, list[str]] = {}
        meta: dict[str, tuple[str, str]] = {}
        for key, group, source, outcome in lines:
            chosen = taken.setdefault(key, [])
            meta.setdefault(key, (group, source))
            if len(chosen) < k:
                chosen.append(outcome)
        if k in ks:
            out[k] = [Unit(*meta[key], majority(chosen)) for key, chosen in taken.items()]
    return out
