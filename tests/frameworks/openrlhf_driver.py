"""Run OpenRLHF 0.11.2's own rollout-side reward path with mr-judge as the remote reward, on both routes, and print
what came back as one JSON line.

Run by `tests/frameworks/test_openrlhf.py` in a subprocess whose `PYTHONPATH` holds the frameworks' cached
install (`scripts/frameworks_env.sh`); not a test module itself. OpenRLHF's code that runs: its CLI parser
(`openrlhf.cli.train_ppo_ray`, parsed and hierarchized up to the point where it would start Ray), its
`PromptDataset` and `_collect_prompt_batch`, `SingleTurnAgentExecutor` (the VLM prompt processing, the
reward call on either route, and what it does when that call fails), `SamplesGenerator.
_process_response_into_experience` and `RemoteExperienceMaker.compute_advantages_and_returns`.

Stand-ins, for what cannot run here:

- vLLM, DeepSpeed and flash-attn: OpenRLHF's modules import them at the top. `_Absent` gives any module of
  those packages whose every attribute is a placeholder class that raises if it is ever called, so the
  imports succeed and any use of them on this path would fail loudly;
- the generator: `ScriptedEngine.generate` answers each prompt with its next scripted response (what
  `LLMRayActor.generate` returns from vLLM), and `generate_responses` is its four lines (n concurrent
  `execute` calls for one prompt), since `LLMRayActor` is a Ray actor around a vLLM engine;
- the models: the KL term comes from the reference model, so each experience gets `kl = 0` (a policy equal
  to its reference); no actor, critic or Ray cluster is started.

Each run also reports its reward calls (OpenRLHF's `_fetch_rewards_via_http` or `_fetch_rewards_via_func`,
timed around as they are: seconds and how each ended), `first_reward_call_to_end_s` (from the first reward
call until the step's advantages were computed or failed: how long a judge outage holds the step) and what
OpenRLHF's executor logged (`openrlhf_logs`, its INFO line for a failed reward among them).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import json
import logging
import runpy
import sys
import time
import traceback
import types
from typing import Any


class _Absent(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for GPU-only packages that cannot be installed here; see the module docstring."""

    ROOTS = ("vllm", "deepspeed", "flash_attn")

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _AbsentModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _AbsentModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        module = self.__name__

        def absent(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{module}.{attr} is a stand-in: that package is not installed in this test")

        return type(attr, (), {"__init__": absent, "__call__": absent, "__module__": module})


class _Parsed(Exception):
    def __init__(self, args: Any) -> None:
        self.args_ = args


def parse_cli(flags: list[str]) -> Any:
    """OpenRLHF's own argument parser and `hierarchize` on `flags`, stopped before it starts Ray."""
    import openrlhf.utils.config as config

    real = config.hierarchize

    def capture(args: Any) -> Any:
        raise _Parsed(real(args))

    config.hierarchize = capture
    sys.argv = ["train_ppo_ray", *flags]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except _Parsed as parsed:
        return parsed.args_
    finally:
        config.hierarchize = real
    raise RuntimeError("train_ppo_ray did not reach hierarchize")


class ScriptedEngine:
    """Stands in for `LLMRayActor`: each prompt's next scripted response as vLLM's request output."""

    def __init__(self, tokenizer: Any, responses: dict[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.responses = responses
        self.served: dict[str, int] = {}
        self.images_seen: list[int] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        prompt = self.tokenizer.decode(prompt_token_ids)
        question = next(q for q in self.responses if q in prompt)
        i = self.served.get(question, 0)
        self.served[question] = i + 1
        self.images_seen.append(len((multi_modal_data or {}).get("image", [])))
        text = self.responses[question][i % len(self.responses[question])]
        ids = self.tokenizer.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.tokenizer.eos_token_id]
        await asyncio.sleep(0)
        output = types.SimpleNamespace(token_ids=ids, finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[output])

    async def generate_responses(
        self, executor: Any, prompt: str, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any,
        num_samples: int = 1, images: Any = None,
    ) -> list:  # fmt: skip
        """`LLMRayActor.generate_responses` of OpenRLHF 0.11.2, with its executor passed in."""
        tasks = [
            executor.execute(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=max_length,
                hf_tokenizer=hf_tokenizer,
                llm_engine=self,
                images=images,
            )  # fmt: skip
            for _ in range(num_samples)
        ]
        return await asyncio.gather(*tasks)


def run_route(args: Any, processor: Any, responses: dict[str, list[str]], data_file: str) -> dict[str, Any]:
    import datasets
    import torch
    from openrlhf.datasets import PromptDataset
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from torch.utils.data import DataLoader

    strategy = types.SimpleNamespace(args=args, is_rank_0=lambda: True)
    rows = datasets.load_dataset("json", data_files=data_file, split="train")
    dataset = PromptDataset(rows, processor, strategy)
    loader = DataLoader(dataset, batch_size=len(dataset), collate_fn=dataset.collate_fn)
    prompts, labels, images, _ = _collect_prompt_batch(iter(loader), len(dataset))

    executor = SingleTurnAgentExecutor(args.reward.remote_url)
    calls = _time_reward_calls(executor)
    engine = ScriptedEngine(processor, responses)
    params = types.SimpleNamespace(max_tokens=64, logprobs=None)  # vllm.SamplingParams: the fields execute reads

    async def generate() -> list[dict]:
        per_prompt = [
            engine.generate_responses(
                executor,
                prompt,
                label,
                params,
                args.data.max_len,
                processor,
                num_samples=args.rollout.n_samples_per_prompt,
                images=image,
            )  # fmt: skip
            for prompt, label, image in zip(prompts, labels, images)
        ]
        return [r for group in await asyncio.gather(*per_prompt) for r in group]

    responses_out = asyncio.run(generate())
    experiences = [
        SamplesGenerator._process_response_into_experience(None, r, max_len=args.data.max_len) for r in responses_out
    ]
    rows_out = []
    for i, (response, experience) in enumerate(zip(responses_out, experiences)):
        experience.index = [i]
        experience.kl = torch.zeros_like(experience.action_mask, dtype=torch.float32)  # policy == reference
        rows_out.append(
            {
                "prompt_question": next(q for q in responses if q in response["prompt"]),
                "response": processor.decode(
                    response["observation_tokens"][response["action_ranges"][0][0] :], skip_special_tokens=True
                ),
                "reward": None if experience.rewards is None else experience.rewards.flatten().tolist(),
                "reward_shape": None if experience.rewards is None else list(experience.rewards.shape),
                "reward_type": type(response["reward"]).__name__,
                "extra_logs": {k: float(torch.as_tensor(v).flatten()[0]) for k, v in response["extra_logs"].items()},
                "info": sorted(experience.info),
            }
        )
    out: dict[str, Any] = {"rows": rows_out, "images_to_policy": engine.images_seen}
    maker = object.__new__(RemoteExperienceMaker)
    maker.strategy, maker.args = strategy, args
    maker.advantage_estimator = args.algo.advantage.estimator
    maker.kl_ctl = types.SimpleNamespace(value=0.0)
    try:
        done = maker.compute_advantages_and_returns(experiences)
    except Exception as exc:  # noqa: BLE001 - a sample without a reward must stop the step; the test checks how
        out["advantages_error"] = f"{type(exc).__name__}: {exc}"
    else:
        for row, experience in zip(rows_out, done):
            mask = experience.action_mask[0].bool()
            row["advantages"] = sorted({round(float(a), 6) for a in experience.advantages[0][mask]})
    calls.sort(key=lambda c: c["at"])
    if calls:
        out["first_reward_call_to_end_s"] = round(time.monotonic() - calls[0]["at"], 3)
    out["reward_calls"] = [{"s": round(c["s"], 3), "end": c["end"]} for c in calls]
    return out


def _time_reward_calls(executor: Any) -> list[dict[str, Any]]:
    """Wrap the executor's two reward clients (its HTTP route and its `.py` route) so that each call's start,
    seconds and end (`ok`, or what it raised, which `execute` then catches) are recorded; nothing else changes."""
    calls: list[dict[str, Any]] = []
    for name in ("_fetch_rewards_via_http", "_fetch_rewards_via_func"):
        fetch = getattr(executor, name)

        async def timed(*args: Any, _fetch: Any = fetch) -> Any:
            started = time.monotonic()
            try:
                result = await _fetch(*args)
            except BaseException as exc:
                calls.append({"at": started, "s": time.monotonic() - started, "end": f"{type(exc).__name__}: {exc}"})
                raise
            calls.append({"at": started, "s": time.monotonic() - started, "end": "ok"})
            return result

        setattr(executor, name, timed)
    return calls


def main() -> None:
    import importlib.metadata

    sys.meta_path.insert(0, _Absent())
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", help="a JSON file: model, responses, flags, runs (name, remote_url, data)")
    spec = json.loads(open(parser.parse_args().spec).read())

    logs: list[str] = []
    framework_logs: list[str] = []

    class Collect(logging.Handler):
        def __init__(self, into: list[str]) -> None:
            super().__init__()
            self.into = into

        def emit(self, record: logging.LogRecord) -> None:
            self.into.append(f"{record.name} {record.levelname} {record.getMessage()}")

    logging.getLogger("mrjudge").addHandler(Collect(logs))
    # OpenRLHF's loggers do not propagate (openrlhf.utils.logging_utils): the executor's own one, directly.
    logging.getLogger("openrlhf.utils.agent").addHandler(Collect(framework_logs))
    from transformers import AutoProcessor

    import judge.backends.hf_compat  # noqa: F401 - registers the tiny VLM's image-only processor class

    processor = AutoProcessor.from_pretrained(spec["model"])
    out: dict[str, Any] = {"versions": {"openrlhf": importlib.metadata.version("openrlhf")}, "runs": {}}
    for run in spec["runs"]:
        logs.clear()
        framework_logs.clear()
        args = parse_cli([*spec["flags"], "--reward.remote_url", run["remote_url"]])
        try:
            result = run_route(args, processor, spec["responses"], run["data"])
        except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result["args"] = {
            "remote_url": args.reward.remote_url,
            "n_samples_per_prompt": args.rollout.n_samples_per_prompt,
            "label_key": args.data.label_key,
            "estimator": args.algo.advantage.estimator,
        }
        out["runs"][run["name"]] = {**result, "mrjudge_logs": list(logs), "openrlhf_logs": list(framework_logs)}
    print(json.dumps(out, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
