"""`mrjudge eval` end to end on the fixtures: the tiny judge through transformers and over HTTP, resume,
scoring a predictions file, and the `evaluate` modules giving the CLI's numbers."""

from __future__ import annotations

import json

import evaluate
import pytest
from mrjudge.cli import main

from eval.metrics import module_path
from tests.eval.fixtures import write_mmrb, write_vlrb_jsonl
from tiny_world.servers.openai_server import make_app, serve

VLRB_KEYS = {
    "overall_accuracy",
    "macro_accuracy",
    "accuracy_general",
    "accuracy_hallucination",
    "accuracy_reasoning",
    "n",
    "unparsed",
}


RUN_ONLY = ("consistency", "data_")  # metrics.json keys a run has that the evaluate modules cannot know


def _metrics(out):
    return json.loads((out / "metrics.json").read_text())


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _eval(benchmark, data, out, *extra):
    return main(["eval", benchmark, "--data", str(data), "--out", str(out), "--quiet", "--batch-size", "4", *extra])


def test_vl_rewardbench_mc_mode_with_the_hf_judge_resumes_and_rescores(parrot_dir, tmp_path):
    data = write_vlrb_jsonl(tmp_path)
    out = tmp_path / "run"
    assert _eval("vl-rewardbench", data, out, "--model", str(parrot_dir), "--max-new-tokens", "40") == 0
    metrics = _metrics(out)
    assert VLRB_KEYS <= set(metrics) and "consistency" in metrics and metrics["n"] == 8
    rows = _rows(out / "predictions.jsonl")
    assert [r["id"] for r in rows][:2] == ["hallucination_pair_1", "RLAIF-V_2"]
    assert all(len(r["raw"]) == 2 and r["raw"][0].startswith("<think>") for r in rows)
    report = (out / "report.md").read_text()
    assert "GPT-4o (published) | – | – | – | 65.8 | 62.4" in report
    assert "MR. Judge-7B (SFT+RL) (published, MR. Judge paper protocol) | 68.7 | 83.2 | 61.4 | 75.5 | 71.1" in report
    assert "measured under the official protocol: GPT-4o, Gemini-1.5-Pro, Claude-3.5-Sonnet" in report
    assert "Skywork-VL-Reward-7B (scalar reward)" in report and metrics["data_rows"] == 8
    assert (out / "vl_rewardbench_accuracy.png").stat().st_size > 0
    assert (out / "vl_rewardbench_consistency.png").stat().st_size > 0

    # A re-run finds every id done: nothing is judged again and the numbers do not move.
    before = (out / "predictions.jsonl").read_bytes()
    assert _eval("vl-rewardbench", data, out, "--model", str(parrot_dir), "--max-new-tokens", "40") == 0
    assert (out / "predictions.jsonl").read_bytes() == before and _metrics(out) == metrics

    # Scoring the predictions file without a model gives the same numbers.
    scored = tmp_path / "scored"
    assert _eval("vl-rewardbench", data, scored, "--predictions", str(out / "predictions.jsonl")) == 0
    assert _metrics(scored) == metrics

    # The evaluate module agrees with the CLI (consistency and the data's hash are the run's, not metric inputs).
    module = evaluate.load(module_path("vl_rewardbench"))
    result = module.compute(
        predictions=[r["pred"] for r in rows], references=[r["preferred"] for r in rows], ids=[r["id"] for r in rows]
    )
    assert result == {k: v for k, v in metrics.items() if not k.startswith(RUN_ONLY)}


def test_vl_rewardbench_official_mode_over_http_counts_unparsed(parrot_loaded, tmp_path):
    data = write_vlrb_jsonl(tmp_path)
    out = tmp_path / "run"
    with serve(make_app(parrot_loaded)) as url:
        args = ["--model", url, "--mode", "official", "--k", "3", "--max-new-tokens", "24", "--limit", "4"]
        assert _eval("vl-rewardbench", data, out, *args) == 0
    metrics = _metrics(out)
    # The parrot answers in MR. Judge's format, which the official regex does not read: every call is
    # doesntMatch, so every item leaves the denominators and the accuracies are undefined.
    assert (metrics["n"], metrics["unparsed"], metrics["overall_accuracy"]) == (4, 4, None)
    rows = _rows(out / "predictions.jsonl")
    assert all(len(r["calls"]) == 3 and r["status"] == "doesntMatch" for r in rows)
    assert "k=3 calls per item" in (out / "report.md").read_text()


def test_scoring_a_predictions_file_gives_exact_metrics(tmp_path):
    data = write_vlrb_jsonl(tmp_path)
    preds = tmp_path / "preds.jsonl"
    values = [0, 0, None, 0, 1, 1, 0, 0]  # hand-scored in vl_rewardbench/test_readings.test_metrics_by_hand
    ids = [json.loads(line)["id"] for line in data.read_text().splitlines()]
    preds.write_text("".join(json.dumps({"id": i, "pred": p}) + "\n" for i, p in zip(ids, values)))
    assert _eval("vl-rewardbench", data, tmp_path / "out", "--predictions", str(preds)) == 0
    metrics = _metrics(tmp_path / "out")
    assert metrics["overall_accuracy"] == pytest.approx(5 / 7)
    assert metrics["macro_accuracy"] == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    assert (metrics["n"], metrics["unparsed"]) == (8, 1)


