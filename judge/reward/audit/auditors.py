"""Who scores the gold of an audited group: one score in [0, 1] per completion (None: cannot say).

- `answer_key`: 1.0 when the completion equals the reference (case, spacing and a final full stop aside), else
  0.0; `answer_key:pkg.mod:fn` calls a verifiable task's own check, `fn(prompt, completion, reference)`;
- `judge_url:http://host:port`: a second, stronger judge behind `POST /v1/reward`, each completion judged
  pairwise against the reference (`judge.reward.trl.http.HttpJudgeReward`);
- `self`: the rewarding judge asked again (the integration hands it in); with the same judge the figures show
  only its instability, not its bias, and the figures say so (`AuditRunner.figures()["gold_is"]`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["AUDITORS", "Auditor", "build_auditor", "check_auditor", "normalized"]

AUDITORS = ("answer_key", "judge_url", "self")

Rejudge = Callable[[str, Sequence[Any], Sequence[str], str | None], Sequence[float | None]]
"""The rewarding judge asked again: (prompt, images, completions, reference) → rewards."""


class Auditor(Protocol):
    name: str
    gold_is: str
    """What the gold stands for: "truth" (an answer key or a stronger judge) or "instability" (`self`)."""

    def __call__(
        self, prompt: str, images: Sequence[Any], completions: Sequence[str], reference: str | None
    ) -> list[float | None]: ...


def normalized(text: str) -> str:
    """An answer as compared with the key: lower case, single spaces, no final full stop."""
    return re.sub(r"\s+", " ", text).strip().lower().rstrip(".").strip()


class AnswerKey:
    """Exact match with the reference, or a user's check (`fn(prompt, completion, reference) -> float`)."""

    gold_is = "truth"

    def __init__(self, check: str | None = None) -> None:
        self.name = "answer_key" if check is None else f"answer_key:{check}"
        self.check = _import(check) if check else None

    def __call__(
        self, prompt: str, images: Sequence[Any], completions: Sequence[str], reference: str | None
    ) -> list[float | None]:
        if reference is None:
            return [None] * len(completions)
        if self.check is None:
            return [float(normalized(c) == normalized(reference)) for c in completions]
        return [float(self.check(prompt, c, reference)) for c in completions]


class JudgeUrl:
    """A stronger judge behind `/v1/reward`: each completion judged pairwise against the reference."""

    gold_is = "truth"

    def __init__(self, url: str) -> None:
        from judge.reward.trl.http import HttpJudgeReward

        self.name = f"judge_url:{url}"
        self.reward = HttpJudgeReward(url, mode="pairwise", reference_column="reference", name="audit_judge")

    def __call__(
        self, prompt: str, images: Sequence[Any], completions: Sequence[str], reference: str | None
    ) -> list[float | None]:
        from judge.reward.planner import group_samples, scatter
        from judge.reward.trl.base import RewardCall
        from judge.reward.wire import RewardUnavailable

        if reference is None:
            return [None] * len(completions)
        n, call = len(completions), RewardCall()
        groups = group_samples(
            [prompt] * n, list(completions), images=[list(images)] * n, references=[reference] * n, mode="pairwise"
        )
        results = self.reward._judge_groups(groups, call)  # no reward-path logging: the audit counts its failures
        if any(r is None for g, r in zip(groups, results) if g.request is not None):
            raise RewardUnavailable(call.errors[-1] if call.errors else "the audit judge gave no reward")
        return scatter(n, groups, results)


class SelfAuditor:
    """The rewarding judge asked again: disagreement with itself is instability, not bias."""

    name = "self"
    gold_is = "instability"

    def __init__(self, rejudge: Rejudge) -> None:
        self.rejudge = rejudge

    def __call__(
        self, prompt: str, images: Sequence[Any], completions: Sequence[str], reference: str | None
    ) -> list[float | None]:
        return list(self.rejudge(prompt, images, completions, reference))


def check_auditor(spec: str) -> None:
    """`spec` names a known auditor in a form it can be built from (the import of a check waits for the build)."""
    kind, _, rest = spec.partition(":")
    if kind not in AUDITORS:
        raise ValueError(f"audit auditor must be one of {', '.join(AUDITORS)} (got {spec!r})")
    if kind == "judge_url" and not rest.startswith(("http://", "https://")):
        raise ValueError(f"audit auditor {spec!r}: judge_url needs a URL, as judge_url:http://host:8000")
    if kind == "answer_key" and rest and rest.count(":") != 1:
        raise ValueError(f"audit auditor {spec!r}: a check is named answer_key:package.module:function")
    if kind == "self" and rest:
        raise ValueError(f"audit auditor {spec!r}: self takes nothing after it")


def build_auditor(spec: str, rejudge: Rejudge | None = None) -> Auditor:
    """The auditor `spec` names (`self` needs the rewarding judge's `rejudge`)."""
    check_auditor(spec)
    kind, _, rest = spec.partition(":")
    if kind == "answer_key":
        return AnswerKey(rest or None)
    if kind == "judge_url":
        return JudgeUrl(rest)
    if rejudge is None:
        raise ValueError("audit auditor 'self' needs the rewarding judge; this reward path cannot ask it again")
    return SelfAuditor(rejudge)


def _import(target: str) -> Callable[..., float]:
    module, _, name = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"audit auditor answer_key:{target}: cannot import it ({exc})") from exc
    if not callable(fn):
        raise ValueError(f"audit auditor answer_key:{target} is not a function")
    return fn
