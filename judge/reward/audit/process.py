"""One reward audit per process, for a framework's reward function (verl's `compute_score`, OpenRLHF's
`reward_func`): read from the function's own `audit` keyword or `$MRJUDGE_AUDIT`, made at the first call that
sets it, fed at a running count of calls, flushed at exit, and never in the way of a score.

Frameworks pass a reward function no training step and take no extra logs from it that every sample carries,
so the step is the process's call count and the figures go to the audit's files and one log line per closed
window. A framework's reward function has no trainer hook either: `stop` and `keep-best` act as `warn` there,
and say so once.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from judge.reward.audit.config import AuditConfig
from judge.reward.audit.runner import AuditedGroup, RewardAudit

__all__ = ["AUDIT_ENV", "ProcessAudit", "audit_setting"]

AUDIT_ENV = "MRJUDGE_AUDIT"
"""The environment variable holding the audit's setting as JSON, for reward functions whose framework passes
no keyword."""

logger = logging.getLogger("judge.reward.audit")


def audit_setting(value: Any, where: str) -> dict[str, Any] | None:
    """The setting: `value` (a mapping or JSON text, named `where` in errors), else `$MRJUDGE_AUDIT`; None: off.

    Raises:
        ValueError: text that is not a JSON object.
    """
    if value is None:
        value, where = os.environ.get(AUDIT_ENV) or None, f"${AUDIT_ENV}"
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"mr-judge: {where} is not JSON ({exc}): {value[:200]!r}") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"mr-judge: {where} must be a mapping (JSON object) of the audit's settings, got {value!r}")
    return dict(value)


class ProcessAudit:
    """This process's audit for one framework's reward function (`framework` and `keyword` name them in logs
    and errors)."""

    def __init__(self, framework: str, keyword: str, log: logging.Logger | None = None) -> None:
        self.framework, self.keyword, self.log = framework, keyword, log or logger
        self.audit: RewardAudit | None = None
        self._lock = threading.Lock()
        self._calls = self._logged_windows = 0
        self._failed = False

    def ensure(self, value: Any, rejudge: Any = None) -> RewardAudit | None:
        """The audit, made from the first setting seen (`value`, else `$MRJUDGE_AUDIT`); None when off.

        `{pid}` in the setting's `path` becomes this process's id (frameworks run several reward workers).

        Raises:
            ValueError: a setting that does not read (unknown key, bad value, an auditor that cannot be built).
        """
        setting = audit_setting(value, self.keyword)
        if setting is None:
            return None
        with self._lock:
            if self.audit is None:
                try:
                    config = AuditConfig.from_value(setting)
                    if config is None or not config.enabled:
                        return None
                    if config.path:
                        config.path = config.path.replace("{pid}", str(os.getpid()))
                    audit = RewardAudit(config, rejudge=rejudge)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"mr-judge: the reward audit's setting: {exc}") from exc
                if config.guard != "warn":
                    self.log.warning(
                        "mr-judge: reward audit guard %r acts as 'warn' in %s (stopping the run or keeping a "
                        "checkpoint needs a trainer's hook); the alarm is logged and in audit_windows.jsonl",
                        config.guard, self.framework,
                    )  # fmt: skip
                self.audit = audit
                atexit.register(self.flush)
            return self.audit

    def submit(self, build: Callable[[], list[AuditedGroup]]) -> None:
        """Hand this call's groups (`build()`) to the audit at this process's call count; returns at once, and
        whatever goes wrong is logged once and never reaches the framework."""
        audit = self.audit
        if audit is None:
            return
        try:
            with self._lock:
                step, self._calls = self._calls, self._calls + 1
            audit.submit(build(), step)
            windows = len(audit.windows)
            with self._lock:
                closed, self._logged_windows = windows > self._logged_windows, max(windows, self._logged_windows)
            if closed:  # a window closed since the last line: its figures, in this process's log
                self.log.info("mr-judge: reward audit %s", json.dumps(audit.metrics()))
        except Exception:  # noqa: BLE001 - the audit never costs a score
            with self._lock:
                first, self._failed = not self._failed, True
            if first:
                self.log.error(
                    "mr-judge: the reward audit failed in %s; scores are unaffected (logged once)",
                    self.framework, exc_info=True,
                )  # fmt: skip

    def flush(self) -> None:
        """At exit: what is queued audited (for at most 10 s), and the open windows closed into the files."""
        if self.audit is None:
            return
        try:
            self.audit.flush(timeout=10)
        except Exception:  # noqa: BLE001 - never fail an exiting worker
            self.log.warning("mr-judge: the reward audit could not be flushed at exit", exc_info=True)
