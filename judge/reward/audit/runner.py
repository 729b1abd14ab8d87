"""`RewardAudit`: the seeded share of judged groups, scored again off the reward path, into figures and files.

    audit = RewardAudit(AuditConfig(auditor="answer_key", path="runs/policy/audit.jsonl"))
    audit.submit(groups, step=state.global_step)   # after the rewards are computed; returns at once
    audit.metrics()                                # the figures to log: audit/overpay, audit/gold_mean, …

The k-th group seen is audited when a draw seeded by `(seed, k)` falls under `audit_rate`, so which groups are
audited depends on the seed and the order only, never on the rewards. Audited groups wait on a bounded queue
for one worker thread; a full queue drops the group and counts it (`dropped`), so an auditor slower than the
run costs figures, never time. An auditor that raises is counted (`auditor_errors`) and logged at most once
per window; it never reaches the reward path.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.reward.audit.auditors import Auditor, Rejudge, build_auditor
from judge.reward.audit.config import AuditConfig
from judge.reward.audit.figures import Scored, WindowFigures, moving_mean, slope, window_figures
from judge.reward.audit.guard import Alarm, Guard

__all__ = ["AuditedGroup", "RewardAudit"]

logger = logging.getLogger("judge.reward.audit")


@dataclass
class AuditedGroup:
    """One judged group as the audit sees it: what was asked, what the judge paid, and the gold's key."""

    prompt: str
    completions: list[str]
    rewards: list[float | None]
    reference: str | None = None
    images: list[Any] = field(default_factory=list)
    reasoning: list[str] | None = None
    """The judge's reasoning behind the rewards (one per verdict), where the reward path has it."""
    pairwise: bool = False
    """The rewards are probabilities of beating the reference (even share 1/2), not shares of a group (1/G)."""
    group_size: int | None = None
    """G, where the rewards are shares of a larger group than the completions given (a one-sample route of verl
    or OpenRLHF submits each sample of a group judged on the server alone); default: `len(completions)`."""


def _image_ref(ref: Any) -> str:
    if isinstance(ref, str) and not ref.startswith("data:"):
        return ref
    from judge.reward.inputs import image_digest

    return f"image:{image_digest(ref)}"


