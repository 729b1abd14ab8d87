"""Benchmarks on Ray Data equal the same benchmarks in this process: predictions byte for byte, metrics."""

from __future__ import annotations

import json

import pytest
from mrjudge.cli import main

from tests.eval.fixtures import write_mmrb, write_vlrb_jsonl
from tiny_world.servers.openai_server import serve

RAY = ["--engine", "ray", "--ray-workers", "2"]


@pytest.fixture(autouse=True)
def one_thread_like_the_workers():
    """The local run on one torch thread, as each Ray worker runs: matmuls split over two threads add in
    another order, which moves option probabilities by ~1e-7 and breaks byte equality on some CPUs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _eval(benchmark, data, out, *extra):
    return main(["eval", benchmark, "--data", str(data), "--out", str(out), "--quiet", "--batch-size", "3", *extra])


def _same_run(local, remote, *files):
    for name in ("predictions.jsonl", *files):
        assert (local / name).read_bytes() == (remote / name).read_bytes(), name
    assert json.loads((local / "metrics.json").read_text()) == json.loads((remote / "metrics.json").read_text())


@pytest.mark.slow  # 45 s (mc) and 26 s (official) under load (7 agents on 2 cores)
@pytest.mark.parametrize(
    ("benchmark", "mode"),
    [("vl-rewardbench", ["--mode", "mc"]), ("vl-rewardbench", ["--mode", "official", "--k", "3"])],
)
def test_vl_rewardbench_on_ray_equals_local(ray_local, parrot_dir, tmp_path, benchmark, mode):
    data = write_vlrb_jsonl(tmp_path)
    args = ["--model", str(parrot_dir), "--max-new-tokens", "40", *mode]
    assert _eval(benchmark, data, tmp_path / "local", *args) == 0
    # The first batch judged earlier (a stopped run): the Ray run judges the rest. (The batches must be
    # the local run's, since a batch's padding moves the last bits of the option probabilities.)
    rows = (tmp_path / "local" / "predictions.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "predictions.jsonl.partial").write_text("".join(rows[:3]))
    assert _eval(benchmark, data, tmp_path / "ray", *args, *RAY) == 0
    _same_run(tmp_path / "local", tmp_path / "ray")


def test_multimodal_rewardbench_on_ray_equals_local(ray_local, parrot_dir, tmp_path):
    data = write_mmrb(tmp_path)
    args = ["--model", str(parrot_dir), "--max-new-tokens", "40"]
    assert _eval("multimodal-rewardbench", data, tmp_path / "local", *args) == 0
    assert _eval("multimodal-rewardbench", data, tmp_path / "ray", *args, *RAY) == 0
    _same_run(tmp_path / "local", tmp_path / "ray")


@pytest.mark.slow  # 35 s under load (7 agents on 2 cores)
def test_mm_vet_best_of_n_with_sampled_candidates_on_ray_equals_local(ray_local, parrot_dir, tmp_path):
    from tiny_world.bench_files import write_mmvet
    from tiny_world.servers.grader_server import make_grader_app

    data = write_mmvet(tmp_path)
    args = ["--model", str(parrot_dir), "--policy", str(parrot_dir), "--n", "2", "--policy-max-new-tokens", "12"]
    args += ["--max-new-tokens", "40"]
    with serve(make_grader_app()) as grader:
        assert _eval("mm-vet", data, tmp_path / "local", *args, "--grader-url", grader) == 0
        assert _eval("mm-vet", data, tmp_path / "ray", *args, "--grader-url", grader, *RAY) == 0
    _same_run(tmp_path / "local", tmp_path / "ray", "candidates.jsonl", "candidates_0.json", "candidates_1.json")


def test_judge_command_on_ray_equals_local(ray_local, parrot_dir, tmp_path):
    from tests.support.items import write_items

    items, _ = write_items(tmp_path, n=7)
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--max-new-tokens", "40", "--batch-size", "2"]
    assert main([*args, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert main([*args, "--output", str(tmp_path / "ray.jsonl"), *RAY]) == 0
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()
    assert len((tmp_path / "ray.jsonl").read_text().splitlines()) == 7
