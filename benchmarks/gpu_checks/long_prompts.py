"""Part 3, `long_prompts`: exact replay (`training.replay`) on a Qwen2.5-1.5B-shaped model at G = 8.

Peak memory and step time against prompt length for plain, replay and chunked replay, each method's longest
prompt under the cap (80 GB on CUDA) by `benchmarks.prefix_replay.search`, and gradient agreement with the plain
loss in float32 at a length all can run. The step is `benchmarks.prefix_replay.step`'s, run here in process.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_checks.plans import GROUP
from benchmarks.gpu_checks.record import Record
from benchmarks.kit import peak_rss_mib, reset_peak_rss, rss_mib
from benchmarks.prefix_replay.search import longest_prompt
from benchmarks.prefix_replay.step import build_model, make_batch, run_step, uneven_completions

METHODS = ["plain", "replay", "chunked"]
CHUNK_OPTION = "prompt_chunk"  # replay_backward's parameter for chunked replay (the trainer's replay_prompt_chunk)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step(model: Any, batch: Any, method: str, chunk: int) -> None:
    """One step of `method`, replayed one completion at a time (chunked: `chunk` prompt tokens per chunk)."""
    run_step(model, batch, method, branch_batch=1, prompt_chunk=chunk)


class InProcessProbe:
    """One (method, prompt length) step at G = 8: peak memory and time, in this process."""

    def __init__(self, model: Any, device: str, completion: int, chunk: int) -> None:
        self.model, self.device, self.completion, self.chunk = model, device, completion, chunk

    def __call__(self, method: str, prompt: int) -> dict[str, Any]:
        import torch

        cuda = self.device.startswith("cuda")
        self.model.zero_grad(set_to_none=True)
        batch = make_batch(GROUP, prompt, self.completion, self.model.config.vocab_size, self.device, 0)
        if cuda:
            torch.cuda.empty_cache()
            sync(self.device)
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            reset_peak_rss()
            base = rss_mib()
        start = time.perf_counter()
        try:
            step(self.model, batch, method, self.chunk)
            sync(self.device)
        except torch.OutOfMemoryError:
            del batch
            self.model.zero_grad(set_to_none=True)
            return {"method": method, "prompt": prompt, "ok": False, "oom": True}
        seconds = time.perf_counter() - start
        out = {"method": method, "prompt": prompt, "ok": True, "step_s": round(seconds, 3)}
        if cuda:
            peak = torch.cuda.max_memory_allocated()
            out.update(peak_mib=round((peak - base) / 2**20, 1), peak_total_mib=round(peak / 2**20, 1))
        else:
            out.update(peak_mib=round(peak_rss_mib() - base, 1))
        del batch
        self.model.zero_grad(set_to_none=True)
        return out


def capped(result: dict[str, Any]) -> float:
    """The figure the cap applies to: all allocated memory on CUDA (what a card must hold, optimizer aside);
    on the CPU the step's peak above the resident size before it (the process's own RSS is not the model's)."""
    return result.get("peak_total_mib", result.get("peak_mib", math.inf))


def grad_agreement(device: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Cosine and relative L2 of each method's gradient against the plain loss's (float32, every parameter)."""
    import torch

    prompt, completion = plan["lp_grad_prompt"], plan["lp_completion"]
    model = build_model(plan["lp_size"], device, torch.float32, 0, prompt + completion)
    if plan["lp_checkpointing"]:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    batch = make_batch(GROUP, prompt, completion, model.config.vocab_size, device, 0)
    uneven_completions(batch, completion)

    def grads(method: str) -> Any:
        model.zero_grad(set_to_none=True)
        step(model, batch, method, plan["lp_chunk"])
        return torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])

    plain = grads("plain")
    out: dict[str, Any] = {"prompt": prompt, "completion": completion, "group": GROUP, "dtype": "float32"}
    for method in METHODS[1:]:
        other = grads(method)
        out[f"{method}_cosine"] = float(torch.nn.functional.cosine_similarity(plain, other, dim=0))
        out[f"{method}_rel_l2"] = float((other - plain).norm() / plain.norm())
    return out


def warm_model(device: str, plan: dict[str, Any]) -> Any:
    """The model the probes share, warmed up by a short step of each method: kernels, and replay's one-off
    exactness probe."""
    import torch

    positions = plan["lp_search_limit"] + plan["lp_completion"]
    model = build_model(plan["lp_size"], device, getattr(torch, plan["lp_dtype"]), 0, positions)
    if plan["lp_checkpointing"]:
        model.gradient_checkpointing_enable({"use_reentrant": False})
    for method in METHODS:
        step(model, make_batch(2, 64, 8, model.config.vocab_size, device, 1), method, plan["lp_chunk"])
    return model


def part_long_prompts(device: str, plan: dict[str, Any], work: Path, record: Record, deadline: float) -> None:
    import torch

    record.update({
        "model_size": plan["lp_size"],
        "dtype": plan["lp_dtype"],
        "group": GROUP,
        "completion": plan["lp_completion"],
        "gradient_checkpointing": plan["lp_checkpointing"],
        "cap_mib": round(plan["lp_cap_mib"], 1),
        "cap_applies_to": "all allocated memory (weights + grads + step)" if "cuda" in device else "step peak RSS",
        "chunked": {"available": True, "option": CHUNK_OPTION, "chunk": plan["lp_chunk"]},
    })  # fmt: skip
    started = time.time()
    record["grad"] = grad_agreement(device, plan)  # first: cheap, and every method can run it
    record.save()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    probe = InProcessProbe(warm_model(device, plan), device, plan["lp_completion"], plan["lp_chunk"])
    record["setup_s"] = round(time.time() - started, 1)
    results: dict[str, Any] = {}
    record["methods"] = results
    for index, method in enumerate(METHODS):
        share = (deadline - time.time()) / (len(METHODS) - index)  # what is left, split evenly among the rest

        def measure(prompt: int, method: str = method) -> dict[str, Any]:
            result = probe(method, prompt)
            return {**result, "fits": bool(result["ok"]) and capped(result) <= plan["lp_cap_mib"]}

        def progress(probes: list, method: str = method) -> None:
            results[method] = {"probes": probes, "unfinished": True}
            record.save()

        results[method] = longest_prompt(measure, plan["lp_search_start"], plan["lp_search_limit"],
                                         deadline=time.time() + share, on_probe=progress)  # fmt: skip
        record[f"max_prompt_{method}_g8"] = results[method]["max_measured"]
        record.save()
    if results["plain"]["max_measured"]:
        record["max_prompt_ratio_g8"] = round(results["replay"]["max_measured"] / results["plain"]["max_measured"], 2)
    record["ok"] = record["grad"]["replay_cosine"] > 0.999 and all(r["max_measured"] > 0 for r in results.values())
