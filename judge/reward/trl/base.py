"""What the judge's TRL rewards share, whatever the transport: TRL's arguments in, grouping, metrics out.

A transport (`judge.reward.trl.http`, `judge.reward.trl.local`) subclasses `GroupedJudgeReward` and judges the
planned groups (`_judge_groups`, and `_ajudge_groups` for the coroutine form); grouping and planning are
the shared planner's (`judge.reward.planner`), and the counting, logging and raising are done here, once.

A group whose input the judge refused (a missing or out-of-root image, 413/415/422) is counted, logged and
raised (`judge.reward.wire.RewardRefused`, with the server's message): a mistyped image root must stop a run,
not train it on nothing. A group the judge could not be reached for within the retries (an outage) gets
`None` rewards, counted and logged: a long run rides out a judge restart (TRL treats `None` as no signal).
`None` is otherwise only for completions the judge could not score (an unparsed verdict, a lone completion
without a reference).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit
from judge.reward.inputs import completion_text, image_digest, prompt_images, prompt_text
from judge.reward.planner import RewardGroup, group_samples, scatter
from judge.reward.scoring import MODES
from judge.reward.wire import RetryPolicy, RewardError, RewardRefused

__all__ = ["TOURNAMENTS", "GroupedJudgeReward", "RewardCall", "check_reward_options"]

logger = logging.getLogger("judge.reward")  # one logger for both transports, under the public module's name

TOURNAMENTS = ("round_robin", "knockout")

GroupResults = list[list[float | None] | None]
"""One entry per group: its rewards, or None when judging it failed for good (the reason is in `RewardCall`)."""


def check_reward_options(
    mode: str, tournament: str, reference_column: str | None, max_options: int, cap_at_reference: bool = False
) -> None:
    """The checks every judge reward (and its config spec) makes on how groups are judged."""
    if cap_at_reference and mode != "pairwise":
        raise ValueError(
            f"cap_at_reference caps a pairwise reward at the reference's own: set mode 'pairwise' ({mode!r})"
        )
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if tournament not in TOURNAMENTS:
        raise ValueError(f"tournament must be 'round_robin' or 'knockout', got {tournament!r}")
    if mode == "pairwise" and not reference_column:
        raise ValueError("pairwise mode compares each completion with a reference: set reference_column")
    if max_options < 2:
        raise ValueError(f"max_options ({max_options}) must be at least 2")


@dataclass
class RewardCall:
    """What happened in one reward call, for `log_metric` and `totals`."""

    retries: int = 0
    errors: list[str] = field(default_factory=list)
    failures: list[RewardError] = field(default_factory=list)
    """Why groups got no rewards, one per failed group: raised once the call's counts are logged."""
    reasoning: dict[int, list[str]] = field(default_factory=dict)
    """The judge's reasoning behind a group's rewards (one per verdict), by `id(group)`, where the transport
    has it: what the audit records beside each audited sample."""


