"""The reward audit in a TRL run: the trainer's KL to the audit, and the guard's `stop` and `keep-best`.

`judge.reward.audit` scores a seeded share of the judge's groups beside the reward and fires an alarm when
the audited gold falls while the judge's reward rises (or overpay climbs). This callback is the trainer's
side of it, added by `training.policy.build_policy_trainer` for every judge reward that audits:

- it hands the KL TRL logs to the audit, so each window knows how far the policy has moved (the
  over-optimisation curve is drawn against the step and against the KL, as Gao et al. draw it);
- `guard: stop` ends training at the step after the alarm, as early stopping does;
- `guard: keep-best` saves the start policy as `checkpoint-0` when training begins and a checkpoint at the end of
  every audit window (after waiting, up to `SETTLE_TIMEOUT_S`, for that window's audits: the one wait the audit
  puts on a run), and marks the checkpoint at the *start* of the window with the best audited gold:
  `state.best_model_checkpoint` (so the Trainer's rotation keeps it, as it keeps the best checkpoint of
  `metric_for_best_model`) and `audit_best.json` in the output folder. A window's answers were written by the
  policies of its own steps, the first of them that checkpoint's; the checkpoint saved after the window has
  taken `window` more updates that no audited answer has seen. So when the gold only falls from the first
  window on, keep-best keeps the start policy, as early stopping keeps the initial model when the validation
  metric never improves (not with sharded weights, FSDP or ZeRO-3, which only the Trainer's own save gathers);
- at the end it writes `audit_summary.json` (every window, the alarm, the best window) beside the checkpoints.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import is_deepspeed_zero3_enabled

from judge.reward.audit import RewardAudit

__all__ = ["RewardAuditCallback", "best_checkpoint"]

logger = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 30.0
"""keep-best: the longest a window's end waits for its audits (a slower auditor's window closes unmarked)."""


def best_checkpoint(output_dir: str | Path, step: int) -> Path:
    """The checkpoint the Trainer writes after `step` optimizer steps."""
    return Path(output_dir) / f"checkpoint-{step}"


class RewardAuditCallback(TrainerCallback):
    def __init__(self, audit: RewardAudit, output_dir: str | Path) -> None:
        self.audit, self.output_dir = audit, Path(output_dir)
        self.stopped_at: int | None = None
        self.marked: dict[str, Any] | None = None

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.audit.config.guard == "keep-best" and state.global_step == 0 and args.should_save:
            # The policy that writes the first window's answers: the one keep-best keeps if the gold only falls.
            if args.fsdp or is_deepspeed_zero3_enabled():  # sharded weights: only the Trainer's own save gathers them
                logger.warning("reward audit keep-best: no checkpoint-0 with sharded weights (FSDP, ZeRO-3), so the "
                               "start policy cannot be kept; the best checkpoint after it still can")  # fmt: skip
                return
            start = best_checkpoint(self.output_dir, 0)
            model.save_pretrained(start)
            if processing_class is not None:
                processing_class.save_pretrained(start)
            state.save_to_json(str(start / "trainer_state.json"))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "kl" in logs:
            self.audit.note_kl(state.global_step, logs["kl"])

    def on_step_end(self, args, state, control, **kwargs):
        guard, window = self.audit.config.guard, self.audit.config.window
        if guard == "stop" and self.audit.alarm is not None and self.stopped_at is None:
            self.stopped_at = state.global_step
            logger.warning("reward audit: stopping at step %d (%s)", state.global_step, self.audit.alarm.reason)
            control.should_training_stop = True
        if guard == "keep-best" and state.global_step % window == 0:
            # The window that just ended is audited and the best one marked before this step's checkpoint is
            # saved, so the Trainer's rotation after that save keeps the marked one (the one wait the audit puts
            # on a run).
            self.audit.settle(state.global_step // window - 1, timeout=SETTLE_TIMEOUT_S)
            self._mark(state)
            control.should_save = True  # one checkpoint per audit window, to keep the best of
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.audit.flush(timeout=60)
        if self.audit.config.guard == "keep-best":
            self._mark(state)
        summary = {**self.audit.summary(), "stopped_at": self.stopped_at, "kept": self.marked}
        (self.output_dir / "audit_summary.json").write_text(json.dumps(summary, indent=1))

    def _mark(self, state) -> None:
        """Point the Trainer at the checkpoint at the start of the best audited window, if it is on disk."""
        best = self.audit.best
        if best is None:
            return
        step = best.window * self.audit.config.window
        path = best_checkpoint(self.output_dir, step)
        if not path.is_dir():
            return
        state.best_model_checkpoint, state.best_metric = str(path), best.gold_mean
        self.marked = {"checkpoint": str(path), "step": step, "window": best.window, "gold_mean": best.gold_mean}
        (self.output_dir / "audit_best.json").write_text(json.dumps(self.marked, indent=1))
