"""The data engine end to end: `mrjudge synth` stage by stage and `synth all`, and kill-and-resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mrjudge.cli import main
from PIL import Image

from judge.images import load_image


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_synth_all_on_the_world(tmp_path, capsys):
    config = tmp_path / "synth.yaml"
    config.write_text(f"out: {tmp_path / 'out'}\nworld_n: 120\nassemble:\n  val_fraction: 0.2\n")
    assert main(["synth", "all", "--config", str(config)]) == 0
    out = tmp_path / "out"
    summary = json.loads((out / "synth.summary.json").read_text())
    assert summary["negatives"]["negatives"] == 360 and summary["negatives"]["rows_without_negatives"] == 0
    assert summary["distilled"]["kept_fraction"] == 1.0  # the scene reasoner is exact
    assert summary["distilled"]["sft_train"] + summary["distilled"]["sft_val"] == 120
    sft = _read(out / "sft" / "train.jsonl")
    assert load_image(sft[0]["images"][0], out / "sft").size == (112, 112)  # paths resolve from their file
    rl = _read(out / "rl" / "val.jsonl")
    assert rl and all(item["label"] is not None for item in rl)
    train_groups = {row["id"] for row in _read(out / "rl" / "train.jsonl")}
    assert not train_groups & {row["id"] for row in rl}
    kinds = Counter(row["source"] for row in _read(out / "records.jsonl"))
    assert set(kinds) == {"world/attribute", "world/count", "world/spatial", "world/ocr", "world/arithmetic"}
    # Re-running resumes every stage: nothing is processed again.
    assert main(["synth", "all", "--config", str(config)]) == 0
    again = json.loads((out / "synth.summary.json").read_text())
    assert again["negatives"]["n_processed_now"] == 0 and again["distilled"]["n_processed_now"] == 0


def test_stages_into_separate_folders(tmp_path, capsys):
    world, neg, desc, items, dist = (tmp_path / name for name in ("world", "neg", "desc", "items", "dist"))
    assert main(["synth", "world", "--n", "12", "--seed", "3", "--out", str(world)]) == 0
    assert (
        main(["synth", "negatives", "--input", str(world), "--out", str(neg), "--generator", "scene", "--n", "2"]) == 0
    )
    assert main(["synth", "describe", "--input", str(neg), "--out", str(desc)]) == 0
    assert (
        main(
            [
                "synth",
                "assemble",
                "--input",
                str(desc),
                "--out",
                str(items),
                "--max-options",
                "3",
                "--val-fraction",
                "0.5",
            ]
        )
        == 0
    )
    assert main(["synth", "distill", "--input", str(items), "--out", str(dist)]) == 0
    rows = _read(dist / "distilled.jsonl")
    assert len(rows) == 12 and all(r["kept"] for r in rows)
    item = _read(items / "items.jsonl")[0]
    assert load_image(item["image"], items).size == (112, 112)  # image paths follow the rows between folders
    assert 2 <= len(item["candidates"]) <= 3


def test_records_from_a_jsonl_source(tmp_path, capsys):
    Image.new("RGB", (40, 40), "red").save(tmp_path / "a.png")
    src = tmp_path / "data.jsonl"
    src.write_text(json.dumps({"q": "Colour?", "a": "Red.", "img": "a.png"}) + "\n")
    args = ["synth", "records", "--source", str(src), "--out", str(tmp_path / "out")]
    assert main([*args, "--question-field", "q", "--answer-field", "a", "--image-field", "img"]) == 0
    (record,) = _read(tmp_path / "out" / "records.jsonl")
    assert record["question"] == "Colour?" and record["answer"] == "Red."
    assert main(args) == 2  # default column names are not there: a clear error, no traceback
    assert "field 'question'" in capsys.readouterr().err


def test_scene_generator_refuses_other_data(tmp_path, capsys):
    (tmp_path / "records.jsonl").write_text(
        json.dumps({"id": "x", "image": None, "question": "q", "answer": "a"}) + "\n"
    )
    assert main(["synth", "negatives", "--input", str(tmp_path), "--out", str(tmp_path), "--generator", "scene"]) == 2
    assert "--generator model" in capsys.readouterr().err


def _negatives_cmd(model: Path, world: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "mrjudge.cli", "synth", "negatives", "--input", str(world), "--out", str(out),
        "--generator", "model", "--model", str(model), "--batch-size", "1", "--max-attempts", "1",
        "--max-new-tokens", "48", "--allow-empty",  # an untrained model writes no usable negative
    ]  # fmt: skip


@pytest.mark.slow  # three model-negatives processes: 182 s under load (7 agents on 2 cores)
def test_sigkill_then_resume_equals_an_uninterrupted_run(tiny_vlm_dir, tmp_path):
    world = tmp_path / "world"
    assert main(["synth", "world", "--n", "24", "--out", str(world)]) == 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    whole = tmp_path / "whole"
    subprocess.run(_negatives_cmd(tiny_vlm_dir, world, whole), check=True, env=env, capture_output=True, timeout=300)

    killed = tmp_path / "killed"
    partial = killed / "negatives.jsonl.partial"
    proc = subprocess.Popen(
        _negatives_cmd(tiny_vlm_dir, world, killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and len(partial.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the job finished before it could be killed; give it more work"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = sum(line.endswith("}") for line in partial.read_text().splitlines())  # a torn last line is not done
    assert not (killed / "negatives.jsonl").exists() and 4 <= done_before < 24

    subprocess.run(_negatives_cmd(tiny_vlm_dir, world, killed), check=True, env=env, capture_output=True, timeout=300)
    assert (killed / "negatives.jsonl").read_bytes() == (whole / "negatives.jsonl").read_bytes()
    summary = json.loads((killed / "negatives.summary.json").read_text())
    assert summary["n_processed_now"] == 24 - done_before


def test_reasoner_style_reaches_the_traces(tmp_path):
    from data_synthesis.pipeline import SynthConfig, run_all

    run_all(SynthConfig(out=str(tmp_path), world_n=10, reasoner_style="restate"), show_progress=False)
    rows = _read(tmp_path / "distilled.jsonl")
    assert all(r["versions"]["reason"] == "scene_reasoner:restate" for r in rows)
    assert all(r["completion"].count(", yes.") == 1 for r in rows if r["kept"])


def test_synth_world_shaded(tmp_path, capsys):
    assert main(["synth", "world", "--n", "4", "--size", "84", "--shaded", "--out", str(tmp_path)]) == 0
    scenes = _read(tmp_path / "scenes.jsonl")
    assert len(scenes) == 4 and all(row["scene"]["shaded"] for row in scenes)
    assert load_image("images/world-000000.png", tmp_path).getpixel((83, 83)) != (255, 255, 255)


def test_a_misspelt_stage_option_is_refused_before_any_work(tmp_path):
    """The stage functions take their run options as keywords (`StageOptions`): a typo is a TypeError naming
    it, as a plain signature would give, and a bad fraction is refused before the input is even read."""
    from data_synthesis.pipeline import run_describe, run_negatives

    with pytest.raises(TypeError, match=r"\['batchsize'\]; a stage takes \['shard', 'batch_size'"):
        run_negatives(tmp_path / "nowhere", tmp_path, batchsize=4)
    with pytest.raises(ValueError, match=r"--max-failed-fraction must be in \[0, 1\], got 2"):
        run_describe(tmp_path / "nowhere", tmp_path, max_failed_fraction=2)


def test_every_stage_makes_the_model_or_scene_choice_alike(tmp_path):
    """Each stage's kind is its model-free one or "model", and "model" needs a model: one check, one wording,
    for the negatives generator, the describer, the reasoner, the rewriter and a `synth all` config."""
    from data_synthesis.pipeline import SynthConfig, run_assemble, run_describe, run_distill, run_negatives
    from data_synthesis.world import write_world

    write_world(6, 0, tmp_path)
    with pytest.raises(ValueError, match=r"^--generator must be 'scene' or 'model', got 'llm'$"):
        run_negatives(tmp_path, tmp_path, generator="llm", show_progress=False)
    with pytest.raises(ValueError, match=r"^--generator model needs --model \(a folder, hub id or server URL\)$"):
        run_negatives(tmp_path, tmp_path, generator="model", show_progress=False)
    run_negatives(tmp_path, tmp_path, show_progress=False)
    with pytest.raises(ValueError, match=r"^--describer model needs --model$"):
        run_describe(tmp_path, tmp_path, describer="model", show_progress=False)
    run_describe(tmp_path, tmp_path, show_progress=False)
    run_assemble(tmp_path, tmp_path)
    with pytest.raises(ValueError, match=r"^--reasoner model needs --reasoner-model$"):
        run_distill(tmp_path, tmp_path, reasoner="model", show_progress=False)
    with pytest.raises(ValueError, match=r"^--rewriter must be 'rules' or 'model', got 'scene'$"):
        run_distill(tmp_path, tmp_path, rewriter="scene", show_progress=False)
    with pytest.raises(ValueError, match=r"^--rewriter model needs --rewriter-model \(or --reasoner-model\)$"):
        run_distill(tmp_path, tmp_path, rewriter="model", show_progress=False)
    with pytest.raises(ValueError, match=r"^describer must be 'scene' or 'model', got 'human'$"):
        SynthConfig(describer="human")
    assert not (tmp_path / "distilled.jsonl").exists()  # every refusal came before any work
