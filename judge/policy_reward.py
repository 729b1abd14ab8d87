"""Moved: the judge's TRL reward functions are `judge.reward` now (`from judge.reward import HttpJudgeReward`).

This name stays so that code and recipes written against it keep working; it warns once on import.
"""

from __future__ import annotations

import warnings

from judge.reward import *  # noqa: F403
from judge.reward import __all__  # noqa: F401

warnings.warn("judge.policy_reward is now judge.reward", FutureWarning, stacklevel=2)
