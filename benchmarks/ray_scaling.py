"""Negatives per second on the synthetic world: the local engine against Ray Data with 1 and 2 workers.

All three runs synthesise negatives for the same records through `data_synthesis.pipeline.run_negatives`,
each into a fresh folder, and must write the same file. The generator is a randomly initialised tiny
Qwen2.5-VL through the transformers backend; it never stops early, so every batch costs exactly
`--max-new-tokens` tokens per row, a fixed workload. Ray starts once, on this machine
(`ray.init(num_cpus=CPUS)`), before the timed runs; each Ray run's time includes starting its actor pool
and loading the model in every actor, as a user's run would.

The local engine uses every core in one process (torch threads = CPUs); a Ray worker gets one CPU (Ray
sets one thread per worker), so `ray2` on a 2-core machine spreads the same cores over two processes.
On a cluster, workers are GPUs or machines and the local engine has no equivalent.

    python -m benchmarks.ray_scaling [--items 256] [--batch-size 8] [--max-new-tokens 48] [--size small]

The engines run `--repeats` times (3), taking turns in a rotated order, and the figures are each engine's
median run, as pyperf reports a short benchmark: a run is 10–20 s, and three single bare runs read two
workers' steady rate at 1.59×, 2.30× and 1.71× one worker's.

Run time: about 3 min bare on 2 quiet cores (a repeat of the three engines is ~50 s); under load (7 agents on
2 cores) the local engine's two torch threads fare worst (1.4 items/s against 17.9 on a quiet machine,
docs/scale-out.md).
Prints one JSON line with `local_items_per_s`, `ray1_items_per_s`, `ray2_items_per_s` (whole stage, start-up
included), `*_steady_items_per_s` (from the first batch back to the last: the rate once the pool is up),
and the stage's items/s with the model-free scene generator (`scene_*`), where Ray's per-batch overhead
shows on its own; each engine's `*_runs`, the ratios by repeat (`*_by_repeat`) and their `*_spread`
((max − min) / median).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.equal_work import force_in_folder
from benchmarks.kit import add_repeats_flag, emit, median_run, spread
from data_synthesis.pipeline import run_negatives
from data_synthesis.world import write_world
from jobs.executor import Executor, LocalExecutor, RayConfig, RayExecutor
from judge.backends.spec import ModelSpec
from tiny_world.model import build_tiny_model


class Clocked:
    """An engine that notes when each batch comes back, to tell start-up from the steady rate."""

    def __init__(self, engine: Executor) -> None:
        self.engine, self.name, self.arrivals = engine, engine.name, []

    def map_batches(self, batches, fn):
        for index, outputs in self.engine.map_batches(batches, fn):
            self.arrivals.append((time.perf_counter(), len(batches[index])))
            yield index, outputs


def timed(world: Path, out: Path, engine: Executor, **options) -> tuple[float, float]:
    """(wall seconds of the whole stage, items/s from the first batch back to the last)."""
    clocked = Clocked(engine)
    start = time.perf_counter()
    _, summary = run_negatives(world, out, engine=clocked, show_progress=False, **options)
    wall = time.perf_counter() - start
    assert summary["n_processed_now"] == summary["n_in"], summary
    (first, _), (last, _) = clocked.arrivals[0], clocked.arrivals[-1]
    after_first = sum(n for _, n in clocked.arrivals[1:])
    return wall, after_first / (last - first) if last > first else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--size", default="small", help="tiny-model size (tiny_world.model)")
    parser.add_argument("--scene-items", type=int, default=8000, help="records for the model-free scene runs")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_flag(parser, 3, "runs of each engine, in turns; medians are the figures")
    args = parser.parse_args()

    import ray

    torch.manual_seed(args.seed)
    results: dict[str, object] = {"benchmark": "ray_scaling", "stage": "negatives", "cpus": args.cpus}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        model = build_tiny_model(folder / "model", seed=args.seed, size=args.size)
        force_in_folder(model, args.max_new_tokens)  # every call, in every process, generates max_new_tokens
        world, scene_world = folder / "world", folder / "scene-world"
        write_world(args.items, args.seed, world)
        write_world(args.scene_items, args.seed, scene_world, size=56)
        spec = ModelSpec(str(model), "hf", {"device": "cpu"})
        model_options = dict(
            generator="model",
            model=spec,
            n=3,
            seed=args.seed,
            batch_size=args.batch_size,
            max_attempts=1,
            max_new_tokens=args.max_new_tokens,
        )
        scene_options = dict(generator="scene", n=3, seed=args.seed, batch_size=64)

        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        results["ray_init_s"] = time.perf_counter() - start
        engines = {
            "local": LocalExecutor(),
            "ray1": RayExecutor(RayConfig(workers=1)),
            "ray2": RayExecutor(RayConfig(workers=2)),
        }
        torch.set_num_threads(args.cpus)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
        names = list(engines)
        for repeat in range(args.repeats):  # the engines take turns, the order rotated each repeat
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                wall, steady = timed(world, folder / f"{name}-{repeat}", engines[name], **model_options)
                scene_wall, _ = timed(scene_world, folder / f"scene-{name}-{repeat}", engines[name], **scene_options)
                runs[name].append({"wall": wall, "steady": steady, "scene": args.scene_items / scene_wall})
        ray.shutdown()
        results["outputs_equal"] = all(
            filecmp.cmp(folder / "local-0" / "negatives.jsonl", folder / f"{name}-{r}" / "negatives.jsonl", False)
            and filecmp.cmp(
                folder / "scene-local-0" / "negatives.jsonl", folder / f"scene-{name}-{r}" / "negatives.jsonl", False
            )
            for name in names
            for r in range(args.repeats)
        )
    for name, engine_runs in runs.items():
        median = median_run(engine_runs, key=lambda run: run["wall"])  # the median run by items/s too
        results[f"{name}_items_per_s"] = args.items / median["wall"]
        results[f"{name}_steady_items_per_s"] = median_run(engine_runs, key=lambda run: run["steady"])["steady"]
        results[f"{name}_wall_s"] = median["wall"]
        results[f"scene_{name}_items_per_s"] = median_run(engine_runs, key=lambda run: run["scene"])["scene"]
        results[f"{name}_items_per_s_runs"] = [args.items / run["wall"] for run in engine_runs]
        results[f"{name}_steady_items_per_s_runs"] = [run["steady"] for run in engine_runs]
    results["ray2_over_local"] = results["ray2_items_per_s"] / results["local_items_per_s"]
    results["ray2_over_ray1"] = results["ray2_items_per_s"] / results["ray1_items_per_s"]
    results["steady_ray2_over_ray1"] = results["ray2_steady_items_per_s"] / results["ray1_steady_items_per_s"]
    by_repeat = [one["wall"] / two["wall"] for one, two in zip(runs["ray1"], runs["ray2"])]  # items/s: ray2 / ray1
    steady_by_repeat = [two["steady"] / one["steady"] for one, two in zip(runs["ray1"], runs["ray2"])]
    results.update(
        repeats=args.repeats,
        ray2_over_ray1_by_repeat=by_repeat,
        ray2_over_ray1_spread=spread(by_repeat),
        steady_ray2_over_ray1_by_repeat=steady_by_repeat,
        steady_ray2_over_ray1_spread=spread(steady_by_repeat),
    )
    results.update(
        model=f"{args.size} Qwen2.5-VL (random init, float32), transformers backend",
        items=args.items,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        scene_items=args.scene_items,
        local_torch_threads=args.cpus,
        ray_threads_per_worker=1,
        equal_work="every call generates exactly max_new_tokens tokens (min_new_tokens in the model folder's "
        "generation_config.json, read by every worker); outputs_equal: every engine wrote the same negatives",
    )
    emit(results)


if __name__ == "__main__":
    main()
