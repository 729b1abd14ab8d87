"""The reward audit on the server (`ServerConfig.audit`): a seeded share of the judged groups scored again by
an auditor beside the reward (`judge.reward.audit.RewardAudit`), its figures on `/metrics`.

After a request's rewards are computed the service hands its judged groups over (`ServerAudit.reward` for a
`/v1/reward` request, `ServerAudit.samples` for a judged `/get_reward` group) with the step, a running count
of judged reward requests (a `/get_reward` group counts once). The hand-over returns at once: the audit draws
its share and queues it for its own thread, and any failure on the way is logged once and counted
(`mrjudge_audit_submit_errors_total`), never the request's. The gold key is the request's `reference` (a
`/get_reward` label's); the images are the references the client sent (`audit_ref`), never decoded pixels.

    audit = ServerAudit(ServerConfig(audit={"auditor": "answer_key", "path": "runs/serve/audit.jsonl"}), metrics)
    audit.reward(request, result, body.images)     # after the rewards: returns at once
    await audit.close(timeout_s=1.5)               # at shutdown: the last windows closed and written
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit
from judge.reward.planner import RewardGroup
from judge.reward.scoring import RewardRequest, RewardResult
from reward_server.config import ServerConfig
from reward_server.metrics import Metrics
from reward_server.wire_images import audit_ref

__all__ = ["ServerAudit"]

log = logging.getLogger("mrjudge.server")


class ServerAudit:
    """One server's reward audit: the step count, the safe hand-over, the figures on `/metrics`, the close.

    Args:
        server: the server's config: `audit` (checked for a server by `server_audit`), and where image paths
            are read from.
        metrics: the server's metrics, which get the `mrjudge_audit_*` gauges.
    """

    def __init__(self, server: ServerConfig, metrics: Metrics) -> None:
        if not isinstance(server.audit, AuditConfig):
            raise ValueError("ServerAudit needs a ServerConfig with an audit")
        self.audit = RewardAudit(server.audit)  # the auditor built now: a check that cannot be imported fails here
        self.allow_local_images = server.allow_local_images
        self.metrics = metrics
        self.steps = 0
        """Judged reward requests handed over so far (each one step; touched from the event loop only)."""
        self._warned = False
        metrics.watch_audit(self.audit.metrics)

    def describe(self) -> str:
        c = self.audit.config
        where = f", samples to {c.path}" if c.path else ""
        return (
            f"reward audit on: {self.audit.auditor.name} scores {100 * c.audit_rate:g} % of the judged groups (seed "
            f"{c.seed}), figures per {c.window} requests on /metrics (mrjudge_audit_*){where}"
        )

    # -- the hand-over: after the rewards, never in their way ----------------------------------------------

    def reward(self, request: RewardRequest, result: RewardResult, images: Sequence[str] | None) -> None:
        """A judged `/v1/reward` request: its group, with the images as the client sent them (`images`)."""
        self._hand_over(lambda: [self._group(request, request.mode == "pairwise", result, images or [])])

    def samples(
        self, refs: Sequence[Sequence[str]], groups: Sequence[RewardGroup], results: Sequence[RewardResult]
    ) -> None:
        """A judged `/get_reward` submission: its planned `groups` (indices into the samples, whose image
        references are `refs`) and their results."""

        def pairwise(group: RewardGroup) -> bool:
            return group.request is not None and group.request.mode == "pairwise"

        self._hand_over(
            lambda: [
                self._group(group, pairwise(group), result, refs[group.indices[0]])
                for group, result in zip(groups, results)
            ]
        )

    def _group(
        self, asked: RewardRequest | RewardGroup, pairwise: bool, result: RewardResult, images: Sequence[str]
    ) -> AuditedGroup:
        """One judged group as the audit takes it: `asked` holds its prompt, responses and reference."""
        return AuditedGroup(
            prompt=asked.prompt,
            completions=list(asked.responses),
            rewards=list(result.rewards),
            reference=asked.reference,
            images=self._refs(images),
            reasoning=[v.reasoning for v in result.verdicts],
            pairwise=pairwise,
        )

    def _refs(self, images: Sequence[str]) -> list[str]:
        return [audit_ref(ref, self.allow_local_images) if isinstance(ref, str) else ref for ref in images]

    def _hand_over(self, groups: Callable[[], list[AuditedGroup]]) -> None:
        step, self.steps = self.steps, self.steps + 1
        try:
            self.audit.submit(groups(), step)
        except Exception:  # noqa: BLE001 - the audit costs a counter, never a request
            self.metrics.audit_submit_failed()
            if not self._warned:
                self._warned = True
                log.warning(
                    "reward audit: a judged group could not be handed to the audit; the request was answered, "
                    "and further failures are only counted (mrjudge_audit_submit_errors_total)",
                    exc_info=True,
                )

    # -- shutdown ---------------------------------------------------------------------------------------

    async def close(self, timeout_s: float) -> None:
        """Audit what is queued for up to `timeout_s`, close the open windows (their figures written), stop the
        auditor's thread; an auditor still busy then is left (a daemon thread) and said so."""
        closer = threading.Thread(target=self._close, args=(timeout_s,), name="reward-audit-close", daemon=True)
        closer.start()
        deadline = time.monotonic() + timeout_s + 0.25
        while closer.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if closer.is_alive():
            log.warning(
                "reward audit: the auditor had not finished %g s into the shutdown; the groups still queued are "
                "not audited",
                timeout_s,
            )
        try:
            log.info("%s", summary_line(self.audit.summary()))
        except Exception:  # noqa: BLE001 - a summary line must not stop the shutdown
            log.warning("reward audit: no summary line", exc_info=True)

    def _close(self, timeout_s: float) -> None:
        self.audit.flush(timeout=timeout_s)
        self.audit.close()


def summary_line(summary: dict[str, Any]) -> str:
    """The audit's end-of-run line: counts, the last window's figures, the alarm.

    >>> print(summary_line({"auditor": "answer_key", "groups": 40, "audited": 2, "dropped": 0,
    ...     "auditor_errors": 0, "windows": [{"agreement": 0.5, "gold_mean": 1.0}], "alarm": {"fired": False}}))
    reward audit (answer_key): 40 groups, 2 audited, 0 dropped, 0 auditor errors; last window: agreement 0.50,
    gold_mean 1.00; no alarm
    """
    counts = (
        f"{summary['groups']} groups, {summary['audited']} audited, {summary['dropped']} dropped, "
        f"{summary['auditor_errors']} auditor errors"
    )
    line = f"reward audit ({summary['auditor']}): {counts}"
    if summary["windows"]:
        last = summary["windows"][-1]
        keys = ("agreement", "overpay", "underpay", "judge_mean", "gold_mean")
        figures = ", ".join(f"{k} {last[k]:.2f}" for k in keys if last.get(k) is not None)
        line += f"; last window: {figures or 'nothing to measure'}"
    alarm = summary["alarm"]
    return line + (f"; ALARM at step {alarm['step']}: {alarm['reason']}" if alarm["fired"] else "; no alarm")