class GroupedJudgeReward(ABC):
    """Rewards from a judge for G completions per prompt, with TRL's reward signature (synchronous).

    Args:
        mode: "listwise", "pairwise" (needs `reference_column`) or "tournament" (see `judge.reward`).
        tournament: the tournament format when `mode="tournament"` ("round_robin" or "knockout").
        reference_column: dataset column with each prompt's reference answer (pairwise judging, and
            groups of one completion).
        image_columns: dataset columns images are read from, first present wins.
        max_options: the judge's option limit; larger listwise groups become knock-out tournaments.
        retry: retries and back-off of a failed judging call (`judge.reward.wire.RetryPolicy`).
        image_root: folder relative image paths are read from.
        cap_at_reference: pairwise, pay `min(1, 2 p)` for the judge's probability `p` that a completion beats
            the reference: one the judge ties with the reference earns the full reward and one it prefers
            earns no more, so GRPO gains nothing by moving toward answers that fool the judge past the reference.
        name: TRL logs the reward as `rewards/<name>/mean` and the counters as `<name>/…`.
        audit: an `AuditConfig` (or its mapping) to audit a seeded share of the judged groups beside the reward
            (`judge.reward.audit`): the figures are logged as `<name>/audit/…`, the samples go to its `path`.
    """

    def __init__(
        self,
        *,
        mode: str = "listwise",
        tournament: str = "knockout",
        reference_column: str | None = None,
        image_columns: Sequence[str] = ("images", "image"),
        max_options: int = 8,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        image_root: str | None = None,
        cap_at_reference: bool = False,
        name: str = "judge",
        audit: AuditConfig | Mapping[str, Any] | None = None,
    ) -> None:
        check_reward_options(mode, tournament, reference_column, max_options, cap_at_reference)
        self.audit_config = AuditConfig.from_value(dict(audit) if isinstance(audit, Mapping) else audit)
        self.cap_at_reference = cap_at_reference
        self.mode, self.tournament = mode, tournament
        self.reference_column = reference_column
        self.image_columns = tuple(image_columns)
        self.max_options = max_options
        self.retry = RetryPolicy.from_dict(dict(retry) if isinstance(retry, Mapping) else retry or RetryPolicy())
        self.image_root = image_root
        self.__name__ = name  # TRL names the reward's logs after it
        self.totals = {"calls": 0, "groups": 0, "failed_groups": 0, "failed": 0, "unscored": 0, "retries": 0}
        """Running counts over this object's life (completions for `failed` / `unscored`)."""
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()  # guards the lazy runtime of a transport
        self._warned: set[str] = set()
        self._rng = random.Random()  # jitter must differ between processes, so it is not seeded
        self._audit: RewardAudit | None = None

    # Picklable configuration: a transport's clients, loops and models are remade where it lands.
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") or k == "__name__"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    # -- TRL entry points --------------------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """One reward per completion, in input order; `None` where the judge failed or could not rank."""
        start, call = time.perf_counter(), RewardCall()
        groups = self._group(prompts, completions, kwargs)
        results = self._judge_groups(groups, call)
        return self._finish(len(completions), groups, results, call, start, kwargs)

    async def acall(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The coroutine form of `__call__` (TRL awaits it on its own event loop)."""
        start, call = time.perf_counter(), RewardCall()
        groups = self._group(prompts, completions, kwargs)
        results = await self._ajudge_groups(groups, call)
        return self._finish(len(completions), groups, results, call, start, kwargs)

    @abstractmethod
    def _judge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        """The transport's judging of planned groups (a group without a request stays None)."""

    @abstractmethod
    async def _ajudge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        """The same, awaitable on a running event loop."""

    # -- grouping and planning ---------------------------------------------------------------------------

    def _column(self, kwargs: Mapping[str, Any], name: str | None, n: int) -> Sequence[Any] | None:
        values = kwargs.get(name) if name else None
        if values is None:
            return None
        if len(values) != n:
            raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
        return values

    def _group(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[RewardGroup]:
        """Read TRL's arguments into samples and hand them to the shared planner (`group_samples`)."""
        n = len(completions)
        if len(prompts) != n:
            raise ValueError(f"got {len(prompts)} prompts for {n} completions; TRL passes one prompt per completion")
        references = self._column(kwargs, self.reference_column, n)
        image_columns = [c for c in (self._column(kwargs, name, n) for name in self.image_columns) if c is not None]
        images: list[list[Any]] = []
        for i, prompt in enumerate(prompts):
            if image_columns:
                value = image_columns[0][i]
                images.append([] if value is None else list(value) if isinstance(value, (list, tuple)) else [value])
            else:
                images.append(prompt_images(prompt))
        return group_samples(
            [prompt_text(p) for p in prompts],
            [completion_text(c) for c in completions],
            images=images,
            image_keys=[tuple(image_digest(im) for im in own) for own in images],
            references=None if references is None else [None if r is None else str(r) for r in references],
            mode=self.mode,
            tournament=self.tournament,
            max_options=self.max_options,
        )

    # -- counting and logging ----------------------------------------------------------------------------

    def _finish(
        self,
        n: int,
        groups: list[RewardGroup],
        results: GroupResults,
        call: RewardCall,
        start: float,
        kwargs: Mapping[str, Any],
    ) -> list[float | None]:
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if self.cap_at_reference:
            results = [capped(group, result) for group, result in zip(groups, results)]
        rewards = scatter(n, groups, results)
        failed_groups = failed = unscored = 0
        for group, result in zip(groups, results):
            if group.request is None:
                unscored += len(group.indices)
            elif result is None:
                failed_groups += 1
                failed += len(group.indices)
            else:
                unscored += sum(r is None for r in result)  # verdicts the judge did not give
        if failed_groups:
            logger.error(
                "%s: %d of %d groups got no reward (%d retries in this call, last error: %s)",
                self.__name__, failed_groups, len(groups), call.retries, call.errors[-1] if call.errors else "?",
            )  # fmt: skip
        if unscored and "unscored" not in self._warned:
            self._warned.add("unscored")
            logger.warning(
                "%s: %d completions got reward None (unscored): a lone completion (or pairwise mode) needs a "
                "reference (set reference_column, or sample num_generations >= 2 per prompt), or the judge's "
                "verdict did not parse",
                self.__name__, unscored,
            )  # fmt: skip
        for key, value in (
            ("calls", 1), ("groups", len(groups)), ("failed_groups", failed_groups), ("failed", failed),
            ("unscored", unscored), ("retries", call.retries),
        ):  # fmt: skip
            self.totals[key] += value
        if log_metric is not None and n:
            name = self.__name__
            log_metric(f"{name}/failed_frac", failed / n)
            log_metric(f"{name}/failed_groups", float(failed_groups))
            log_metric(f"{name}/unscored_frac", unscored / n)
            log_metric(f"{name}/retries", float(call.retries))
            log_metric(f"{name}/latency_s", time.perf_counter() - start)
        if self.audit_config is not None and self.audit_config.enabled:
            self._submit_audit(groups, results, call, kwargs)
        if any(isinstance(failure, RewardRefused) for failure in call.failures):
            raise _summary(call, failed_groups, len(groups), self.__name__)
        return rewards

    # -- the audit (judge.reward.audit): beside the reward, never in its way ------------------------------

    @property
    def audit(self) -> RewardAudit | None:
        """This reward's audit (made on first use, in the process that rewards), or None without `audit`."""
        if self.audit_config is None or not self.audit_config.enabled:
            return None
        with self._lock:
            if self._audit is None:
                self._audit = RewardAudit(self.audit_config, rejudge=self._rejudge)
            return self._audit

    def _rejudge(self, prompt: str, images: Sequence[Any], completions: Sequence[str], reference: str | None) -> list:
        """The `self` auditor's second opinion: the group judged again by this reward's own judge."""
        groups = group_samples(
            [prompt] * len(completions),
            list(completions),
            images=[list(images)] * len(completions),
            references=[reference] * len(completions),
            mode=self.mode,
            tournament=self.tournament,
            max_options=self.max_options,
        )
        return scatter(len(completions), groups, self._judge_groups(groups, RewardCall()))

    def _submit_audit(
        self, groups: list[RewardGroup], results: GroupResults, call: RewardCall, kwargs: Mapping[str, Any]
    ) -> None:
        audit = self.audit
        assert audit is not None
        config = audit.config
        column = config.answer_column or self.reference_column
        gold = kwargs.get(column) if column else None
        state = kwargs.get("trainer_state")
        step = int(state.global_step) if state is not None else self.totals["calls"] - 1
        audited = [
            AuditedGroup(
                prompt=group.prompt,
                completions=list(group.responses),
                rewards=list(result),
                reference=None if gold is None else _text(gold[group.indices[0]]),
                images=list(group.images),
                reasoning=call.reasoning.get(id(group)),
                pairwise=group.request is not None and group.request.mode == "pairwise",
            )
            for group, result in zip(groups, results)
            if result is not None
        ]
        audit.submit(audited, step)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for key, value in audit.metrics(f"{self.__name__}/audit").items():
                log_metric(key, value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def capped(group: RewardGroup, rewards: list[float | None] | None) -> list[float | None] | None:
    """A group's pairwise rewards capped at the reference's own (`cap_at_reference`): `min(1, 2 p)`."""
    if rewards is None or group.request is None or group.request.mode != "pairwise":
        return rewards
    return [None if r is None else min(1.0, 2.0 * r) for r in rewards]


def _summary(call: RewardCall, failed_groups: int, groups: int, name: str) -> RewardError:
    """The error a call raises for refused input, with the server's message."""
    first = next((f for f in call.failures if isinstance(f, RewardRefused)), None) or (
        call.failures[0] if call.failures else RewardError(call.errors[-1] if call.errors else "no detail")
    )
    message = f"{name}: {failed_groups} of {groups} groups got no reward ({call.retries} retries): {first}"
    error = RewardRefused(message, first.status) if isinstance(first, RewardRefused) else type(first)(message)
    error.__cause__ = first
    return error
