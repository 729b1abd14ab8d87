"""A GRPO run that survives its judge: a reward-server replica SIGKILLed and restarted in the middle of the run.

Each scenario is a real TRL GRPO run (`training.policy.build_policy_trainer`: TRL's `GRPOTrainer` with the
judge reward over HTTP, `AsyncHttpJudgeReward`) of a tiny text policy from `tiny_world.model`'s factory on the
synthetic world's prompts (8 completions a step: 2 prompts x 4). The judge is the instant rule judge
(`tiny_world.rule_judge`), served by `reward_server.run.run_server` (what `mrjudge serve` runs) in
subprocesses, one per replica:

- `two_replicas`: `reward.url` names two servers. Replica 0 is killed with SIGKILL at the end of step
  `--kill-at` and started again on its port at the end of step `--restart-at`: the groups of the steps between
  go to replica 1 at once (a refused connection is passed over), and replica 0 is tried again after its
  cool-off (`reward.replica_cooloff_s`) once it is back.
- `one_replica`: the only server, killed and restarted at the same steps: each group of an outage step is
  retried within `RETRY` and then gets `None` (TRL: no advantage), counted in `judge/failed_frac` and the
  reward's `totals`; after the restart the groups are judged again.

The outage steps are `kill_at + 1 .. restart_at` (the restart itself, a new process coming up, happens between
steps and is not a step's time). A SIGKILLed process refuses connections at once, so what an outage step can
add is the reward's back-offs: `retry_bound_s` = sum over the retries of min(1.5 x backoff_s x 2^i,
max_backoff_s) (`RetryPolicy.max_wait_s`); the documented bound of a step is that plus one ordinary step.

    python -m benchmarks.judge_outage [--max-steps 10] [--kill-at 2] [--restart-at 5]
    python -m benchmarks.judge_outage --scenarios one_replica

Run time: 38 s on 2 shared cores (load average 1-3): each replica start takes ~5 s (the server's warm-up
imports transformers' image code), the 10 steps under a second each.

Prints one JSON line: `{"benchmark": "judge_outage", ..., "runs": {scenario: {...}}}`; per run:
`steps_completed` and `max_steps`; `outage_steps` [first, last]; `unscored_during_outage` (completions that
got None in the outage steps, from TRL's logged `judge/failed_frac`) and `failed_counted` (the reward's own
count, `totals["failed"]`), `counted` (the two agree); `rewards_after_restart_scored` (every completion of every
step after the restart scored: failed and unscored fractions 0, the logged mean reward finite);
`failed_frac_by_step`; `step_s` per step, `max_step_s_during_outage`, `max_step_s_outside_outage`,
`retry_bound_s` and `within_bound` (max_step_s_during_outage <= retry_bound_s + max_step_s_outside_outage);
`requests_per_replica` (tries the reward sent to each) and `restarted_replica_answered` (reward requests the
restarted replica answered, from its `/metrics`); `seconds`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.kit import ROOT, emit, free_port, start_server, stop_server
from judge.reward.wire import RetryPolicy

RETRY = RetryPolicy(max_retries=2, backoff_s=0.25, max_backoff_s=1.0, timeout_s=10.0)
"""The reward's retries in both runs: a group whose server is gone waits at most `RETRY.max_wait_s()`."""
SCENARIOS = ("two_replicas", "one_replica")
COMPLETIONS_PER_STEP = 8


# -- a replica: the rule judge behind the reward server, in its own process --------------------------------


def serve(port: int) -> None:
    """One replica, as `mrjudge serve` runs a judge (run_server: uvicorn, SIGTERM drain, log summaries)."""
    from judge.judging import Judge, JudgeConfig
    from reward_server import ServerConfig, create_app
    from reward_server.run import run_server
    from tiny_world.rule_judge import RuleJudgeBackend

    config = ServerConfig(port=port, shutdown_grace_s=3.0)
    judge = Judge(RuleJudgeBackend(), JudgeConfig(orders=2, batch_size=64))
    run_server(create_app(judge, config), config, log_level="warning")


class Replica:
    """A reward server in a subprocess on a fixed port, that can be killed and started again there."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> float:
        """Start it and wait for `/health`; returns the seconds that took."""
        begin = time.perf_counter()
        command = [sys.executable, "-m", "benchmarks.judge_outage", "--serve", str(self.port)]
        self.process = start_server(command, port=self.port, timeout_s=timeout_s)
        return time.perf_counter() - begin

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye; connections in flight are reset, new ones refused."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def answered(self) -> int:
        """`/v1/reward` requests this process answered 200 (since its last start)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        match = re.search(r'^mrjudge_requests_total\{endpoint="/v1/reward",status="200"\} (\S+)', text, re.M)
        return int(float(match.group(1))) if match else 0

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process, timeout_s=30)


# -- one run ---------------------------------------------------------------------------------------------------


def outage_callback(replica: Replica, kill_at: int, restart_at: int) -> Any:
    """A TrainerCallback that times each step and kills / restarts `replica` between steps."""
    from transformers import TrainerCallback

    class Outage(TrainerCallback):
        def __init__(self) -> None:
            self.step_s: dict[int, float] = {}
            self.logs: dict[int, dict[str, float]] = {}
            self.restart_s: float | None = None
            self._begin = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            self.step_s[step] = time.perf_counter() - self._begin
            if step == kill_at:
                replica.kill()
            elif step == restart_at:
                self.restart_s = replica.start()

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.setdefault(state.global_step, {}).update(logs or {})

    return Outage()


