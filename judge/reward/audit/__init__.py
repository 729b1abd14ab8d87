"""An audit on the reward path: a seeded share of the judged groups scored again by an auditor, beside the
reward, so that a run sees when its policy has started to earn the judge's reward without earning the gold.

A policy trained against a judge learns the judge's blind spots (Gao et al., 2022: the proxy reward rises
while the gold one peaks and falls). TRL, verl and OpenRLHF log the reward they optimise and check it against
nothing; every reward path of this toolkit (the TRL reward functions, the reward server, the verl and
OpenRLHF files) can carry this audit, with one setting (`AuditConfig`):

    reward = AsyncHttpJudgeReward(url, reference_column="answer", audit={"auditor": "answer_key"})

One idea per module:

- `config`: `AuditConfig` (the auditor, the rate, the window, the guard), loadable from YAML;
- `auditors`: who scores the gold: `answer_key` (exact match, or a user's `module:function`), `judge_url` (a
  second, stronger judge behind `/v1/reward`) and `self` (the same judge asked again: instability only);
- `figures`: a window's figures (agreement, overpay, underpay, mean judge and gold rewards) and their trend;
- `guard`: the alarm (gold falling while the judge's reward rises, or overpay rising past a margin) and what
  it asks for (`warn`, `stop`, `keep-best`);
- `runner`: `RewardAudit`, which selects the seeded share, runs the auditor on a bounded queue off the reward
  path (work it cannot keep up with is dropped and counted), writes `audit.jsonl` and `audit_windows.jsonl`,
  and keeps the figures the integrations log.

The audit never delays or changes a reward: the trainer gets the same rewards with it on or off.
"""

from judge.reward.audit.auditors import AUDITORS, Auditor, build_auditor
from judge.reward.audit.config import GUARD_ACTIONS, AuditConfig
from judge.reward.audit.figures import WindowFigures, slope, window_figures
from judge.reward.audit.guard import Alarm, Guard
from judge.reward.audit.runner import AuditedGroup, RewardAudit

__all__ = [
    "AUDITORS",
    "GUARD_ACTIONS",
    "Alarm",
    "AuditConfig",
    "AuditedGroup",
    "Auditor",
    "Guard",
    "RewardAudit",
    "WindowFigures",
    "build_auditor",
    "slope",
    "window_figures",
]
