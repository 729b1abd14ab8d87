"""A GRPO run that survives its judge (`benchmarks/judge_outage.py`): a real TRL run of a tiny text policy whose
reward servers (subprocesses, the rule judge) lose a replica to SIGKILL after step 2 and get it back, on the same
port, after step 4.

With two replicas the groups of the outage go to the other one at once and every reward is the judge's; with
the only replica they are retried within the reward's bound and then given None (counted, logged), and once it is
back the rewards are the judge's again. Either way the run completes every step, never a crash or a hang.

Each takes 10-20 s on 2 shared cores (11.5 and 10.2 s at load average ~2, 19.5 and 17 s at ~4), most of it
replica starts (~5 s each: the server's warm-up imports transformers' image code).
"""

from __future__ import annotations

from benchmarks.judge_outage import COMPLETIONS_PER_STEP, RETRY, run_scenario


def test_two_replicas_one_killed_and_restarted_mid_run(tiny_lm_dir, world, tmp_path):
    run = run_scenario("two_replicas", tiny_lm_dir, world, tmp_path, max_steps=6, kill_at=2, restart_at=4)
    assert run["steps_completed"] == run["max_steps"] == 6
    assert run["unscored_during_outage"] == 0 and run["failed_counted"] == 0  # the other replica took the groups
    assert run["failed_frac_by_step"] == [0.0] * 6 and run["rewards_after_restart_scored"]
    assert run["requests_per_replica"][1] > run["requests_per_replica"][0] > 0
    assert run["restarted_replica_answered"] > 0  # tried again after its cool-off, and judging again


def test_the_only_replica_killed_and_restarted_mid_run(tiny_lm_dir, world, tmp_path):
    run = run_scenario("one_replica", tiny_lm_dir, world, tmp_path, max_steps=6, kill_at=2, restart_at=4)
    assert run["steps_completed"] == run["max_steps"] == 6
    # Steps 3 and 4: every group retried (1 + max_retries tries), then None, counted by the reward and in TRL's logs.
    assert run["failed_frac_by_step"] == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert run["unscored_during_outage"] == run["failed_counted"] == 2 * COMPLETIONS_PER_STEP and run["counted"]
    assert run["retries"] == 2 * 2 * RETRY.max_retries  # 2 steps x 2 groups
    # Bounded by the back-offs (a killed server refuses at once), plus one step; 2 s of slack for a shared machine.
    bound = run["retry_bound_s"] + run["max_step_s_outside_outage"]
    assert run["max_step_s_during_outage"] <= bound + 2.0, run["step_s"]
    assert run["rewards_after_restart_scored"] and run["restarted_replica_answered"] == 2 * 2  # 2 steps x 2 groups
