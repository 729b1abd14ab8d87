"""`AuditConfig`: what audits the judge's reward, how often, over which windows, and what the guard does."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from judge.config import setting

__all__ = ["GUARD_ACTIONS", "AuditConfig"]

GUARD_ACTIONS = ("warn", "stop", "keep-best")


@dataclass
class AuditConfig:
    """The reward audit's settings; an `auditor` turns it on (`AuditConfig.from_value` reads a dict or None)."""

    auditor: str | None = setting(
        None,
        "who scores the gold: answer_key (exact match with the reference), answer_key:pkg.mod:fn (a "
        "verifiable task's own check: fn(prompt, completion, reference) -> float in [0, 1]), "
        "judge_url:http://host:port (a stronger judge behind /v1/reward) or self (the same judge asked "
        "again: shows instability only)",
    )
    audit_rate: float = setting(0.05, "share of judged groups audited (a seeded draw)")
    seed: int = setting(0, "seeds which groups are audited")
    window: int = setting(10, "steps (TRL), or requests (the server), that make one window of figures")
    queue_size: int = setting(64, "audited groups waiting for the auditor; beyond it work is dropped, counted")
    answer_column: str | None = setting(None, "dataset column with the gold answer (default: the reward's reference)")
    path: str | None = setting(None, "audit.jsonl to append every audited sample to (and audit_windows.jsonl)")
    guard: str = setting("warn", "what the alarm does: warn, stop or keep-best")
    overpay_margin: float = setting(0.15, "the alarm fires when overpay rises this much above its first window's")
    gold_drop: float = setting(
        0.1, "share of its peak the smoothed gold must lose (while the judge's reward does not fall)"
    )
    trend_windows: int = setting(3, "closed windows each trend is fitted on")
    min_samples: int = setting(8, "audited completions a window needs before the guard reads it")

    def __post_init__(self) -> None:
        from judge.reward.audit.auditors import check_auditor

        if self.auditor is not None:
            check_auditor(self.auditor)
        if not 0 < self.audit_rate <= 1:
            raise ValueError(f"audit_rate ({self.audit_rate}) must be in (0, 1]")
        for name in ("window", "queue_size", "min_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"audit {name} ({getattr(self, name)}) must be at least 1")
        if not 0 < self.gold_drop < 1:
            raise ValueError(f"audit gold_drop ({self.gold_drop}) is a share of the gold's peak, in (0, 1)")
        if self.trend_windows < 2:
            raise ValueError(f"audit trend_windows ({self.trend_windows}) must be at least 2: a trend needs two points")
        self.guard = self.guard.replace("_", "-")
        if self.guard not in GUARD_ACTIONS:
            raise ValueError(f"audit guard must be one of {', '.join(GUARD_ACTIONS)}, got {self.guard!r}")

    @property
    def enabled(self) -> bool:
        return self.auditor is not None

    @classmethod
    def from_value(cls, value: AuditConfig | dict[str, Any] | None) -> AuditConfig | None:
        """An `AuditConfig` from itself, a mapping (YAML's `audit:` block; unknown keys are refused) or None."""
        if value is None or isinstance(value, AuditConfig):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"audit must be a mapping of {sorted(f.name for f in fields(cls))}, got {value!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"audit: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**value)
