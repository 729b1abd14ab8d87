"""The stage runner: shards partition the input, output resumes, summaries are written."""

from __future__ import annotations

import json

import pytest

from data_synthesis.stage_runner import Shard, read_stage, run_stage


def _double(rows):
    return [{"id": r["id"], "value": 2 * r["value"]} for r in rows]


def test_shards_partition_and_merge(tmp_path):
    rows = [{"id": f"x{i}", "value": i} for i in range(50)]
    whole, _ = run_stage("double", rows, _double, tmp_path / "whole", show_progress=False)
    for index in range(3):
        run_stage(
            "double", rows, _double, tmp_path / "sharded", shard=Shard(index, 3), batch_size=7, show_progress=False
        )
    merged = read_stage(tmp_path / "sharded", "double")
    assert sorted(merged, key=lambda r: r["id"]) == sorted(whole, key=lambda r: r["id"])
    assert len({r["id"] for r in merged}) == 50
    summary = json.loads((tmp_path / "sharded" / "double-1-of-3.summary.json").read_text())
    assert summary["shard"] == "1/3" and summary["n_out"] == summary["n_in"]


def test_resume_processes_only_what_is_missing(tmp_path):
    rows = [{"id": i, "value": i} for i in range(10)]
    seen = []

    def process(batch):
        seen.extend(r["id"] for r in batch)
        return _double(batch)

    (tmp_path / "double.jsonl.partial").write_text(
        "".join(json.dumps({"id": i, "value": 2 * i}) + "\n" for i in range(4))
    )
    out, summary = run_stage("double", rows, process, tmp_path, show_progress=False)
    assert seen == list(range(4, 10)) and summary["n_processed_now"] == 6
    assert [r["id"] for r in out] == list(range(10))


@pytest.mark.parametrize("text", ["1", "3/3", "a/b", "-1/2"])
def test_bad_shard_specs(text):
    with pytest.raises(ValueError, match="shard"):
        Shard.parse(text)


def test_missing_stage_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="mrjudge synth negatives"):
        read_stage(tmp_path, "negatives")
