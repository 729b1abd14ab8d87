"""Equal work in a throughput figure: one forced generation length on every side, and the tokens counted.

A randomly initialised model stops wherever it happens to write EOS, and two engines (or two runs) do not
stop at the same place: one judge-throughput comparison read vLLM 2.29x faster than transformers, the next
0.18x, because the two sides generated different amounts. So every throughput benchmark here

- forces the same generation length on every side: transformers gets `min_new_tokens = max_new_tokens`
  (EOS is masked until then), vLLM gets `min_tokens = max_tokens` and `ignore_eos` on each request;
- counts the tokens each engine actually generated (transformers: rows x new positions of every
  `generate` call; vLLM: its own `vllm:generation_tokens` counter on `/metrics`, read before and after),
  and reports them with tokens/s beside items/s.

    from benchmarks.equal_work import FORCED_LENGTH, GenerateCounter, vllm_extra_body
    with GenerateCounter(model, max_new_tokens=64) as counter:
        judge.select(items)
    counter.tokens, counter.calls
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["FORCED_LENGTH", "GenerateCounter", "force_in_folder", "vllm_extra_body", "vllm_generation_tokens"]

FORCED_LENGTH = (
    "every call generates exactly max_new_tokens tokens on every engine (transformers min_new_tokens; "
    "vLLM min_tokens + ignore_eos); generated tokens are counted per engine"
)
"""What a benchmark's JSON line says under `equal_work`."""


def force_in_folder(model_dir: str | Path, max_new_tokens: int) -> None:
    """Write `min_new_tokens` into a model folder's `generation_config.json`, for engines that load the model
    in another process (the reward server, Ray actors): every transformers `generate` there picks it up."""
    path = Path(model_dir) / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, "min_new_tokens": max_new_tokens}, indent=2) + "\n")


def vllm_extra_body(max_new_tokens: int) -> dict[str, Any]:
    """vLLM's per-request fields that make it generate exactly `max_new_tokens` tokens."""
    return {"min_tokens": max_new_tokens, "ignore_eos": True}


class GenerateCounter:
    """Forces `min_new_tokens` on a transformers model and counts what its `generate` calls produce.

    Inside the `with` block the model's `generation_config.min_new_tokens` is `max_new_tokens` (every
    caller's `generate` picks it up) and `model.generate` is wrapped to add up rows x new positions per
    call, which is the work done whatever the text is later cut to. Both are undone on exit.
    """

    def __init__(self, model: Any, max_new_tokens: int) -> None:
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.tokens = 0
        self.calls = 0
        self.lengths: set[int] = set()

    def reset(self) -> None:
        self.tokens, self.calls, self.lengths = 0, 0, set()

    def __enter__(self) -> GenerateCounter:
        model = self.model
        self._saved_min = model.generation_config.min_new_tokens
        model.generation_config.min_new_tokens = self.max_new_tokens
        inner = model.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            prompt = kwargs.get("input_ids", args[0] if args else None)
            out = inner(*args, **kwargs)
            sequences = out if hasattr(out, "shape") else out.sequences
            new = int(sequences.shape[1]) - (int(prompt.shape[1]) if prompt is not None else 0)
            self.tokens += int(sequences.shape[0]) * new
            self.calls += 1
            self.lengths.add(new)
            return out

        model.generate = generate
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.model.generate  # the instance attribute; the class's method shows through again
        self.model.generation_config.min_new_tokens = self._saved_min


def vllm_generation_tokens(base_url: str, timeout: float = 10.0) -> float:
    """The server's `vllm:generation_tokens` counter (summed over engines) from `/metrics`.

    `base_url` is the OpenAI root (`http://host:port/v1`); the metrics live beside it at `/metrics`.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    values = [float(m.group(1)) for m in re.finditer(r"^vllm:generation_tokens_total(?:\{[^}]*\})? (\S+)$", text, re.M)]
    if not values:
        raise RuntimeError(f"{root}/metrics has no vllm:generation_tokens_total counter")
    return sum(values)
