"""Synthesis against a thinking model: replies in every form, truncation, failures per row, rerun equality.

The server is `tiny_world.servers.thinking_server`: a real loopback OpenAI endpoint (FastAPI + uvicorn) talked
to by the project's OpenAI backend, answering each row in the mode its key selects.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mrjudge.cli import main

from data_synthesis.pipeline import ModelSpec, SynthConfig, run_distill
from data_synthesis.sampling import DEFAULTS, row_seed, sampling_for
from data_synthesis.stage_runner import TooManyFailures
from data_synthesis.thinking import read_reply
from jobs.jsonl import read_jsonl, write_jsonl_atomic
from judge.backends.base import Generation
from tiny_world.servers.openai_server import serve
from tiny_world.servers.thinking_server import REWRITER_THINKING, make_thinking_app

REPLIES = [
    # (generation, thinking, body, truncated)
    (Generation("<answer>B</answer>", reasoning="Check A, then B."), "Check A, then B.", "<answer>B</answer>", False),
    (
        Generation("<think>Check A.</think>\n<answer>A</answer>"),
        None,
        "<think>Check A.</think>\n<answer>A</answer>",
        False,
    ),
    (
        Generation("Check A.\n</think>\n\n<answer>A</answer>"),
        "Check A.",
        "<answer>A</answer>",
        False,
    ),  # template opened it
    (
        Generation("<think>plan</think><think>Check.</think><answer>A</answer>"),
        "plan",
        "<think>Check.</think><answer>A</answer>",
        False,
    ),
    (Generation("", reasoning="Check A an", finish_reason="length"), "Check A an", "", True),  # cut at the budget
    (Generation("<think>Check A and then", finish_reason="stop"), None, "<think>Check A and then", True),  # unclosed
    ("plain <answer>A</answer>", None, "plain <answer>A</answer>", False),
]


@pytest.mark.parametrize(("reply", "thinking", "body", "truncated"), REPLIES)
def test_read_reply_forms(reply, thinking, body, truncated):
    read = read_reply(reply)
    assert (read.thinking, read.body, read.truncated) == (thinking, body, truncated)


def test_sampling_defaults_overrides_and_row_seeds():
    assert sampling_for("reasoner").temperature == 0.6 and sampling_for("reasoner").max_new_tokens == 32768
    assert sampling_for("describer").temperature == 0.0
    params = sampling_for("generator", {"top_p": 0.5, "seed": 3})
    assert (params.temperature, params.top_p, params.seed) == (DEFAULTS["generator"].temperature, 0.5, 3)
    assert row_seed(3, "a") == row_seed(3, "a") != row_seed(3, "b") and row_seed(None, "a") is None
    with pytest.raises(ValueError, match="unknown field.*temprature"):
        sampling_for("reasoner", {"temprature": 0.5})
    with pytest.raises(ValueError, match="reasoner.*temperature"):
        sampling_for("reasoner", {"temperature": -1})
    with pytest.raises(ValueError, match="rewriter_sampling"):
        SynthConfig(rewriter_sampling={"topp": 0.9})


MODES = {
    "i00": "reasoning_content",
    "i01": "reasoning",
    "i02": "think_in_content",
    "i03": "template_think",
    "i04": "nested",
    "i05": "plan_tags",
    "i06": "truncated",
    "i07": "wrong",
    "i08": "fail500:1",  # one 500, recovered by the client's retry
    "i09": "fail500:2",  # fails the first run (2 attempts), answers the second
    "i10": "timeout:2",
    "i11": "reasoning_content",
}
COLOURS = ["red", "blue", "green"]


def _items(n: int = 12) -> list[dict]:
    items = []
    for i in range(n):
        k = 2 + i % 2
        label = i % k
        candidates = [f"The shape is {COLOURS[(j - label) % 3]}." for j in range(k)]  # the label's is red
        items.append(
            {
                "id": f"i{i:02d}",
                "image": None,
                "question": f"What colour is the shape in i{i:02d}?",
                "candidates": candidates,
                "label": label,
                "meta": {
                    "split": "train" if i % 4 else "val",
                    "description": "A red shape.",
                    "flaws": [None if j == label else "hallucinated_attribute" for j in range(k)],
                },
            }
        )
    return items


def _folder(path: Path, items: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(path / "items.jsonl", items)
    return path


def _spec(url: str) -> ModelSpec:
    return ModelSpec(url, "openai", {"timeout": 0.5, "max_retries": 1})


def _distill(folder: Path, url: str, **options):
    options = {"concurrency": 4, "max_failed_fraction": 0.5, **options}
    return run_distill(
        folder, folder, reasoner="model", reasoner_model=_spec(url), rewriter="model", show_progress=False, **options
    )


def _check_kept(row: dict, item: dict) -> None:
    completion = row["completion"]
    letter = "ABC"[item["label"]]
    assert completion.count("<think>") == completion.count("</think>") == completion.count("<answer>") == 1
    assert completion.startswith("<think>") and completion.endswith(f"</think><answer>{letter}</answer>")
    assert f"Reasoning about {item['id']}: the image shows the shape is red." in completion  # the server's text
    assert f"Option {letter} says red, which matches the image." in completion
    assert "hint" not in completion.lower() and "META-REWRITER" not in completion
    assert "second, written trace" not in completion and "I will write" not in completion


def test_distill_reads_every_reply_form_and_sets_failed_rows_aside(tmp_path):
    items = _items()
    by_id = {item["id"]: item for item in items}
    app = make_thinking_app(MODES, keys=[item["id"] for item in items], slow_s=1.5)
    with serve(app) as url:
        rows, summary = _distill(_folder(tmp_path / "run", items), url)
        kept = {row["id"] for row in rows if row["kept"]}
        assert kept == {"i00", "i01", "i02", "i03", "i04", "i05", "i08", "i11"}
        for row in rows:
            if row["kept"]:
                _check_kept(row, by_id[row["id"]])
                assert REWRITER_THINKING not in json.dumps(row["trace"]["style_aligned"])
        reasons = {row["id"]: row["drop_reason"] for row in rows if not row["kept"]}
        assert reasons == {"i06": "truncated", "i07": "wrong_answer"}
        assert summary["truncated"] == 1 and summary["drop_reasons"] == {"truncated": 1, "wrong_answer": 1}
        assert summary["failed"] == 2 and summary["failed_by_reason"] == {"server_error": 1, "timeout": 1}
        assert summary["n_out"] == 10 and summary["kept"] == 8
        assert summary["kept_fraction_per_paper_category"] == {"hallucination": 0.8}
        failed = [row for _, row in read_jsonl(tmp_path / "run" / "distilled.failed.jsonl")]
        assert [(f["id"], f["reason"]) for f in failed] == [("i09", "server_error"), ("i10", "timeout")]
        assert app.state.stats["max_in_flight"] > 1  # --concurrency put several requests in flight

        # The rerun asks only for the failed rows, and they now succeed.
        before = sum(app.state.stats["requests"].values())
        rows, summary = _distill(tmp_path / "run", url)
        assert summary["n_processed_now"] == 2 and summary["failed"] == 0
        assert not (tmp_path / "run" / "distilled.failed.jsonl").exists()
        assert sum(app.state.stats["requests"].values()) - before == 2 * 3  # reason + two rewrites, per row
        assert {row["id"] for row in rows if row["kept"]} == {*kept, "i09", "i10"}

    # Equal to an uninterrupted run against a server that never failed.
    clean = {k: ("reasoning_content" if ":" in v else v) for k, v in MODES.items()}
    with serve(make_thinking_app(clean, keys=list(by_id))) as url:
        _distill(_folder(tmp_path / "clean", items), url)
    for name in ("distilled.jsonl", "sft/train.jsonl", "sft/val.jsonl"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


def test_too_many_failures_exit_2_with_the_summary(tmp_path, capsys):
    items = _items(6)
    modes = {"i00": "fail500:9", "i01": "fail500:9"}
    with serve(make_thinking_app(modes, keys=[i["id"] for i in items])) as url:
        folder = _folder(tmp_path, items)
        with pytest.raises(TooManyFailures, match="2 of 6 rows failed"):
            _distill(folder, url, max_failed_fraction=0.05)
        capsys.readouterr()
        args = ["synth", "distill", "--input", str(folder), "--out", str(folder), "--reasoner", "model"]
        args += ["--reasoner-model", url, "--rewriter", "model", "--concurrency", "2"]
        assert main(args) == 2  # 4 attempts each (the client's 3 retries): requests 3-6 of 9 failing ones
        assert "max-failed-fraction" in capsys.readouterr().err
        assert json.loads((folder / "distilled.summary.json").read_text())["failed"] == 2
        assert main([*args, "--max-failed-fraction", "0.5"]) == 0


def test_stage_flags_reach_the_server(tmp_path, capsys):
    items = _items(2)
    app = make_thinking_app(keys=[i["id"] for i in items])
    with serve(app) as url:
        folder = _folder(tmp_path, items)
        args = ["synth", "distill", "--input", str(folder), "--out", str(folder), "--reasoner", "model"]
        args += ["--reasoner-model", url, "--rewriter", "model", "--reasoner-temperature", "0.3"]
        args += ["--reasoner-seed", "7", "--rewriter-max-tokens", "900", "--rewriter-top-p", "0.5"]
        assert main(args) == 0
    sent = app.state.stats["sampling"]
    reasoner = [s for s in sent if s["max_tokens"] == 32768]
    rewriter = [s for s in sent if s["max_tokens"] == 900]
    assert len(reasoner) == 2 and len(rewriter) == 4
    assert {(s["temperature"], s["top_p"]) for s in reasoner} == {(0.3, 0.95)}
    assert sorted(s["seed"] for s in reasoner) == sorted(row_seed(7, i["id"]) for i in items)
    assert {(s["temperature"], s["top_p"], s["seed"]) for s in rewriter} == {(0.6, 0.5, None)}


def _run_cli(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-m", "mrjudge.cli", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def test_kill_and_rerun_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL mid-stage (failed rows among the finished ones), then the same command: the same files."""
    items = _items(16)
    modes = {"i03": "fail500:4", "i06": "truncated", "i07": "wrong"}  # i03 fails all 4 attempts of the CLI
    keys = [i["id"] for i in items]
    with serve(make_thinking_app(modes, keys=keys, delay_s=0.15)) as url:
        folder = _folder(tmp_path / "killed", items)
        args = ["synth", "distill", "--input", str(folder), "--out", str(folder), "--reasoner", "model"]
        args += ["--reasoner-model", url, "--rewriter", "model", "--concurrency", "1", "--batch-size", "1"]
        proc = _run_cli([*args, "--max-failed-fraction", "1"])
        partial = folder / "distilled.jsonl.partial"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if partial.exists() and partial.read_text().count("\n") >= 6:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not (folder / "distilled.jsonl").exists()
        finished = [row["id"] for _, row in read_jsonl(partial)]
        done = len(finished)
        assert 6 <= done < 16 and "i03" not in finished and "i04" in finished  # i03 failed mid-run
        rows, summary = _distill(folder, url, concurrency=1, batch_size=1)  # the same stage, resumed
        assert summary["n_processed_now"] == 16 - done and summary["failed"] == 0
    clean = {"i06": "truncated", "i07": "wrong"}
    with serve(make_thinking_app(clean, keys=keys)) as url:
        _distill(_folder(tmp_path / "clean", items), url, concurrency=8)
    for name in ("distilled.jsonl", "sft/train.jsonl", "sft/val.jsonl"):
        assert (tmp_path / "killed" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


def test_throughput_benchmark_prints_its_line(capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "distill_throughput.py"
    spec = importlib.util.spec_from_file_location("distill_throughput", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--rows", "8", "--delay-s", "0.05", "--concurrency", "8"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    # Figures depend on the machine's load; what must hold is that the second run kept rows in flight.
    assert result["max_in_flight_seen"] > 1 and result["ratio"] > 0
    assert result["c1_tokens_per_s"] > 0 and result["c8_tokens_per_s"] > 0


def test_model_negatives_and_descriptions_from_a_thinking_server(tmp_path):
    from data_synthesis.pipeline import run_describe, run_negatives

    records = [
        {"id": f"r{i}", "image": None, "question": f"What colour is r{i}?", "answer": "It is red.", "source": "t"}
        for i in range(4)
    ]
    write_jsonl_atomic(tmp_path / "records.jsonl", records)
    with serve(make_thinking_app({"r1": "truncated"}, keys=[r["id"] for r in records])) as url:
        rows, summary = run_negatives(
            tmp_path, tmp_path, generator="model", model=_spec(url), concurrency=4, show_progress=False
        )
    by_id = {row["id"]: row for row in rows}
    assert [n["text"] for n in by_id["r0"]["negatives"]] == ["It is red and x.", "It is red and y.", "It is red and z."]
    assert by_id["r1"]["negatives"] == [] and by_id["r1"]["negatives_meta"]["rejected"]["truncated"] == 3
    assert summary["truncated"] == 3 and summary["rows_without_negatives"] == 1
    assert summary["negatives_per_paper_category"] == {
        "hallucination": 3,
        "incompleteness": 3,
        "incorrect_reasoning": 3,
    }
    assert by_id["r0"]["negatives_meta"]["completion_tokens"] > 0 and summary["tokens_per_s"] > 0

    with serve(make_thinking_app()) as url:  # every description arrives whole, thinking apart
        described, summary = run_describe(tmp_path, tmp_path, describer="model", model=_spec(url), show_progress=False)
    assert {row["description"] for row in described} == {"A red shape in the middle."} and summary["failed"] == 0
    (tmp_path / "described.jsonl").unlink()
    with serve(make_thinking_app({"": "truncated"})) as url:  # every description cut at the budget
        with pytest.raises(TooManyFailures, match="4 of 4"):
            run_describe(tmp_path, tmp_path, describer="model", model=_spec(url), show_progress=False)
    failed = [row for _, row in read_jsonl(tmp_path / "described.failed.jsonl")]
    assert [(f["id"], f["reason"]) for f in failed] == [(f"r{i}", "truncated") for i in range(4)]


def test_synth_all_config_fields_reach_every_model_stage(tmp_path):
    from data_synthesis.pipeline import run_all

    app = make_thinking_app(delay_s=0.2)  # long enough for requests to overlap
    with serve(app) as url:
        spec = {"model": url, "backend": "openai", "options": {"timeout": 5.0, "max_retries": 1}}
        config = SynthConfig(
            out=str(tmp_path / "s"),
            world_n=6,
            negatives_generator="model",
            describer="model",
            reasoner="model",
            rewriter="model",
            model=spec,
            reasoner_model=spec,
            generator_sampling={"seed": 4},
            describer_sampling={"max_tokens": 300},
            reasoner_sampling={"max_tokens": 1000, "temperature": 0.5},
            rewriter_sampling={"max_tokens": 700},
            concurrency=3,
        )
        summaries = run_all(config, show_progress=False)
    assert summaries["negatives"]["n_out"] == 6 and summaries["described"]["failed"] == 0
    assert summaries["distilled"]["n_out"] == summaries["items"]["items"] and summaries["distilled"]["failed"] == 0
    budgets = {s["max_tokens"] for s in app.state.stats["sampling"]}
    assert budgets == {2048, 300, 1000, 700}  # generator default, then each stage's own
    assert {s["temperature"] for s in app.state.stats["sampling"] if s["max_tokens"] == 1000} == {0.5}
    assert app.state.stats["max_in_flight"] > 1

    # Failed negatives (within the fraction) hold the chain before assemble, so items never change under it.
    with serve(make_thinking_app({"": "fail500:1000"})) as url:
        spec = {"model": url, "backend": "openai", "options": {"timeout": 5.0, "max_retries": 0}}
        config = SynthConfig(
            out=str(tmp_path / "held"), world_n=4, negatives_generator="model", model=spec, max_failed_fraction=1.0
        )
        summaries = run_all(config, show_progress=False)
    assert summaries["negatives"]["failed"] == 4 and "held_back" in summaries and "items" not in summaries
    assert not (tmp_path / "held" / "items.jsonl").exists()
