"""The judge as a TRL reward function: TRL's `(prompts, completions, **columns)` in, one reward per completion.

- `base`: what every transport shares (TRL's arguments read, grouped and planned; metrics; errors);
- `http`: `HttpJudgeReward` / `AsyncHttpJudgeReward`, the judge behind `mrjudge serve`;
- `local`: `InProcessJudgeReward`, the judge in this process;
- `spec`: a recipe's `reward: {transport: http | in_process, …}` as data, built into one of the above;
- `deprecated`: the single class of before, as factories that warn.

The layer below (`judge.reward.planner`, `scoring`, `inputs`, `wire`) is the one the server and the verl /
OpenRLHF files use too; see `judge.reward`.
"""

from __future__ import annotations

from judge.reward.trl.base import GroupedJudgeReward
from judge.reward.trl.http import AsyncHttpJudgeReward, HttpJudgeReward, reward_endpoint
from judge.reward.trl.local import InProcessJudgeReward
from judge.reward.trl.spec import HttpRewardSpec, InProcessRewardSpec, RewardSpec, reward_spec

__all__ = [
    "AsyncHttpJudgeReward",
    "GroupedJudgeReward",
    "HttpJudgeReward",
    "HttpRewardSpec",
    "InProcessJudgeReward",
    "InProcessRewardSpec",
    "RewardSpec",
    "reward_endpoint",
    "reward_spec",
]
