"""The judge as the reward in RL frameworks that load a reward function from a file path.

- `openrlhf.py`: OpenRLHF's `--reward.remote_url /path/to/openrlhf.py` route (`reward_func`).
- `verl.py`: verl's `custom_reward_function.path` / `.name` (`compute_score` per sample, `compute_score_batch`
  for the batch reward manager).

Both find the reward server (`mrjudge serve`) from `$MRJUDGE_REWARD_URL` and its key from
`$MRJUDGE_SERVER_API_KEY`, and retry as `judge.reward_wire` says (the names and the policy every reward
client shares); `mrjudge serve` prints the exact lines on start. See docs/rewards.md.
"""