def run_scenario(
    scenario: str,
    policy_dir: Path,
    world: Path,
    out: Path,
    *,
    max_steps: int = 10,
    kill_at: int = 2,
    restart_at: int = 5,
    cooloff_s: float = 0.5,
) -> dict[str, Any]:
    """One GRPO run of `max_steps` with replica 0 killed after step `kill_at` and back after `restart_at`."""
    from transformers import PrinterCallback

    from training.config import load_config
    from training.policy import JudgePolicyGRPOConfig, build_policy_trainer

    if not 0 < kill_at < restart_at < max_steps:
        raise ValueError(f"need 0 < kill_at ({kill_at}) < restart_at ({restart_at}) < max_steps ({max_steps})")
    n = 2 if scenario == "two_replicas" else 1
    replicas = [Replica(free_port()) for _ in range(n)]
    begin = time.perf_counter()
    try:
        for replica in replicas:
            replica.start()
        retry = dataclasses.asdict(RETRY)
        config = load_config(
            JudgePolicyGRPOConfig,
            ROOT / "configs" / "policy_grpo_qwen2_5_vl_7b.yaml",
            {"model_name_or_path": str(policy_dir), "train_file": str(world), "eval_file": None,
             "output_dir": str(out / scenario), "max_steps": max_steps, "save_strategy": "no", "eval_strategy": "no",
             "gradient_accumulation_steps": 1, "per_device_train_batch_size": COMPLETIONS_PER_STEP,
             "num_generations": 4, "max_completion_length": 8, "logging_steps": 1, "learning_rate": 1e-3,
             "use_cpu": True, "bf16": False, "activation_checkpointing": False, "use_vllm": False, "report_to": "none",
             "disable_tqdm": True, "seed": 0, "freeze_vision": False,
             "reward": {"transport": "http", "url": [r.url for r in replicas], "retry": retry,
                        "replica_cooloff_s": cooloff_s, "reference_column": "answer"}},
        )  # fmt: skip
        outage = outage_callback(replicas[0], kill_at, restart_at)
        trainer = build_policy_trainer(config, callbacks=[outage])
        trainer.remove_callback(PrinterCallback)  # its per-step dicts on stdout would bury the one JSON line
        trainer.train()
        reward = trainer.reward_funcs[0]
        restarted_answered = replicas[0].answered()
    finally:
        for replica in replicas:
            replica.stop()
    steps = sorted(outage.step_s)
    during = range(kill_at + 1, restart_at + 1)
    failed = {s: outage.logs.get(s, {}).get("judge/failed_frac") for s in steps}
    unscored = {s: outage.logs.get(s, {}).get("judge/unscored_frac") for s in steps}
    means = {s: outage.logs.get(s, {}).get("rewards/judge/mean") for s in steps}
    none_in_outage = round(sum((failed[s] or 0.0) * COMPLETIONS_PER_STEP for s in during))
    none_elsewhere = round(sum((failed[s] or 0.0) * COMPLETIONS_PER_STEP for s in steps if s not in during))
    after = [s for s in steps if s > restart_at]
    inside = [outage.step_s[s] for s in during if s in outage.step_s]
    outside = [outage.step_s[s] for s in steps if s not in during and s > 1]  # step 1 warms up
    return {
        "replicas": n,
        "steps_completed": trainer.state.global_step,
        "max_steps": max_steps,
        "outage_steps": [kill_at + 1, restart_at],
        "unscored_during_outage": none_in_outage,
        "unscored_outside_outage": none_elsewhere,
        "failed_counted": reward.totals["failed"],
        "counted": reward.totals["failed"] == none_in_outage + none_elsewhere,
        "retries": reward.totals["retries"],
        "rewards_after_restart_scored": bool(after)
        and all(
            failed[s] == 0.0 and unscored[s] == 0.0 and means[s] is not None and math.isfinite(means[s]) for s in after
        ),  # fmt: skip
        "failed_frac_by_step": [failed[s] for s in steps],
        "step_s": [outage.step_s[s] for s in steps],
        "max_step_s_during_outage": max(inside),
        "max_step_s_outside_outage": max(outside),
        "retry_bound_s": RETRY.max_wait_s(),
        "within_bound": max(inside) <= RETRY.max_wait_s() + max(outside),
        "restart_s": outage.restart_s or float("nan"),
        "requests_per_replica": list(reward.replicas.sent),
        "restarted_replica_answered": restarted_answered,
        "seconds": time.perf_counter() - begin,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge_outage", description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--kill-at", type=int, default=2)
    parser.add_argument("--restart-at", type=int, default=5)
    parser.add_argument("--cooloff-s", type=float, default=0.5, help="reward.replica_cooloff_s")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    import torch

    from data_synthesis.world.files import write_world
    from tiny_world.model import build_tiny_model

    torch.set_num_threads(1)
    result: dict[str, Any] = {
        "benchmark": "judge_outage",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "policy": "tiny Qwen2 LM (random init), 8 completions a step (2 prompts x 4), 8 new tokens",
        "judge": "instant rule judge behind reward_server.run.run_server, one subprocess per replica",
        "retry": dataclasses.asdict(RETRY),
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        policy = build_tiny_model(out / "policy", kind="lm", seed=0)
        world = write_world(12, 0, out / "world", size=56) / "records.jsonl"
        for scenario in args.scenarios.split(","):
            if scenario not in SCENARIOS:
                raise SystemExit(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
            result["runs"][scenario] = run_scenario(
                scenario, policy, world, out, max_steps=args.max_steps, kill_at=args.kill_at,
                restart_at=args.restart_at, cooloff_s=args.cooloff_s,
            )  # fmt: skip
    emit(result, digits=3)


if __name__ == "__main__":
    main()
