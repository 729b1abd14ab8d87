"""One configuration in its own process: a (method, G, P) step's peak memory and time, or the gradient check.

A fresh interpreter per configuration (`spawn`) keeps one configuration's peak, crash or kill by the OOM killer
out of the next; how the peak is read on CPU and on CUDA is in the package's docstring.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from benchmarks.kit import peak_rss_mib, reset_peak_rss, rss_mib
from benchmarks.prefix_replay.step import build_model, make_batch, run_step, uneven_completions
from benchmarks.workers import run_worker

ENTRY = "benchmarks.prefix_replay"  # `python -m benchmarks.prefix_replay --worker SPEC` runs `run_spec`


def spawn(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter; a crash or a kill by the OOM killer counts as not fitting."""
    return run_worker(ENTRY, spec, timeout, mmap_threshold=spec.get("mmap_threshold"))


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The worker's side of `spawn`: the gradient check (method `check`) or one step's figures."""
    return gradient_check(spec) if spec["method"] == "check" else worker(spec)


def _stop_over_cap(base_mib: float, cap_mib: float) -> None:
    """CPU searches: end the step once its resident memory passes the cap (a probe that cannot fit need not
    finish, which at long prompts would take minutes); what it reached is reported with `over_cap`."""

    def watch() -> None:
        while True:
            used = rss_mib() - base_mib
            if used > cap_mib:
                print(json.dumps({"ok": True, "peak_mib": round(used, 1), "over_cap": True}), flush=True)
                os._exit(0)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


def _model(spec: dict[str, Any], dtype: Any) -> Any:
    """The spec's model on its device, with per-layer checkpointing when asked for (plain: HF's per-layer
    checkpointing; replay: its own, cache kept (step c))."""
    import torch

    torch.set_num_threads(spec["threads"])
    model = build_model(spec["model_size"], spec["device"], dtype, spec["seed"], spec["prompt"] + spec["completion"])
    if spec.get("checkpointing"):
        model.gradient_checkpointing_enable({"use_reentrant": False})
    return model


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One (method, G, P) step in this fresh process: peak memory above the pre-step baseline, and time."""
    import torch

    device = spec["device"]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(device))  # the peak counters below read the current device
    model = _model(spec, getattr(torch, spec["dtype"]))
    vocab = model.config.vocab_size
    # Warm-up on a short prompt: kernels, thread pools and (for replay) the model's one-off exactness probe.
    warm_chunk = min(spec.get("prompt_chunk", 0), 24)  # several chunks of the warm-up prompt
    run_step(model, make_batch(2, 64, 8, vocab, device, 1), spec["method"], spec["branch_batch"], warm_chunk)
    model.zero_grad(set_to_none=True)
    batch = make_batch(spec["group"], spec["prompt"], spec["completion"], vocab, device, spec["seed"])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        exact_reset = reset_peak_rss()
        base = rss_mib()
    if not cuda and spec.get("cap_mib"):
        _stop_over_cap(base, spec["cap_mib"])
    times, cpu_times = [], []
    try:
        for _ in range(max(spec.get("repeats", 1), 1)):  # the same step again: its peak is the same
            start, cpu_start = time.perf_counter(), time.process_time()
            run_step(model, batch, spec["method"], spec["branch_batch"], spec.get("prompt_chunk", 0),
                     spec.get("chunk_checkpoint"))  # fmt: skip
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            model.zero_grad(set_to_none=True)
    except torch.OutOfMemoryError:
        return {"ok": False, "oom": True}
    seconds = min(times)  # shared CPUs: the least disturbed run
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else peak_rss_mib() - base
    out: dict[str, Any] = {"ok": True, "peak_mib": round(peak, 1), "step_s": round(seconds, 3)}
    if not cuda:  # CPU time of this process: what the step costs, whatever else shares the cores
        out["step_cpu_s"] = round(min(cpu_times), 3)
    if not cuda and not exact_reset:
        out["peak_includes_setup"] = True
    return out


def gradient_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Cosine and relative L2 between the plain and the replayed gradient (float32, every parameter)."""
    import torch

    model = _model(spec, torch.float32)
    batch = make_batch(spec["group"], spec["prompt"], spec["completion"], model.config.vocab_size, spec["device"],
                       spec["seed"])  # fmt: skip
    uneven_completions(batch, spec["completion"])

    def grads(method: str) -> Any:
        model.zero_grad(set_to_none=True)
        run_step(model, batch, method, spec["branch_batch"], spec.get("prompt_chunk", 0), spec.get("chunk_checkpoint"))
        return torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])

    plain, replay, chunked = grads("plain"), grads("replay"), grads("chunked")
    cosine = torch.nn.functional.cosine_similarity
    return {
        "grad_cosine": float(cosine(plain, replay, dim=0)),
        "grad_rel_l2": float((replay - plain).norm() / plain.norm()),
        "grad_cosine_chunked": float(cosine(plain, chunked, dim=0)),
        "grad_rel_l2_chunked": float((chunked - plain).norm() / plain.norm()),
    }
