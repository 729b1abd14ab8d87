"""Run the project's offline vLLM backend (`vllm.LLM`) inside the vLLM venv, driven by a JSON spec.

The tests live in the main venv, which has no vLLM; they write a spec, run this module with the vLLM venv's
Python (`PYTHONPATH` = the repository) and read back what the engine did:

    python -m tests.vllm.offline_worker spec.json result.json

Spec (every part optional but `model`):
    {"model": folder, "engine": {VLLMBackend keyword arguments}, "adapters": {name: folder},
     "judge": [{"items": [MCItem dicts], "config": {JudgeConfig fields}, "adapter": name | null}, ...],
     "generate": [{"requests": [{"messages", "images": [paths], "n_options", "adapter"}], "max_new_tokens": n},
                  ...]}

Each `judge` run is `Judge.select` over `VLLMBackend`; each `generate` call is one `generate_outputs` call,
run in order, so a later call can find an earlier call's prefix blocks in the cache. The result holds the
verdicts, and per request the text, option log-probs, generated and prompt token ids and the number of
prompt tokens served from the prefix cache, plus the engine's prefix-caching setting and block size.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(spec_path: str, out_path: str) -> None:
    from judge.backends.base import ChatRequest, SamplingParams
    from judge.backends.vllm_offline import VLLMBackend
    from judge.images import load_image
    from judge.judging import Judge, JudgeConfig
    from judge.types import MCItem

    with open(spec_path) as f:
        spec = json.load(f)
    started = time.perf_counter()
    backend = VLLMBackend(spec["model"], **spec.get("engine", {}))
    cache_config = backend.llm.llm_engine.vllm_config.cache_config
    result: dict[str, Any] = {
        "engine": {
            "enable_prefix_caching": bool(cache_config.enable_prefix_caching),
            "block_size": cache_config.block_size,
            "start_s": time.perf_counter() - started,
        },
        "judge": [],
        "generate": [],
    }
    for name, path in spec.get("adapters", {}).items():
        backend.load_adapter(name, path)

    for run in spec.get("judge", []):
        items = [MCItem.from_dict(row) for row in run["items"]]
        judge = Judge(backend, JudgeConfig(**run.get("config", {})), adapter=run.get("adapter"))
        result["judge"].append([verdict.to_dict() for verdict in judge.select(items)])

    for call in spec.get("generate", []):
        requests = [
            ChatRequest(
                messages=r["messages"],
                images=[load_image(path) for path in r.get("images", [])],
                n_options=r.get("n_options"),
                adapter=r.get("adapter"),
            )
            for r in call["requests"]
        ]
        params = SamplingParams(max_new_tokens=call.get("max_new_tokens", 32))
        outputs = backend.generate_outputs(requests, params)
        rows = []
        for request, output in zip(requests, outputs):
            completion = output.outputs[0]
            generation = backend._to_generation(request, completion)
            rows.append(
                {
                    "text": generation.text,
                    "label_logprobs": generation.label_logprobs,
                    "token_ids": list(completion.token_ids),
                    "prompt_token_ids": list(output.prompt_token_ids or []),
                    "num_cached_tokens": output.num_cached_tokens,
                }
            )
        result["generate"].append(rows)

    with open(out_path, "w") as f:
        json.dump(result, f, allow_nan=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