class RewardAudit:
    """The audit of one reward path (see the module's docstring)."""

    def __init__(self, config: AuditConfig, *, rejudge: Rejudge | None = None, auditor: Auditor | None = None) -> None:
        if not config.enabled and auditor is None:
            raise ValueError("the audit needs an auditor (audit.auditor: answer_key, judge_url:URL or self)")
        self.config = config
        self.auditor = auditor or build_auditor(config.auditor, rejudge)  # type: ignore[arg-type]
        self.guard = Guard(config)
        self.counts = {
            "groups": 0, "audited": 0, "dropped": 0, "auditor_errors": 0, "write_errors": 0, "completions": 0,
            "no_gold": 0,
        }  # fmt: skip
        self.windows: list[WindowFigures] = []
        self.alarm: Alarm | None = None
        self.best: WindowFigures | None = None
        """The closed window with the highest audited gold so far, the gold smoothed over `trend_windows`
        windows as the guard reads it (what `keep-best` keeps: one window's 5 % sample is noise)."""
        self._open: dict[int, tuple[list[int], list[Scored]]] = {}
        self._kl: dict[int, list[float]] = {}
        self._warned_windows: set[int] = set()
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[int, int, AuditedGroup] | None] = queue.Queue(maxsize=config.queue_size)
        self._worker: threading.Thread | None = None
        self._seen = 0
        self.worker_s = 0.0
        """Seconds the worker has spent auditing (the auditor, the files, the windows): the audit's cost."""
        self.path = Path(config.path) if config.path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    # -- the reward path's side: cheap, never blocking ----------------------------------------------------

    def selected(self, k: int) -> bool:
        """Whether the k-th group seen (from 0) is audited."""
        return random.Random(f"{self.config.seed}:{k}").random() < self.config.audit_rate

    def submit(self, groups: Sequence[AuditedGroup], step: int) -> int:
        """Queue the selected share of `groups` (judged at `step`); returns how many were queued."""
        queued = 0
        with self._lock:
            picks = []
            for group in groups:
                k, self._seen = self._seen, self._seen + 1
                self.counts["groups"] += 1
                if self.selected(k):
                    picks.append((k, group))
        for k, group in picks:
            self._start()
            try:
                self._queue.put_nowait((step, k, group))
                queued += 1
            except queue.Full:
                with self._lock:
                    self.counts["dropped"] += 1
        return queued

    def note_kl(self, step: int, kl: float) -> None:
        """The trainer's KL to the start policy at `step` (for the curve against KL)."""
        with self._lock:
            self._kl.setdefault(step // self.config.window, []).append(float(kl))

    def metrics(self, prefix: str = "audit") -> dict[str, float]:
        """The figures to log now: counts, the last closed window's figures, the trends, the alarm (0 or 1)."""
        with self._lock:
            out = {f"{prefix}/{k}": float(v) for k, v in self.counts.items()}
            out[f"{prefix}/alarm"] = float(self.alarm is not None)
            if self.windows:
                last = self.windows[-1]
                for key in ("agreement", "overpay", "underpay", "judge_mean", "gold_mean"):
                    value = getattr(last, key)
                    if value is not None:
                        out[f"{prefix}/{key}"] = float(value)
                for key in ("judge_mean", "gold_mean"):
                    series = [getattr(w, key) for w in self.windows[-self.config.trend_windows :]]
                    if all(v is not None for v in series):
                        out[f"{prefix}/{key}_trend"] = slope(series)
        return out

    def summary(self) -> dict[str, Any]:
        """Everything the audit measured, for a report: counts, windows, the alarm, the best window."""
        with self._lock:
            return {
                "auditor": self.auditor.name,
                "gold_is": self.auditor.gold_is,
                "audit_rate": self.config.audit_rate,
                **self.counts,
                "windows": [w.to_dict() for w in self.windows],
                "alarm": {"fired": self.alarm is not None, **(self.alarm.to_dict() if self.alarm else {})},
                "best": self.best.to_dict() if self.best else None,
                "worker_s": self.worker_s,
            }

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the queued groups to be audited, then close every open window (end of a run)."""
        self.settle(None, timeout)

    def settle(self, window: int | None, timeout: float | None = None) -> None:
        """Wait (up to `timeout` s) for the queued groups to be audited, then close the open windows up to
        `window` (all with None): what `keep-best` does at a window's end, so that the best window's checkpoint
        is marked before the Trainer's next save rotates older ones away. The one wait the audit puts on a run."""
        if self._worker is not None:
            self._queue.join() if timeout is None else _join(self._queue, timeout)
        with self._lock:
            for open_window in sorted(self._open):
                if window is None or open_window <= window:
                    self._close(open_window)

    def close(self) -> None:
        """Flush, then stop the worker."""
        self.flush()
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=10)
            self._worker = None

    # -- the worker's side --------------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="reward-audit", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                began = time.perf_counter()
                self._audit(*job)
                self.worker_s += time.perf_counter() - began
            finally:
                self._queue.task_done()

    def _audit(self, step: int, k: int, group: AuditedGroup) -> None:
        window = step // self.config.window
        try:
            gold = list(self.auditor(group.prompt, group.images, group.completions, group.reference))
            if len(gold) != len(group.completions):
                raise ValueError(f"{len(gold)} gold scores for {len(group.completions)} completions")
        except Exception as exc:  # noqa: BLE001 - a broken auditor costs a counter, never the run
            with self._lock:
                self.counts["auditor_errors"] += 1
                if window not in self._warned_windows:
                    self._warned_windows.add(window)
                    logger.warning("reward audit: auditor %s failed (%s: %s); counted, the run goes on",
                                   self.auditor.name, type(exc).__name__, exc)  # fmt: skip
            return
        even = 0.5 if group.pairwise else 1 / max(1, group.group_size or len(group.completions))
        scored = [Scored(r, g, even) for r, g in zip(group.rewards, gold)]
        try:
            self._write(step, window, k, group, gold, even)
        except OSError as exc:  # a full disk costs the file its lines, not the worker its life
            with self._lock:
                self.counts["write_errors"] += 1
                if self.counts["write_errors"] == 1:
                    logger.warning("reward audit: cannot write %s (%s); the figures go on", self.path, exc)
        with self._lock:
            self.counts["audited"] += 1
            self.counts["completions"] += len(scored)
            self.counts["no_gold"] += sum(g is None for g in gold)
            for older in sorted(w for w in self._open if w < window):
                self._close(older)
            steps, samples = self._open.setdefault(window, ([], []))
            steps.append(step)
            samples.extend(scored)

    def _write(
        self, step: int, window: int, k: int, group: AuditedGroup, gold: list[float | None], even: float
    ) -> None:
        if self.path is None:
            return
        images = [_image_ref(ref) for ref in group.images]
        lines = [
            json.dumps(
                {
                    "step": step,
                    "window": window,
                    "group": k,
                    "prompt": group.prompt,
                    "images": images,
                    "completion": completion,
                    "reward": reward,
                    "even": even,
                    "gold": g,
                    "reference": group.reference,
                    "reasoning": group.reasoning,
                    "auditor": self.auditor.name,
                },
                ensure_ascii=False,
            )
            for completion, reward, g in zip(group.completions, group.rewards, gold)
        ]
        with self.path.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def _close(self, window: int) -> None:
        """Close `window` (the lock is held): its figures, the guard, the best window, audit_windows.jsonl."""
        steps, samples = self._open.pop(window)
        kl = self._kl.pop(window, None)
        figures = window_figures(window, steps, samples, sum(kl) / len(kl) if kl else None)
        self.windows.append(figures)
        usable = [w for w in self.windows if w.n >= self.config.min_samples and w.gold_mean is not None]
        if usable:
            smoothed = moving_mean([w.gold_mean for w in usable], self.config.trend_windows)  # type: ignore[misc]
            self.best = usable[max(range(len(usable)), key=smoothed.__getitem__)]
        if self.alarm is None:
            self.alarm = self.guard.check(self.windows)
            if self.alarm is not None:
                logger.warning("reward audit alarm at step %d: %s", self.alarm.step, self.alarm.reason)
        if self.path is not None:
            with self.path.with_name(f"{self.path.stem}_windows.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps({**figures.to_dict(), "alarm": self.alarm is not None}) + "\n")


def _join(q: queue.Queue, timeout: float) -> None:
    """`q.join()` with a timeout (the queue's own has none)."""
    deadline = time.monotonic() + timeout
    while q.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.01)
