"""`python -m benchmarks.prefix_replay`: the flags, the run as steps, and the one JSON line.

With `--worker SPEC` it is one configuration's fresh process instead (`worker.spawn` starts it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import benchmarks.prefix_replay as package
from benchmarks.kit import add_repeats_flag
from benchmarks.prefix_replay.figures import Runs, goals, group_figures, search_figures, time_figures
from benchmarks.prefix_replay.search import longest_prompt
from benchmarks.prefix_replay.settings import Settings
from benchmarks.prefix_replay.step import METHODS, MODEL_SIZES
from benchmarks.prefix_replay.worker import run_spec, spawn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {package.__name__}", description=package.__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument(
        "--model-size", default=None, choices=sorted(MODEL_SIZES), help="default: small (CPU), 1.5b (CUDA)"
    )
    parser.add_argument(
        "--prompt-length", type=int, default=None, help="P for the G sweep (default 2048 CPU, 8192 --full, 65536 CUDA)"
    )
    parser.add_argument("--completion-length", type=int, default=64, help="R, tokens per completion")
    parser.add_argument("--groups", default=None, help="group sizes G for the sweep (default 2,8 CPU; 2,4,8,16 "
                        "with --full and on CUDA)")  # fmt: skip
    parser.add_argument("--branch-batch", type=int, default=1, help="completions replayed together")
    parser.add_argument("--prompt-chunk", type=int, default=None, help="tokens per chunk of chunked replay "
                        "(default 512 CPU, 4096 CUDA)")  # fmt: skip
    parser.add_argument("--chunk-checkpoint", choices=("auto", "on", "off"), default="auto", help="chunked replay "
                        "checkpoints each chunk's layers in its recomputation (less memory, one more chunk forward); "
                        "auto: replay's default, on exactly when the model has gradient checkpointing on")  # fmt: skip
    add_repeats_flag(parser, 1, "steps per worker; the fastest is reported")
    parser.add_argument("--prompt-lengths", default=None, help="prompt lengths of the G = 8 sweep (default: "
                        "P on CPU; P/4, P/2, P with --full and on CUDA)")  # fmt: skip
    parser.add_argument("--chunked-search-limit", type=int, default=None, help="longest prompt the chunked "
                        "search tries (default 64 × the plain limit on CPU, 4M on CUDA)")  # fmt: skip
    parser.add_argument("--mem-cap-mib", type=float, default=None, help="cap for the longest-prompt search at G=8 "
                        "(default 128 CPU, 512 --full, 40000 CUDA)")  # fmt: skip
    parser.add_argument("--search-start", type=int, default=None, help="first prompt length of the search")
    parser.add_argument("--search-limit", type=int, default=None, help="longest prompt the search tries "
                        "(default 4096 CPU, 32768 --full, 1M CUDA)")  # fmt: skip
    parser.add_argument("--grad-prompt-length", type=int, default=None, help="P of the gradient check "
                        "(default 1024 CPU; min(P, 2048) with --full and on CUDA)")  # fmt: skip
    parser.add_argument("--gradient-checkpointing", choices=("on", "off"), default=None, help="per-layer activation "
                        "checkpointing for both methods (default: off CPU, on CUDA)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (CPU)")
    parser.add_argument("--mmap-threshold", type=int, default=65536, help="glibc MALLOC_MMAP_THRESHOLD_ for the "
                        "workers (CPU): without a fixed one, freed activations stay in the heap and RSS overstates "
                        "the live peak; 0 leaves glibc's default")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per worker")
    parser.add_argument("--full", action="store_true", help="CPU: the big probe (8K prompt, G up to 16, 512 MiB "
                        "cap; well over 20 minutes on 2 cores)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the bare CPU run (kept for older commands)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="also write every worker's result here (JSON)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def group_sweep(run: Settings, log: list[dict[str, Any]]) -> Runs:
    """Every method at every G, at the prompt length P."""
    sweep: Runs = {m: {} for m in METHODS}
    for method in METHODS:
        for g in run.groups:
            result = spawn({**run.base, "method": method, "group": g, "prompt": run.prompt}, run.timeout)
            log.append({"method": method, "group": g, "prompt": run.prompt, **result})
            sweep[method][str(g)] = result
    return sweep


def prompt_sweep(run: Settings, log: list[dict[str, Any]]) -> Runs:
    """Every method at G = 8, at each of the sweep's prompt lengths."""
    by_prompt: Runs = {m: {} for m in METHODS}
    for length in run.lengths:
        for method in METHODS:
            result = spawn({**run.base, "method": method, "group": 8, "prompt": length}, run.timeout)
            log.append({"method": method, "group": 8, "prompt": length, **result})
            by_prompt[method][str(length)] = result
    return by_prompt


def search(run: Settings, method: str, start: int, limit: int, log: list[dict[str, Any]]) -> dict[str, Any]:
    """The longest prompt `method` fits under the cap at G = 8, each probe a worker that stops at the cap."""

    def measure(length: int) -> dict[str, Any]:
        spec = {**run.base, "method": method, "group": 8, "prompt": length, "cap_mib": run.cap}
        result = spawn(spec, run.timeout)
        fits = bool(result.get("ok")) and result["peak_mib"] <= run.cap
        log.append({"method": method, "group": 8, "prompt": length, "fits": fits, **result})
        return log[-1]

    return longest_prompt(measure, start, limit)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_spec(json.loads(args.worker))), flush=True)
        return 0
    run = Settings.from_args(args)
    began = time.perf_counter()
    log: list[dict[str, Any]] = []

    check = spawn({**run.base, "method": "check", "group": 4, "prompt": run.grad_prompt}, run.timeout)
    sweep = group_sweep(run, log)
    by_prompt = prompt_sweep(run, log)
    found = {m: search(run, m, run.start, run.limit, log) for m in ("plain", "replay")}
    # Chunked replay fits at least what replay fits: its search starts there (and goes much further).
    found["chunked"] = search(run, "chunked", max(found["replay"]["max_measured"], run.start), run.chunked_limit, log)

    record: dict[str, Any] = {
        "benchmark": "prefix_replay",
        "device": args.device,
        "model_size": run.model_size,
        "prompt_length": run.prompt,
        "completion_length": args.completion_length,
        "groups": run.groups,
        "branch_batch": args.branch_batch,
        "gradient_checkpointing": run.checkpointing,
        **group_figures(sweep, run.groups),
        "prompt_chunk": run.chunk,
        "chunk_checkpoint": run.checkpointing if run.base["chunk_checkpoint"] is None else run.base["chunk_checkpoint"],
        **time_figures(by_prompt, sweep, run),
        **{key: check.get(key) for key in ("grad_cosine", "grad_rel_l2", "grad_cosine_chunked", "grad_rel_l2_chunked")},
        **search_figures(found, run),
    }
    record["goals"] = goals(record)
    record.update(threads=args.threads, mmap_threshold=run.base["mmap_threshold"])
    record["wall_s"] = round(time.perf_counter() - began, 1)
    if args.log:
        args.log.write_text(json.dumps({"record": record, "runs": log, "check": check}, indent=1))
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
