"""Concurrent multi-policy GRPO vs the same policies one after another: wall time, peak memory, curves.

    python -m benchmarks.multi_policy    # CPU, tiny text LM, P = 1, 2, 4: 197 s on 2 quiet cores (docs/multi-policy.md)
    python -m benchmarks.multi_policy --device cuda --size small --steps 8 --completion-length 64

Prints one JSON line. For each P, two variants train the same P policies (each its own prompts, seed and
adapter) for `--steps` GRPO steps each over one tiny text LM (`tiny_world.model`, built here, nothing downloaded):
`concurrent` (one mixed-adapter batch per step for all P) and `sequential` (policy after policy, same
process and base). Each run is a fresh subprocess, so one variant's peak cannot hide in the other's.
`wall_s` times `train()` only (model loading is the same in both): each variant runs `--repeats` times,
alternating with the other variant in ABBA order, and reports its fastest wall (a busy machine's noise
only ever slows a run down; `walls_s` lists them all, and `median_wall_ratio_pP` is the ratio of the
medians, a check that the fastest runs are not a lucky pair). Peaks come from one more run per variant made
for memory alone (`measure`): on CPU the process's VmHWM under glibc's `MALLOC_MMAP_THRESHOLD_`, reset through
/proc/self/clear_refs once the model and adapters are built (`peak_mib` is that peak, `train_peak_mib` the
part above the resident size just before training); on CUDA `torch.cuda.max_memory_allocated`
(`peak_mib`: everything allocated, weights included; `train_peak_mib`: above what was allocated before
training). The memory run is not timed: with that allocator setting every big block is a fresh mmap, which
slowed the concurrent variant's larger batches more than the sequential ones (`wall_ratio_p4` 1.28 with
it, 1.44 without, in one pair of runs), a cost no user pays.

Figures: `wall_ratio_pP` = sequential wall / concurrent wall; `cpu_ratio_pP` the same for the process's
CPU time during `train()` (on a machine shared with other jobs the wall includes waiting for a core; the
CPU time does not, so it is the steadier figure there); `peak_ratio_pP` = concurrent peak / sequential
peak (whole-process, the memory a user pays); `train_peak_ratio_pP` the same for the training part alone;
`curve_max_diff_pP`: the largest difference, over policies and steps, between a policy's loss (and reward)
in the concurrent run and in its sequential run — the same seeds must give the same curves, up to float
noise from batch shapes. The reward is cheap and in process (`length_reward` here: random tiny-model
samples differ in length, so groups have spread and the adapters learn), so the judge costs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.kit import add_repeats_flag, cpu_seconds, emit, peak_rss_mib, reset_peak_rss, rss_mib
from benchmarks.workers import run_worker

WORDS = ["red", "blue", "green", "square", "circle", "one", "two", "three", "left", "right", "top", "bottom"]


def length_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """Characters / 100 of each completion (conversational: the last message's content)."""
    return [len(c[-1]["content"] if isinstance(c, list) else c) / 100 for c in completions]


# -- one variant, in its own process -----------------------------------------------------------------------


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(spec["threads"])
    from training.multi_policy import MultiPolicyConfig, MultiPolicyTrainer

    policies = [{"name": f"policy{i}", "train_file": spec["files"][i], "seed": 10 + i} for i in range(spec["policies"])]
    config = MultiPolicyConfig(
        model_name_or_path=spec["model"],
        output_dir=spec["out"],
        max_steps=spec["steps"],
        concurrent=spec["concurrent"],
        forward_batch_rows=spec["forward_batch_rows"],
        device=spec["device"],
        logging_steps=0,
        policy_defaults={
            "prompts_per_step": spec["prompts_per_step"],
            "num_generations": spec["group"],
            "max_completion_length": spec["completion_length"],
            "learning_rate": spec["learning_rate"],
            "reward": "benchmarks.multi_policy:length_reward",
        },
        policies=policies,
    )
    trainer = MultiPolicyTrainer(config)
    cuda = spec["device"].startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() / 2**20
    else:
        if not reset_peak_rss():
            raise RuntimeError("/proc/self/clear_refs refused: the peak would include the set-up")
        before = rss_mib()
    started, cpu_started = time.perf_counter(), cpu_seconds()
    status = trainer.train()
    if cuda:
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    return {
        "ok": all(p["status"] == "done" for p in status["policies"].values()),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mib": peak,
        "train_peak_mib": peak - before,
        "curves": {run.name: {k: [h[k] for h in run.history] for k in ("loss", "reward")} for run in trainer.runs},
        "errors": [p["error"] for p in status["policies"].values() if p["error"]],
    }


# -- the driver --------------------------------------------------------------------------------------------


VARIANTS = ("concurrent", "sequential")
SHOWN = ("ok", "wall_s", "walls_s", "median_wall_s", "cpu_s", "peak_mib", "train_peak_mib", "curves_agree", "errors",
         "stderr")  # fmt: skip
"""What the JSON line shows of each variant's runs (not their curves)."""


def spawn(spec: dict[str, Any], timeout: float, mmap_threshold: int | None = None) -> dict[str, Any]:
    return run_worker("benchmarks.multi_policy", spec, timeout, mmap_threshold=mmap_threshold)


def measure(
    specs: dict[str, dict[str, Any]], repeats: int, mmap_threshold: int | None, timeout: float
) -> dict[str, dict[str, Any]]:
    """Each variant's fastest timing run, with the peak of its memory run (without one, the highest of its timing runs).

    Timing runs use the default allocator and alternate between the variants, in ABBA order (concurrent,
    sequential, sequential, concurrent, …), so a machine that slows down over minutes slows both alike and
    neither variant always runs first. The memory run is one more run per variant with glibc's
    `MALLOC_MMAP_THRESHOLD_` (CPU): big blocks then come from mmap and go back on free, so VmHWM follows
    live memory, but every big allocation costs a page-faulting mmap, which slows the large concurrent
    batches more than the small sequential ones, so those runs are not timed.
    """
    timed: dict[str, list[dict[str, Any]]] = {variant: [] for variant in specs}
    for i in range(repeats):
        order = list(specs) if i % 2 == 0 else list(reversed(specs))  # ABBA: neither always goes first
        for variant in order:  # each run its own output folder and adapter store
            spec = specs[variant]
            timed[variant].append(spawn({**spec, "out": f"{spec['out']}-{i}"}, timeout))
    results = {}
    for variant, runs in timed.items():
        spec = {**specs[variant], "out": f"{specs[variant]['out']}-memory"}
        memory = spawn(spec, timeout, mmap_threshold) if mmap_threshold else None
        results[variant] = best = dict(min(runs, key=lambda r: r.get("wall_s", float("inf"))))
        everything = runs + ([memory] if memory else [])
        if not all(r.get("ok") for r in everything):
            best["ok"] = False
            best["errors"] = [e for r in everything for e in r.get("errors", [])] or best.get("errors")
            best.setdefault("stderr", next((r["stderr"] for r in everything if r.get("stderr")), None))
            continue
        best["cpu_s"] = min(r["cpu_s"] for r in runs)
        best["walls_s"] = [r["wall_s"] for r in runs]
        best["median_wall_s"] = statistics.median(r["wall_s"] for r in runs)
        peaks = [memory] if memory else runs
        for key in ("peak_mib", "train_peak_mib"):
            best[key] = max(r[key] for r in peaks)
        best["curves_agree"] = all(r["curves"] == best["curves"] for r in everything)
    return results


def curve_diff(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    if not (a.get("ok") and b.get("ok")):
        return None
    diffs = [
        abs(x - y)
        for name in a["curves"]
        for key in ("loss", "reward")
        for x, y in zip(a["curves"][name][key], b["curves"][name][key], strict=True)
    ]
    return max(diffs, default=0.0)


def write_prompts(folder: Path, count: int, prompts: int) -> list[str]:
    """One prompt file per policy: different words, so each policy has its own data."""
    files = []
    for i in range(count):
        path = folder / f"prompts{i}.jsonl"
        rows = []
        for j in range(prompts):
            word = WORDS[(3 * i + j) % len(WORDS)]
            rows.append(json.dumps({"prompt": f"Describe the {word} shape number {j}.", "answer": word}))
        path.write_text("\n".join(rows) + "\n")
        files.append(str(path))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.multi_policy", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--size", default="tiny", help="tiny_world.model size of the text LM (tiny, small, medium)")
    parser.add_argument("--policies", default="1,2,4", help="P values")
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps per policy")
    parser.add_argument("--prompts-per-step", type=int, default=4, help="prompts per step and policy")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--completion-length", type=int, default=32, help="completion budget in tokens")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="each adapter's learning rate")
    parser.add_argument("--forward-batch-rows", type=int, default=None, help="rows per training forward "
                        "(default: one policy's rows per step, so concurrent activations peak as sequential)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per worker")
    parser.add_argument("--mmap-threshold", type=int, default=65536, help="glibc MALLOC_MMAP_THRESHOLD_ of the "
                        "memory runs (CPU; 0: no memory run, peaks from the timing runs)")  # fmt: skip
    add_repeats_flag(parser, 3, "timing runs per variant, alternating: the fastest")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per variant")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))), flush=True)
        return 0

    from tiny_world.model import build_tiny_model

    began = time.perf_counter()
    counts = [int(p) for p in args.policies.split(",")]
    results: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="multi-policy-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "lm", kind="lm", seed=0, size=args.size)
        files = write_prompts(root, max(counts), 4 * args.prompts_per_step)
        for count in counts:
            specs = {
                variant: {
                    "model": str(model),
                    "files": files,
                    "out": str(root / f"{count}-{variant}"),
                    "policies": count,
                    "concurrent": variant == "concurrent",
                    "steps": args.steps,
                    "prompts_per_step": args.prompts_per_step,
                    "group": args.group,
                    "completion_length": args.completion_length,
                    "learning_rate": args.learning_rate,
                    "forward_batch_rows": args.forward_batch_rows,
                    "device": args.device,
                    "threads": args.threads,
                }
                for variant in VARIANTS
            }
            results[count] = measure(specs, args.repeats, args.mmap_threshold, args.timeout)

    def ratio(count: int, key: str, inverse: bool = False) -> float | None:
        c, s = results[count]["concurrent"], results[count]["sequential"]
        if not (c.get("ok") and s.get("ok")):
            return None
        return s[key] / c[key] if inverse else c[key] / s[key]

    record: dict[str, Any] = {"benchmark": "multi_policy", "device": args.device, "size": args.size}
    for count in counts:
        c, s = results[count]["concurrent"], results[count]["sequential"]
        record[f"p{count}"] = {
            variant: {k: r[k] for k in SHOWN if k in r} for variant, r in (("concurrent", c), ("sequential", s))
        }
        record[f"wall_ratio_p{count}"] = ratio(count, "wall_s", inverse=True)
        record[f"median_wall_ratio_p{count}"] = ratio(count, "median_wall_s", inverse=True)
        record[f"cpu_ratio_p{count}"] = ratio(count, "cpu_s", inverse=True)
        record[f"peak_ratio_p{count}"] = ratio(count, "peak_mib")
        record[f"train_peak_ratio_p{count}"] = ratio(count, "train_peak_mib")
        record[f"curve_max_diff_p{count}"] = curve_diff(c, s)
    top = max(counts)
    wall, peak, diff = record[f"wall_ratio_p{top}"], record[f"peak_ratio_p{top}"], record[f"curve_max_diff_p{top}"]
    record["goals"] = {
        f"wall_ratio_p{top}>=1.5": wall is not None and wall >= 1.5,
        f"peak_ratio_p{top}<=1.10": peak is not None and peak <= 1.10,
        f"curve_max_diff_p{top}<=1e-4": diff is not None and diff <= 1e-4,
    }
    record.update(
        steps=args.steps, rows_per_policy_step=args.prompts_per_step * args.group,
        completion_length=args.completion_length, forward_batch_rows=args.forward_batch_rows,
        threads=args.threads, repeats=args.repeats, wall_s=time.perf_counter() - began,
    )  # fmt: skip
    emit(record, digits=3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
