"""Log lines a flood cannot multiply: per reason, the first event at once, then one summary per interval.

A reward server meets thousands of requests a step. One log line per refused request (or per unscored
sample) lets a misbehaving client, or an ordinary OpenRLHF run without labels, fill the disk, and a server
whose stderr is a pipe nobody drains blocks on its own log write. So every such event goes through
`LogSummary.note(reason, message)`: the first of a reason is logged at once (a misconfigured client shows up
immediately), later ones within `interval_s` are only counted, and `flush` (called every interval by the
service, and on shutdown) writes one line per reason with the count and the last message. Counts by reason
are also in `/metrics`, which is the place to watch rates.

    summary = LogSummary(logging.getLogger("mrjudge.server"), interval_s=60)
    summary.note("refused 422 invalid_request", "images[0]: not a data URL")  # logged
    summary.note("refused 422 invalid_request", "responses: ...")            # counted
    summary.flush()    # one interval later: "refused 422 invalid_request: 1 more in the last 60 s (last: ...)"
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LogSummary", "RateLimitFilter"]


@dataclass
class _Reason:
    logged_at: float
    """When a line of this reason was last written."""
    pending: int = 0
    """Events since then, not yet in a line."""
    last: str = ""
    level: int = logging.WARNING


class LogSummary:
    """At most one log line per `interval_s` per reason, whatever the rate of events.

    Args:
        logger: where the lines go.
        interval_s: the shortest time between two lines of one reason.
        clock: seconds, monotonic (a test's own clock).
    """

    def __init__(
        self, logger: logging.Logger, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s ({interval_s}) must be > 0")
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._reasons: dict[str, _Reason] = {}
        self._lock = threading.Lock()  # notes come from the event loop and, for a few, from worker threads

    def note(
        self,
        reason: str,
        message: str,
        count: int = 1,
        *,
        level: int = logging.WARNING,
        exc_info: BaseException | None = None,
    ) -> None:
        """`count` events of `reason` (a short label from the code, never from a client), `message` saying what
        the last one was (the caller cuts a client's text short)."""
        now = self.clock()
        with self._lock:
            state = self._reasons.get(reason)
            if state is not None and (state.pending or now - state.logged_at < self.interval_s):
                state.pending += count
                state.last, state.level = message, max(state.level, level)
                return
            self._reasons[reason] = _Reason(logged_at=now, level=level)
        self.logger.log(
            level, "%s: %s [more of these: one line per %g s]", reason, message, self.interval_s, exc_info=exc_info
        )

    def flush(self, *, force: bool = False) -> int:
        """Write the summary line of every reason whose interval is over (all of them with `force`); returns
        how many lines were written."""
        now = self.clock()
        lines = []
        with self._lock:
            for reason, state in self._reasons.items():
                if state.pending and (force or now - state.logged_at >= self.interval_s):
                    lines.append((state.level, reason, state.pending, now - state.logged_at, state.last))
                    state.pending, state.logged_at, state.level = 0, now, logging.WARNING
        for level, reason, pending, seconds, last in lines:
            self.logger.log(level, "%s: %d more in the last %.0f s (last: %s)", reason, pending, seconds, last)
        return len(lines)

    def counts(self) -> dict[str, int]:
        """Events per reason not yet written in a line."""
        with self._lock:
            return {reason: state.pending for reason, state in self._reasons.items() if state.pending}


class RateLimitFilter(logging.Filter):
    """The same rule for lines the server does not write itself (uvicorn's "Invalid HTTP request received."
    for each malformed request): per message, one record per `interval_s` passes, the others are dropped and
    counted, and the next one to pass says how many were.

    logging.getLogger("uvicorn.error").addFilter(RateLimitFilter(60))
    """

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._seen: dict[tuple[int, str], list[float]] = {}  # (level, message template) -> [last passed, dropped]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, str(record.msg)[:200])
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.interval_s:
                seen[1] += 1
                return False
            dropped = int(seen[1]) if seen is not None else 0
            if len(self._seen) > 1000:  # a bounded table, whatever the messages
                self._seen.clear()
            self._seen[key] = [now, 0]
        if dropped:
            record.msg = f"{record.msg} [{dropped} more like it in the last {now - seen[0]:.0f} s]"
        return True
