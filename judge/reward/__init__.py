"""The judge as a reward: one planner and scorer for every path, and the TRL reward functions on top of it.

Two layers, the lower one shared by everything that rewards with the judge:

- **planning and scoring** (the server, `judge.integrations.verl` / `openrlhf` and the TRL classes all use
  these): `inputs` reads what RL frameworks hand a reward function into samples; `planner` groups samples
  and plans each group (listwise, pairwise, tournament); `scoring` judges the planned groups
  (`compute_rewards`); `wire` is what every HTTP client of the reward server shares (environment names,
  the retry policy, replicas, the two errors), standard library only.
- **TRL reward functions** (`judge.reward.trl`): `base` (TRL's arguments in, grouping, metrics out), one
  class per transport (`http`, `local`), and `spec`, the recipe's `reward: {transport: …}` as data.

The TRL classes are this package's public surface:

    from judge.reward import AsyncHttpJudgeReward, InProcessJudgeReward

    reward = AsyncHttpJudgeReward("http://judge-node:8000")                  # `mrjudge serve`, over HTTP
    reward = InProcessJudgeReward("runs/judge", reference_column="answer")   # a judge in this process
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=prompts)     # TRL's reward signature

A recipe names one with a nested spec (`judge.reward.trl.spec`: `reward: {transport: http, url: …}`). One
call (`prompts`, `completions`, plus the dataset's columns as keyword lists, as TRL passes them):

1. **Group.** Completions are grouped by (prompt text, images, reference): the G completions TRL samples
   for one prompt form one group. The prompt text is a string prompt, or the text of the user turns of a
   conversational one; images come from the dataset's `images` / `image` column (or, failing that, from
   image parts inside the prompt messages); the reference from `reference_column` when given.
2. **Plan.** Grouping and planning are the shared planner's (`judge.reward.planner.group_samples`, the same
   rules as the server and the verl / OpenRLHF integrations). A group is judged in `mode` (`listwise`: all
   completions as one multiple-choice question; `pairwise`: each against the reference; `tournament`),
   with two automatic changes:
   - a group larger than `max_options` in listwise mode becomes a `tournament` (default knock-out; the judge
     shows at most `max_options` candidates at once; knock-out costs G - 1 pairwise games, round-robin
     G(G - 1)/2);
   - a group of one completion cannot be ranked: it is judged pairwise against its reference when there
     is one, and gets `None` otherwise (likewise any group in pairwise mode whose reference is missing).
   A verdict the judge could not parse gives `None` too (counted in `judge/unscored_frac`), never 1/k.
3. **Judge.** Over HTTP, one `POST /v1/reward` per group, all groups concurrently (`max_concurrency` in
   flight per server, images as PNG data URLs), each group whole to one of the servers `url` names (the one
   with the fewest requests outstanding; `judge.reward.wire.Replicas`); in process, all groups in one
   `judge.reward.scoring.compute_rewards` batch (the same engine the server runs).
4. **Retry, then no signal; refused input raises.** Failures are retried as `retry` says
   (`judge.reward.wire.RetryPolicy`: connection errors, timeouts, 408, 429 and 5xx, with exponential back-off
   and jitter, a 503's `Retry-After` honoured; with several servers the next one at once, a failed one skipped
   for a cool-off), then the group's rewards are `None`: a run rides out a judge restart. A request refused
   for its input (a missing or unreadable image, 413, 415, 422, a wrong key) raises `RewardRefused` with the
   server's message at once. A reward is never made up for a group that was not judged: `None` (TRL: NaN,
   out of the baseline, zero advantage). Failures, retries and latency are counted through TRL's
   `log_metric` hook before the call returns or raises (`judge/failed_frac`, `judge/failed_groups`,
   `judge/unscored_frac`, `judge/retries`, `judge/latency_s`; TRL averages them per logging step over
   processes), and in `totals` for callers outside TRL.

**Groups split across processes.** TRL places a prompt's G completions side by side and gives each process
a contiguous slice of `per_device_train_batch_size × steps_per_generation` of them; when that is not a
multiple of G, a group straddles two processes. The reward function on each process sees only its part and
judges it as a group of its own: listwise probabilities are then shared among fewer completions (a
different scale from the other part's), and a part of one completion is judged pairwise or gets `None`.
TRL gathers all rewards before normalising per group, so training runs, on a noisier signal. Keep that
product a multiple of G (`training.policy` refuses anything else in listwise and tournament mode);
pairwise mode is unaffected, since each completion is judged on its own.
"""

from __future__ import annotations

from judge.reward.trl import (
    AsyncHttpJudgeReward,
    GroupedJudgeReward,
    HttpJudgeReward,
    HttpRewardSpec,
    InProcessJudgeReward,
    InProcessRewardSpec,
    reward_endpoint,
    reward_spec,
)
from judge.reward.trl.deprecated import AsyncJudgeRewardFunction, JudgeRewardFunction
from judge.reward.wire import API_KEY_ENV, RetryPolicy

__all__ = [
    "API_KEY_ENV",
    "AsyncHttpJudgeReward",
    "AsyncJudgeRewardFunction",
    "GroupedJudgeReward",
    "HttpJudgeReward",
    "HttpRewardSpec",
    "InProcessJudgeReward",
    "InProcessRewardSpec",
    "JudgeRewardFunction",
    "RetryPolicy",
    "reward_endpoint",
    "reward_spec",
]