def test_bad_predictions_file_and_missing_model(tmp_path, capsys):
    data = write_vlrb_jsonl(tmp_path)
    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"id": "RLAIF-V_2"}\n')
    assert _eval("vl-rewardbench", data, tmp_path / "o", "--predictions", str(preds)) == 2
    assert "line 1: needs fields 'id' and 'pred'" in capsys.readouterr().err
    assert _eval("vl-rewardbench", data, tmp_path / "o") == 2
    assert "give --model" in capsys.readouterr().err


def test_multimodal_rewardbench_both_modes_and_evaluate_module(parrot_dir, parrot_loaded, tmp_path):
    data = write_mmrb(tmp_path)
    out = tmp_path / "mc"
    assert _eval("multimodal-rewardbench", data, out, "--model", str(parrot_dir), "--max-new-tokens", "40") == 0
    metrics = _metrics(out)
    assert metrics["n"] == 8 and "consistency" in metrics and "accuracy_safety_bias" in metrics
    assert "Claude-3.5-Sonnet (published)" in (out / "report.md").read_text()
    rows = _rows(out / "predictions.jsonl")
    module = evaluate.load(module_path("multimodal_rewardbench"))
    result = module.compute(
        predictions=[r["pred"] for r in rows],
        references=[r["preferred"] for r in rows],
        ids=[r["id"] for r in rows],
        categories=[r["source"] for r in rows],
    )
    assert result == {k: v for k, v in metrics.items() if not k.startswith(RUN_ONLY)}

    official = tmp_path / "official"
    with serve(make_app(parrot_loaded)) as url:
        args = ["--model", url, "--mode", "official", "--max-new-tokens", "24", "--limit", "3"]
        assert _eval("multimodal-rewardbench", data, official, *args) == 0
    metrics = _metrics(official)
    assert (metrics["n"], metrics["unparsed"]) == (3, 3)  # no [[A]]/[[B]] from the parrot: coin flips
    assert metrics["overall_accuracy"] in (0.0, 1 / 3, 2 / 3, 1.0)


def test_mm_vet_best_of_n_from_the_command_line(parrot_dir, tmp_path, capsys):
    from tests.eval.fixtures import FIRST, ORACLE, write_mmvet, write_mmvet_candidates
    from tiny_world.servers.grader_server import make_grader_app

    data = write_mmvet(tmp_path)
    files = [str(p) for p in write_mmvet_candidates(tmp_path)]
    out = tmp_path / "run"
    with serve(make_grader_app()) as grader:
        args = ["--model", str(parrot_dir), "--candidates", *files, "--grader-url", grader, "--max-new-tokens", "40"]
        assert _eval("mm-vet", data, out, *args) == 0
    metrics = _metrics(out)
    assert {k: metrics[k] for k in FIRST} == pytest.approx(FIRST)
    assert {k: metrics[k] for k in ORACLE} == pytest.approx(ORACLE)
    assert "MM-Vet best-of-3 on 4 questions: first 50.0" in capsys.readouterr().err
    assert (out / "report.md").is_file() and (out / "mmvet_by_capability.png").is_file()

    # A policy instead of candidate files: N answers sampled per question, saved in the official format.
    sampled = tmp_path / "sampled"
    with serve(make_grader_app()) as grader:
        args = ["--model", str(parrot_dir), "--policy", str(parrot_dir), "--n", "2", "--policy-max-new-tokens", "16"]
        args += ["--grader-url", grader, "--max-new-tokens", "40", "--limit", "2"]
        assert _eval("mm-vet", data, sampled, *args) == 0
    assert _metrics(sampled)["n"] == 2 and _metrics(sampled)["n_candidates"] == 2
    assert json.loads((sampled / "candidates_1.json").read_text()).keys() == {"v1_0", "v1_1"}

    bad = tmp_path / "bad.json"
    bad.write_text('{"v1_0": "x = -1"}')
    assert _eval("mm-vet", data, tmp_path / "x", "--model", str(parrot_dir), "--candidates", str(bad), files[0],
                 "--grader-url", "http://127.0.0.1:9/v1") == 2  # fmt: skip
    assert "v1_1" in capsys.readouterr().err


def test_multimodal_rewardbench_scores_a_predictions_file_exactly(tmp_path):
    data = write_mmrb(tmp_path)
    ids = [row["ID"] for row in json.loads(data.read_text())]
    preds = tmp_path / "preds.jsonl"
    values = [0, 1, 1, 1, 1, 0, 1, 0]  # right, right, wrong, right, right, right, wrong, wrong
    preds.write_text("".join(json.dumps({"id": i, "pred": p}) + "\n" for i, p in zip(ids, values)))
    assert _eval("multimodal-rewardbench", data, tmp_path / "out", "--predictions", str(preds)) == 0
    metrics = _metrics(tmp_path / "out")
    assert metrics["overall_accuracy"] == 5 / 8 and (metrics["n"], metrics["unparsed"]) == (8, 0)
    assert (metrics["accuracy_safety_bias"], metrics["accuracy_safety_toxicity"], metrics["accuracy_vqa"]) == (0, 1, 0)
