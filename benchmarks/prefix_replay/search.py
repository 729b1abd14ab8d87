"""The longest prompt whose step fits a memory cap: the one search `prefix_replay` and `gpu_checks` both run.

Doubling (or halving) from a start until a step does not fit, then bisection to an eighth of the last step.
`gpu_checks` once had a search of its own: a fixed ladder, then a straight line through its last two fitting
rungs to where it crosses the cap, measured once. That costs two probes fewer than bisection, but is right
only where memory grows linearly in the prompt (memory-efficient attention); where attention holds its P x P
scores memory grows faster, and chunked replay's is nearly flat, so the line crosses the cap far from where a
step does, and a missed estimate left the answer at the last rung, up to 4x short. Bisection assumes nothing
about the curve: every length it reports was measured, and the true longest prompt lies between the two it
reports. From the ladder it keeps the time guard: with a deadline, a probe whose predicted time does not fit
what is left is not started.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

Probe = dict[str, Any]
"""One measured step: `prompt`, `fits` (it ran and peaked under the cap) and, when it ran, `ok` and `step_s`."""


class _OutOfTime(Exception):
    """The next probe would not end before the deadline."""


def predicted_step_s(probes: list[Probe], prompt: int) -> float:
    """A step's time at `prompt` from the measured ones: t = a·P + b·P² through the two longest (attention's
    share grows with P), or quadratic from a single one (an upper bound)."""
    done = sorted((p for p in probes if p.get("ok") and "step_s" in p), key=lambda p: p["prompt"])
    last = done[-1]
    if len(done) < 2 or done[-2]["prompt"] == last["prompt"]:
        return last["step_s"] * (prompt / last["prompt"]) ** 2
    (p1, t1), (p2, t2) = [(p["prompt"], p["step_s"]) for p in done[-2:]]
    b = max((t2 / p2 - t1 / p1) / (p2 - p1), 0.0)
    a = max(t2 / p2 - b * p2, 0.0)
    return a * prompt + b * prompt**2


def longest_prompt(
    measure: Callable[[int], Probe],
    start: int,
    limit: int,
    *,
    deadline: float = math.inf,
    on_probe: Callable[[list[Probe]], None] | None = None,
) -> dict[str, Any]:
    """The longest measured prompt that fits, and the shortest measured one that does not. Bisection, not a
    line through two fitting lengths: it assumes nothing about how memory grows (the module's docstring).

    Args:
        measure: runs one step at a prompt length and returns its `Probe`.
        start: the first length; from there the search doubles while steps fit, or halves (down to 64) until
            one does.
        limit: the longest length it tries; the last doubling is clipped to it.
        deadline: a `time.time()` the search ends by: a probe whose predicted time (`predicted_step_s`, with
            half again to spare) would pass it is not started.
        on_probe: called with the probes so far after each one, so a run killed mid-search keeps them.

    Returns:
        `probes` in the order run; `max_measured`, the longest prompt measured to fit (0: none did);
        `first_over_cap`, the shortest measured not to (None: the search stopped at `limit` or at the
        deadline first); `limited_by`: `cap`, `limit` or `time`.
    """
    probes: list[Probe] = []

    def fits(length: int) -> bool:
        if deadline < math.inf and any(p.get("ok") and "step_s" in p for p in probes):
            if time.time() + 1.5 * predicted_step_s(probes, length) > deadline:
                raise _OutOfTime
        probes.append(measure(length))
        if on_probe:
            on_probe(probes)
        return probes[-1]["fits"]

    try:
        _bisect(fits, start, limit)
        over = [p["prompt"] for p in probes if not p["fits"]]
        limited_by = "cap" if over else "limit"
    except _OutOfTime:
        limited_by = "time"
    return {
        "probes": probes,
        "limited_by": limited_by,
        "max_measured": max((p["prompt"] for p in probes if p["fits"]), default=0),
        "first_over_cap": min((p["prompt"] for p in probes if not p["fits"]), default=None),
    }


def _bisect(fits: Callable[[int], bool], start: int, limit: int) -> None:
    """Probe lengths through `fits`: doubling (or halving), then bisection to 1/8 of the last step. Every length
    probed lies between the longest that fit so far and the shortest that did not, so those two are the answer."""
    good, bad = start, None
    if not fits(start):  # halving down to a length that fits
        bad, good = start, start // 2
        while good >= 64 and not fits(good):
            bad, good = good, good // 2
        if good < 64:
            return
    elif start >= limit:
        return
    while bad is None and good < limit:  # doubling, the last step clipped to the limit itself
        if fits(min(good * 2, limit)):
            good = min(good * 2, limit)
        else:
            bad = min(good * 2, limit)
    if bad is None:
        return
    step = max((bad - good) // 8, 1)
    while bad - good > step:
        middle = (good + bad) // 2 // 64 * 64 or good + step
        if middle <= good:
            break
        if fits(middle):
            good = middle
        else:
            bad = middle
