"""Where batch work runs: in this process, or across a Ray cluster with Ray Data.

This is a batch *executor*, not an inference engine (those are the backends in `judge.backends`). Every
per-row job in the toolkit (the synthesis stages, judging a benchmark, sampling candidates) is the same
loop, written once as `jobs.resumable.run_resumable`: the driver cuts the rows still to do into batches,
a function maps each batch to output rows, and the driver appends them to a resumable JSONL file. An
executor runs the middle step; the `--engine local|ray` flag (and the `engine=` arguments) pick one:

- `LocalExecutor` calls the function in this process, batch after batch;
- `RayExecutor` hands the same batches to a Ray Data pipeline: an actor pool for model work (each actor
  loads the model once: one vLLM engine per GPU, or the transformers backend on CPU) and plain tasks for
  CPU work. Batches come back as they finish and are written by the driver, so resume and atomic output
  are the same as on the local executor.

The driver forms the batches on both executors, so a batch holds the same rows whichever runs it; with
per-item seeds (and a backend that is deterministic for a given batch) the Ray run's records equal the
local run's. We do not schedule anything ourselves: Ray places the actors and tasks.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["BatchFn", "Executor", "LocalExecutor", "RayConfig", "RayExecutor", "make_executor"]

Batch = list[Any]


class _Fixed:
    """A build step that returns a function made earlier (picklable, unlike a lambda under plain pickle)."""

    def __init__(self, fn: Callable[[Batch], Batch]) -> None:
        self.fn = fn

    def __call__(self) -> Callable[[Batch], Batch]:
        return self.fn


@dataclass(frozen=True)
class BatchFn:
    """How a worker maps a batch of rows to output rows.

    `build()` runs once per worker and returns the function, so a model is loaded once per actor, not once
    per batch, and never in the driver of a Ray run. `build` must pickle (module-level functions and
    `functools.partial` of them do; Ray also takes closures).
    """

    build: Callable[[], Callable[[Batch], Batch]]
    uses_model: bool = False
    """Model work runs in an actor pool (one model per actor); the rest in stateless tasks."""
    name: str = "batch"
    local_model: bool = True
    """False when the model sits behind an HTTP endpoint: its actors are clients and take no GPU."""

    @classmethod
    def of(cls, fn: BatchFn | Callable[[Batch], Batch], name: str = "batch") -> BatchFn:
        """`fn` itself if it is a `BatchFn`; otherwise a CPU `BatchFn` around the ready-made function."""
        return fn if isinstance(fn, BatchFn) else cls(build=_Fixed(fn), name=name)

    @classmethod
    def on_models(cls, build: Callable[[], Callable[[Batch], Batch]], *specs: Any, name: str = "batch") -> BatchFn:
        """Model work over `specs` (`ModelSpec`s, None for a part without a model), built once per actor."""
        backends = [spec.backend_name for spec in specs if spec is not None]
        return cls(build, uses_model=True, name=name, local_model=any(b != "openai" for b in backends))


class Executor(Protocol):
    """Maps batches through a `BatchFn`, yielding `(batch index, outputs)` as each batch finishes."""

    name: str

    def map_batches(self, batches: Sequence[Batch], fn: BatchFn) -> Iterator[tuple[int, Batch]]: ...


class LocalExecutor:
    """This process, one batch at a time, in order."""

    name = "local"

    def map_batches(self, batches: Sequence[Batch], fn: BatchFn) -> Iterator[tuple[int, Batch]]:
        if not batches:
            return
        run = fn.build()
        for index, batch in enumerate(batches):
            yield index, list(run(batch))


@dataclass
class RayConfig:
    """Where and how wide a Ray run goes (`--engine ray --ray-address … --ray-workers N`)."""

    address: str | None = None
    """A running cluster (`ray://host:10001` or `auto`); None starts Ray on this machine if none is running."""
    workers: int | None = None
    """Actors in a model pool, or tasks at once for CPU work; None: one per GPU, or one per CPU."""
    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float | None = None
    """GPUs per model actor; None: 1 when the cluster has GPUs, else 0."""
    init_options: dict[str, Any] = field(default_factory=dict)
    """Extra `ray.init` keywords when this process starts Ray (e.g. `num_cpus`)."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"ray workers must be at least 1, got {self.workers} (fix --ray-workers)")
        if self.num_cpus_per_worker <= 0:
            raise ValueError(f"num_cpus_per_worker must be > 0, got {self.num_cpus_per_worker}")


