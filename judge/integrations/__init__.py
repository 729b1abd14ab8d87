"""The judge as the reward in RL frameworks that load a reward function from a file path.

- `openrlhf.py`: OpenRLHF's `--reward.remote_url /path/to/openrlhf.py` route (`reward_func`; read and run
  against OpenRLHF 0.11.2).
- `verl.py`: verl's custom reward function. verl ≥ 0.7 (0.9.1 read and run): `reward.custom_reward_function.path`
  / `.name=compute_score` (async, one sample per call, grouped on the server by `group_size`); verl ≤ 0.6:
  `custom_reward_function.name=compute_score_batch` with `reward_model.reward_manager=batch`.

Both find the reward server (`mrjudge serve`) from `$MRJUDGE_REWARD_URL` and its key from
`$MRJUDGE_SERVER_API_KEY`, retry as `judge.reward.wire` says (the names, the policy and the errors every
reward client shares), and raise when a reward cannot be had; `mrjudge serve` prints the exact lines on
start. See docs/rewards.md.
"""
