"""Run verl 0.9.1's own dataset → agent loop → reward loop → reward manager path on a tiny policy, with mr-judge's
`judge/integrations/verl.py` as the custom reward function, and print what came back as one JSON line.

Run by `tests/frameworks/test_verl.py` in a subprocess whose `PYTHONPATH` holds the frameworks' cached
install (`scripts/frameworks_env.sh`); not a test module itself. Stand-ins, for what cannot run here:

- the policy's generator: verl's `LLMServerClient` (a vLLM/SGLang server on GPUs) is replaced by
  `ScriptedGenerator`, which answers each prompt with the next of its scripted responses, as token ids;
- Ray: the reward-loop workers are verl's `RewardLoopWorker` objects in this process, reached through
  `ActorHandle`, which gives them `.compute_score.remote(data)` as Ray's actor handles do (the agent loop
  awaits the call; here it is a coroutine on the same event loop instead of a task in another process);
- the v1 trainer's TransferQueue: 0.9.1's default `AgentLoopWorkerTQ` only adds storage around the
  `AgentLoopWorker._compute_score` it inherits; this runs `AgentLoopWorker.generate_sequences`, the same
  reward call with verl's own padding and `rm_scores` assembly after it.

`ActorHandle` also times each reward call and records how it ended (`reward_calls`), and each run reports
`first_reward_call_to_end_s`: from the first reward call to the moment verl's `generate_sequences` returned
or raised, which is how long a judge outage holds the rollout (the outage runs of `test_verl.py`).

Everything else is verl's code: hydra composes `ppo_trainer.yaml` with the overrides given (the ones
`mrjudge serve` prints among them), `RLHFDataset` reads the Parquet file, `RayPPOTrainer._get_gen_batch`
and `DataProto.repeat` make the rollout batch, `SingleTurnAgentLoop` builds prompts, and
`verl.trainer.ppo.reward.load_reward_manager` loads our file into the `naive` manager.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import traceback
import uuid
from typing import Any


class ScriptedGenerator:
    """Stands in for verl's `LLMServerClient`: each prompt's next scripted response, as token ids."""

    def __init__(self, tokenizer: Any, responses: dict[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.responses = responses
        self.served: dict[str, int] = {}

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        prompt = self.tokenizer.decode(prompt_ids)
        question = next(q for q in self.responses if q in prompt)
        i = self.served.get(question, 0)
        self.served[question] = i + 1
        text = self.responses[question][i % len(self.responses[question])]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        await asyncio.sleep(0)  # let the other rollouts of the prompt start, as a server's batch would
        return TokenOutput(token_ids=ids, stop_reason="completed")


class ActorHandle:
    """Stands in for a Ray actor handle: `handle.compute_score.remote(data)` awaits the worker's method. Each
    call's start (monotonic), seconds and end (`ok`, or the exception) go into `record["calls"]`."""

    def __init__(self, worker: Any, record: dict[str, list] | None = None) -> None:
        self.worker = worker
        self.calls = 0
        handle = self
        calls = (record if record is not None else {}).setdefault("calls", [])

        async def timed(data: Any) -> Any:
            started = time.monotonic()
            try:
                result = await worker.compute_score(data)
            except BaseException as exc:  # recorded, then verl's agent loop gets it as a Ray call would raise it
                calls.append({"at": started, "s": time.monotonic() - started, "end": f"{type(exc).__name__}: {exc}"})
                raise
            calls.append({"at": started, "s": time.monotonic() - started, "end": "ok"})
            return result

        class _Method:
            @staticmethod
            def remote(data: Any) -> Any:
                handle.calls += 1
                return timed(data)

        self.compute_score = _Method()


def compose(overrides: list[str]) -> Any:
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(config)  # as main_ppo's TaskRunner.run does before anything reads it
    return config


async def rollout(
    config: Any, responses: dict[str, list[str]], workers: int, record: dict[str, list] | None = None
) -> dict[str, Any]:
    import numpy as np
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    dataset = RLHFDataset(data_files=config.data.train_files, tokenizer=tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)  # the keys the agent loop and the reward need
    gen_batch.meta_info["global_steps"] = 1
    gen_batch = gen_batch.repeat(repeat_times=config.actor_rollout_ref.rollout.n, interleave=True)

    random.seed(0)  # the agent loop picks a reward-loop worker per sample with random.choice
    handles = [ActorHandle(RewardLoopWorker(config), record) for _ in range(workers)]
    generator = ScriptedGenerator(tokenizer, responses)
    agent = AgentLoopWorker(config, llm_client=generator, reward_loop_worker_handles=handles)
    output = await agent.generate_sequences(gen_batch)

    rm = output.batch["rm_scores"]
    mask = output.batch["attention_mask"]
    prompt_length = output.batch["prompts"].size(1)
    rows = []
    for i in range(len(output)):
        valid = int(mask[i, prompt_length:].sum())
        nonzero = [int(j) for j in (rm[i] != 0).nonzero().flatten()]
        ids = output.batch["responses"][i][:valid]
        rows.append(
            {
                "uid": str(gen_batch.non_tensor_batch["uid"][i]),
                "response": tokenizer.decode(ids, skip_special_tokens=True),
                "valid_response_length": valid,
                "reward_positions": nonzero,
                "reward": float(rm[i].sum()),
                **{k: float(output.non_tensor_batch[k][i]) for k in output.meta_info["reward_extra_keys"]},
            }
        )
    return {
        "rm_scores_shape": list(rm.shape),
        "reward_extra_keys": list(output.meta_info["reward_extra_keys"]),
        "worker_calls": [h.calls for h in handles],
        "reward_manager": type(handles[0].worker.reward_manager).__name__,
        "rows": rows,
    }


def main() -> None:
    import importlib.metadata

    from omegaconf import OmegaConf

    parser = argparse.ArgumentParser()
    parser.add_argument("spec", help="a JSON file: runs, each with a name, overrides, responses (question -> texts)")
    spec = json.loads(open(parser.parse_args().spec).read())
    out: dict[str, Any] = {"versions": {d: importlib.metadata.version(d) for d in ("verl", "hydra-core")}, "runs": {}}
    for run in spec["runs"]:
        config = compose(run["overrides"])
        read = {
            "custom_reward_function": OmegaConf.to_container(config.reward.custom_reward_function),
            "reward_manager": config.reward.reward_manager.name,
            "rollout_n": config.actor_rollout_ref.rollout.n,
        }
        record: dict[str, list] = {"calls": []}
        try:
            result = asyncio.run(rollout(config, run["responses"], run.get("workers", 2), record))
        except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__}
        ended = time.monotonic()
        calls = sorted(record["calls"], key=lambda c: c["at"])
        if calls:
            result["first_reward_call_to_end_s"] = round(ended - calls[0]["at"], 3)
        result["reward_calls"] = [{"s": round(c["s"], 3), "end": c["end"]} for c in calls]
        out["runs"][run["name"]] = {"config": read, **result}
    print(json.dumps(out, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