class _ModelWorker:
    """A Ray Data actor: builds the batch function once, then maps pickled batches."""

    def __init__(self, fn: BatchFn) -> None:
        self.run = fn.build()

    def __call__(self, rows: dict[str, Any]) -> dict[str, Any]:
        return _map_payloads(self.run, rows)


def _map_payloads(run: Callable[[Batch], Batch], rows: dict[str, Any]) -> dict[str, Any]:
    payloads = [
        pickle.dumps(list(run(pickle.loads(blob))), protocol=pickle.HIGHEST_PROTOCOL) for blob in rows["payload"]
    ]
    return {"index": rows["index"], "payload": payloads}


def _cpu_task(rows: dict[str, Any], fn: BatchFn) -> dict[str, Any]:
    return _map_payloads(fn.build(), rows)


class RayExecutor:
    """Ray Data: batches become one-row blocks, mapped by an actor pool (model work) or tasks (CPU work).

    Each Ray row carries one whole driver-made batch (pickled), so Ray never re-cuts batches and the rows
    a model sees together are the local executor's. Results stream back in completion order.
    """

    name = "ray"

    def __init__(self, config: RayConfig | None = None) -> None:
        self.config = config or RayConfig()

    def _ray(self) -> Any:
        try:
            import ray
            import ray.data
        except ImportError as exc:
            raise ImportError(
                "--engine ray needs Ray Data: pip install 'mr-judge[ray]' (or pip install 'ray[data]')"
            ) from exc
        if not ray.is_initialized():
            options = {"include_dashboard": False, "logging_level": logging.WARNING, **self.config.init_options}
            ray.init(address=self.config.address, **options)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the driver draws its own bar over finished batches
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        # Its only warning is that Ray's own bars are off; ours are on, in the driver.
        logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
        return ray

    def _width(self, ray: Any, fn: BatchFn) -> tuple[int, float]:
        """(workers, GPUs per worker) for this job on this cluster."""
        resources = ray.cluster_resources()
        gpus = self.config.num_gpus_per_worker
        if gpus is None:
            gpus = 1.0 if fn.uses_model and fn.local_model and resources.get("GPU", 0) >= 1 else 0.0
        if self.config.workers is not None:
            return self.config.workers, gpus
        if gpus > 0:
            return max(1, int(resources.get("GPU", 0) // gpus)), gpus
        return max(1, int(resources.get("CPU", 1) // self.config.num_cpus_per_worker)), gpus

    def map_batches(self, batches: Sequence[Batch], fn: BatchFn) -> Iterator[tuple[int, Batch]]:
        if not batches:
            return
        ray = self._ray()
        workers, gpus = self._width(ray, fn)
        items = [
            {"index": index, "payload": pickle.dumps(list(batch), protocol=pickle.HIGHEST_PROTOCOL)}
            for index, batch in enumerate(batches)
        ]
        dataset = ray.data.from_items(items, override_num_blocks=len(items))
        common = dict(batch_size=1, num_cpus=self.config.num_cpus_per_worker)
        if fn.uses_model:
            mapped = dataset.map_batches(
                _ModelWorker,
                fn_constructor_args=(fn,),
                compute=ray.data.ActorPoolStrategy(size=min(workers, len(items))),
                num_gpus=gpus,
                **common,
            )
        else:
            mapped = dataset.map_batches(
                _cpu_task, fn_args=(fn,), compute=ray.data.TaskPoolStrategy(size=min(workers, len(items))), **common
            )
        for row in mapped.iter_rows():
            yield int(row["index"]), pickle.loads(row["payload"])


def make_executor(name: str = "local", config: RayConfig | None = None) -> Executor:
    """`local` or `ray` (with `config`); anything else is refused with the choices."""
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(config)
    raise ValueError(f"--engine must be 'local' or 'ray', got {name!r}")
