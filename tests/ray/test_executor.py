"""The Ray executor itself: every batch comes back once, from the workers, and failures reach the driver."""

from __future__ import annotations

import os
from functools import partial

import pytest

from jobs.executor import BatchFn, LocalExecutor, RayConfig, RayExecutor, make_executor


def _double(batch):
    return [{**row, "x": row["x"] * 2, "pid": os.getpid()} for row in batch]


class _Loaded:
    """Stands for a model: built once per worker, counts the batches it served."""

    def __init__(self, offset: int) -> None:
        self.offset, self.served, self.pid = offset, 0, os.getpid()

    def __call__(self, batch):
        self.served += 1
        return [{"id": row["id"], "y": row["x"] + self.offset, "pid": self.pid, "served": self.served} for row in batch]


def _fail_on(bad_id, batch):
    if any(row["id"] == bad_id for row in batch):
        raise ValueError(f"row {bad_id} is bad")
    return batch


def _batches(n: int, size: int = 3):
    rows = [{"id": f"r{i}", "x": i} for i in range(n)]
    return [rows[i : i + size] for i in range(0, n, size)]


def test_cpu_tasks_and_model_actors_return_every_batch_once(ray_engine):
    batches = _batches(20)
    local = dict(LocalExecutor().map_batches(batches, BatchFn.of(_double)))
    remote = dict(ray_engine.map_batches(batches, BatchFn.of(_double)))
    strip = {i: [{k: v for k, v in row.items() if k != "pid"} for row in rows] for i, rows in local.items()}
    assert {i: [{k: v for k, v in r.items() if k != "pid"} for r in rows] for i, rows in remote.items()} == strip
    assert {row["pid"] for rows in remote.values() for row in rows} - {os.getpid()}, "ran in Ray workers"

    model = BatchFn(partial(_Loaded, 100), uses_model=True)
    served = list(ray_engine.map_batches(batches, model))
    assert sorted(i for i, _ in served) == list(range(len(batches)))
    assert all(row["y"] == row_in["x"] + 100 for i, rows in served for row, row_in in zip(rows, batches[i]))
    pids = {row["pid"] for _, rows in served for row in rows}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # a pool of at most two actors
    # Each actor built its model once and kept it: its batch counter runs up to what it served.
    by_actor = {pid: sorted(rows[0]["served"] for _, rows in served if rows[0]["pid"] == pid) for pid in pids}
    assert all(counts == list(range(1, len(counts) + 1)) for counts in by_actor.values())


def test_a_failing_batch_reaches_the_driver_with_its_message(ray_engine):
    with pytest.raises(Exception, match="row r7 is bad"):
        list(ray_engine.map_batches(_batches(12), BatchFn.of(partial(_fail_on, "r7"))))


def test_engine_choices_and_config_errors():
    assert make_executor("local").name == "local" and make_executor("ray").name == "ray"
    with pytest.raises(ValueError, match="--engine must be 'local' or 'ray'"):
        make_executor("spark")
    with pytest.raises(ValueError, match="--ray-workers"):
        RayConfig(workers=0)
    assert list(RayExecutor().map_batches([], BatchFn.of(_double))) == []  # nothing to do: Ray is not started


class _Cluster:
    """What `_width` reads of a cluster: its resources (a GPU cluster cannot exist here)."""

    def __init__(self, resources: dict[str, float]) -> None:
        self.resources = resources

    def cluster_resources(self) -> dict[str, float]:
        return self.resources


def test_pool_width_follows_the_cluster_and_the_model():
    from judge.backends.spec import ModelSpec

    gpus, cpus = _Cluster({"CPU": 64, "GPU": 8}), _Cluster({"CPU": 2})
    engine_model = BatchFn.on_models(_Loaded, ModelSpec("runs/judge", "vllm"))
    http_client = BatchFn.on_models(_Loaded, ModelSpec("http://127.0.0.1:8000/v1"))
    cpu_work = BatchFn.of(_double)
    engine = RayExecutor()
    assert engine._width(gpus, engine_model) == (8, 1.0)  # one engine per GPU
    assert engine._width(gpus, http_client) == (64, 0.0)  # clients of a server take no GPU
    assert engine._width(gpus, cpu_work) == (64, 0.0)
    assert engine._width(cpus, engine_model) == (2, 0.0)  # the transformers backend on CPU
    assert RayExecutor(RayConfig(num_gpus_per_worker=2))._width(gpus, engine_model) == (4, 2)
    assert RayExecutor(RayConfig(workers=3, num_gpus_per_worker=0.5))._width(gpus, engine_model) == (3, 0.5)


def test_loaded_models_stay_on_the_local_engine(tmp_path):
    from eval.mmvet import generate_candidates
    from jobs.judge_file import judge_file, select_work
    from judge.judging import Judge

    ray = RayExecutor()
    judge = Judge(backend=object())
    with pytest.raises(ValueError, match="give the ray engine a JudgeSpec"):
        judge_file(judge, [], tmp_path / "v.jsonl", engine=ray)
    assert select_work(judge, LocalExecutor()).uses_model is False
    with pytest.raises(ValueError, match="give the ray engine a ModelSpec"):
        generate_candidates(object(), [], 2, cache_path=tmp_path / "c.jsonl", engine=ray)
