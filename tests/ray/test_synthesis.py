"""Synthesis on Ray Data equals synthesis in this process, record for record, and resumes the same way."""

from __future__ import annotations

import json
from pathlib import Path

from mrjudge.cli import main

from data_synthesis.pipeline import SynthConfig, run_all, run_negatives
from jobs.jsonl import read_jsonl
from judge.backends.spec import ModelSpec

OUTPUTS = [
    "records.jsonl",
    "negatives.jsonl",
    "described.jsonl",
    "items.jsonl",
    "rl/train.jsonl",
    "rl/val.jsonl",
    "distilled.jsonl",
    "sft/train.jsonl",
    "sft/val.jsonl",
]


def _rows(path: Path) -> list[dict]:
    return sorted((row for _, row in read_jsonl(path)), key=lambda row: row["id"])


def test_synth_all_on_ray_writes_the_local_files(ray_local, tmp_path):
    common = dict(world_n=48, batch_size=5, seed=3)
    local = run_all(SynthConfig(out=str(tmp_path / "local"), **common), show_progress=False)
    remote = run_all(
        SynthConfig(out=str(tmp_path / "ray"), engine="ray", ray={"workers": 2}, **common), show_progress=False
    )
    for name in OUTPUTS:
        a, b = _rows(tmp_path / "local" / name), _rows(tmp_path / "ray" / name)
        assert a and a == b, name
        # Not only the same records: the same bytes, in the same order.
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name
    for stage in ("negatives", "described", "distilled"):
        assert local[stage]["engine"] == "local" and remote[stage]["engine"] == "ray"
        drop = ("engine", "wall_s")
        assert {k: v for k, v in local[stage].items() if k not in drop} == {
            k: v for k, v in remote[stage].items() if k not in drop
        }


def test_model_negatives_in_a_ray_actor_pool_equal_local_and_resume(ray_local, parrot_dir, tmp_path):
    from data_synthesis.world import write_world

    world = tmp_path / "world"
    write_world(12, 0, world, size=56)
    options = dict(generator="model", n=2, seed=5, batch_size=4, max_attempts=2, max_new_tokens=12)
    spec = ModelSpec(str(parrot_dir), "hf", {"device": "cpu"})
    local_rows, local = run_negatives(world, tmp_path / "local", model=spec, show_progress=False, **options)

    from jobs.executor import RayConfig, RayExecutor

    engine = RayExecutor(RayConfig(workers=2))
    # A run that stopped after its first two batches: their rows are in the .partial file.
    out = tmp_path / "ray"
    out.mkdir()
    done = [row for _, row in read_jsonl(tmp_path / "local" / "negatives.jsonl")][:8]
    (out / "negatives.jsonl.partial").write_text("".join(json.dumps(row) + "\n" for row in done))
    ray_rows, remote = run_negatives(world, out, model=spec, show_progress=False, engine=engine, **options)
    assert remote["n_processed_now"] == 4 and remote["engine"] == "ray"
    assert ray_rows == local_rows and len(ray_rows) == 12
    assert (out / "negatives.jsonl").read_bytes() == (tmp_path / "local" / "negatives.jsonl").read_bytes()
    assert local["mean_attempts"] == remote["mean_attempts"] and local["rejected"] == remote["rejected"]


def test_synth_stage_cli_runs_on_ray(ray_local, tmp_path, capsys):
    out = tmp_path / "synth"
    assert main(["synth", "world", "--n", "10", "--out", str(out), "--size", "56"]) == 0
    capsys.readouterr()
    args = ["synth", "negatives", "--input", str(out), "--out", str(out), "--batch-size", "4"]
    assert main([*args, "--engine", "ray", "--ray-workers", "2"]) == 0
    assert "negatives rows 10 in → 10 out" in " ".join(capsys.readouterr().out.split())  # the stage's table
    summary = json.loads((out / "negatives.summary.json").read_text())
    assert summary["engine"] == "ray" and summary["n_out"] == 10
    assert main([*args, "--ray-workers", "2"]) == 2
    assert "--ray-workers need --engine ray" in capsys.readouterr().err
