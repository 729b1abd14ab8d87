"""`mrjudge` end to end: judge round trip, resume (refused when a setting changed), bad input (skipped under
--max-bad-fraction), a missing model folder, the one error guard, help, the tiny-model command, `synth all`
from flags (the demo: tests/tiny_world/test_demo.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from mrjudge.cli import main

from tests.support.items import write_items


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_judge_round_trip_and_resume(parrot_dir, tmp_path, capsys):
    items, rows = write_items(tmp_path)
    out = tmp_path / "verdicts.jsonl"
    args = [
        "judge",
        "--model",
        str(parrot_dir),
        "--input",
        str(items),
        "--output",
        str(out),
        "--max-new-tokens",
        "40",
        "--batch-size",
        "2",
    ]
    assert main(args) == 0
    verdicts = _read(out)
    assert [v["id"] for v in verdicts] == [r["id"] for r in rows]
    assert all(v["choice"] is not None and len(v["votes"]) == 2 and abs(sum(v["probs"]) - 1) < 1e-6 for v in verdicts)
    err = capsys.readouterr().err
    assert "5 items (5 judged now, 0 resumed)" in err and "accuracy" in err

    # Re-running does nothing new and changes nothing.
    before = out.read_bytes()
    assert main(args) == 0
    assert out.read_bytes() == before
    assert "(0 judged now, 5 resumed)" in capsys.readouterr().err

    # A run that died after two verdicts: the finished ones are kept, the rest judged, none duplicated.
    out.unlink()
    partial = tmp_path / "verdicts.jsonl.partial"
    partial.write_text("".join(json.dumps(v) + "\n" for v in verdicts[:2]) + '{"id": "q2", "cho')
    assert main(args) == 0
    assert _read(out) == verdicts
    assert not partial.exists()
    assert "(3 judged now, 2 resumed)" in capsys.readouterr().err


def test_a_rerun_with_a_changed_setting_is_refused_and_overwrite_judges_again(parrot_dir, tmp_path, capsys):
    items, _ = write_items(tmp_path, n=2)
    out = tmp_path / "verdicts.jsonl"
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--max-new-tokens", "40"]
    assert main(args) == 0
    assert json.loads((tmp_path / "verdicts.settings.json").read_text())["judge"]["max_pixels"] is None
    before = out.read_bytes()
    capsys.readouterr()

    assert main([*args, "--max-pixels", "200704", "--orders", "1"]) == 2
    err = capsys.readouterr().err
    assert "judge.max_pixels: null → 200704" in err and "judge.orders: null → 1" in err
    assert "new output" in err and "--overwrite" in err
    assert out.read_bytes() == before  # the old verdicts are kept, and nothing was mixed into them

    assert main([*args, "--max-pixels", "200704", "--orders", "1", "--overwrite"]) == 0
    assert "2 items (2 judged now, 0 resumed)" in capsys.readouterr().err
    assert all(len(v["votes"]) == 1 for v in _read(out))
    assert json.loads((tmp_path / "verdicts.settings.json").read_text())["judge"]["orders"] == 1


def test_bad_lines_under_max_bad_fraction_are_skipped_listed_and_counted(parrot_dir, tmp_path, capsys):
    items, rows = write_items(tmp_path, n=3)
    items.write_text(items.read_text() + json.dumps({**rows[0], "id": "q9", "candidates": ["lonely"]}) + "\n")
    out = tmp_path / "v.jsonl"
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--max-new-tokens", "8"]
    assert main(args) == 2  # 1 bad line of 4 is above the default 0.05: nothing runs
    err = capsys.readouterr().err
    assert "1 of 4 rows are bad (25.0%), above --max-bad-fraction 0.05" in err and "line 4: field 'candidates'" in err
    assert not out.exists()

    assert main([*args, "--max-bad-fraction", "0.25"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 bad row(s) of 4" in err and "line 4: field 'candidates'" in err
    assert "3 items (3 judged now, 0 resumed, 1 bad line(s) skipped)" in err
    assert [v["id"] for v in _read(out)] == [r["id"] for r in rows]


def test_a_missing_model_folder_fails_at_once_with_the_hub_unreachable(tmp_path, monkeypatch, capsys):
    items, _ = write_items(tmp_path, n=1)
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing answers there
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.perf_counter()
    code = main(["judge", "--model", "runs/no-such-model", "--input", str(items), "--output", "v.jsonl"])
    assert time.perf_counter() - start < 1.0
    err = capsys.readouterr().err
    assert (
        code == 2
        and "cannot load the judge from --model runs/no-such-model: no model folder 'runs/no-such-model'" in err
    )
    assert "as a hub id it would be 'runs/no-such-model'" in err and "internet" not in err


def test_bad_input_names_line_and_field(tmp_path, capsys):
    items, rows = write_items(tmp_path, n=3)
    lines = items.read_text().splitlines()
    lines[1] = json.dumps({**rows[1], "candidates": ["lonely"]})
    lines[2] = json.dumps({k: v for k, v in rows[2].items() if k != "question"})
    lines.append(json.dumps({**rows[0], "id": "q9", "image": "img/missing.png"}))
    items.write_text("\n".join(lines) + "\n")
    code = main(["judge", "--model", "never-loaded", "--input", str(items), "--output", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2: field 'candidates'" in err and "line 3: field 'question': missing" in err
    assert "line 4: field 'image': image file not found" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_unloadable_model_is_a_clear_error(tmp_path, capsys):
    items, _ = write_items(tmp_path, n=1)
    code = main(
        [
            "judge",
            "--model",
            str(tmp_path / "no-such-model"),
            "--input",
            str(items),
            "--output",
            str(tmp_path / "o.jsonl"),
        ]
    )
    assert code == 2
    assert "cannot load the judge from --model" in capsys.readouterr().err


def test_bad_config_value_is_explained(tmp_path, capsys):
    items, _ = write_items(tmp_path, n=1)
    args = ["judge", "--model", "x", "--input", str(items), "--output", str(tmp_path / "o.jsonl"), "--samples", "3"]
    assert main(args) == 2
    assert "samples (3) > 1 with temperature 0" in capsys.readouterr().err


def test_judge_reads_a_yaml_config(parrot_dir, tmp_path, capsys):
    items, _ = write_items(tmp_path, n=2)
    config = tmp_path / "judge.yaml"
    config.write_text("orders: 1\nmax_new_tokens: 40\nprompt:\n  criteria: null\n")
    out = tmp_path / "v.jsonl"
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--config", str(config)]
    assert main(args) == 0
    assert all(len(v["votes"]) == 1 for v in _read(out))
    config.write_text("ordrs: 1\n")
    assert main(args) == 2
    assert "unknown JudgeConfig field(s) ['ordrs']" in capsys.readouterr().err


def test_tiny_model_command(tmp_path, capsys):
    from judge.models import UNTRAINED_MARKER

    assert main(["tiny-model", "--out", str(tmp_path / "m"), "--kind", "lm", "--seed", "2"]) == 0
    assert (tmp_path / "m" / "model.safetensors").exists() and (tmp_path / "m" / UNTRAINED_MARKER).exists()
    out = capsys.readouterr().out
    assert "untrained tiny lm model" in out and "will not parse" in out and "runs/demo/grpo/model" in out


def test_console_script_help():
    exe = shutil.which("mrjudge", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "the mrjudge console script is installed with the package"
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("demo", "judge", "tiny-model"):
        assert command in result.stdout
    for command in ("demo", "judge", "tiny-model"):
        sub = subprocess.run([exe, command, "--help"], capture_output=True, text=True, timeout=60)
        assert sub.returncode == 0 and "usage: mrjudge " + command in sub.stdout


def test_one_guard_turns_user_errors_into_one_line(monkeypatch, tmp_path, capsys):
    """Every command's user errors reach `cli.main` and leave as `error: …`, exit 2; a bug keeps its traceback."""
    from mrjudge import tiny_model_cmd

    for error in (ValueError("bad value"), FileNotFoundError("no such file"), ImportError("no module named ray")):

        def fails(args, error=error):
            raise error

        monkeypatch.setattr(tiny_model_cmd, "run", fails)
        assert main(["tiny-model", "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err == f"error: {error}\n"

    def bug(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tiny_model_cmd, "run", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["tiny-model", "--out", str(tmp_path)])

    monkeypatch.setattr(tiny_model_cmd, "run", fails)  # the last user error, with its traceback asked for
    monkeypatch.setenv("MRJUDGE_TRACEBACK", "1")
    with pytest.raises(ImportError, match="no module named ray"):
        main(["tiny-model", "--out", str(tmp_path)])


def test_synth_all_takes_its_fields_as_flags_and_prints_one_line(tmp_path, capsys):
    out = tmp_path / "synth"
    argv = ["synth", "all", "--world-n", "12", "--out", str(out), "--seed", "1", "assemble={val_fraction: 0.25}"]
    assert main(argv) == 0
    output = capsys.readouterr().out
    printed = [line for line in output.splitlines() if line.startswith("synth all")]
    summary = json.loads((out / "synth.summary.json").read_text())
    assert printed == [  # one line, not the summary's JSON (the progress bars aside)
        "synth all: 12 records → 36 negatives → 12 MC items (train 9, val 3) → 12 SFT traces (kept 100%); "
        f"summary: {out / 'synth.summary.json'}"
    ]
    assert '"negatives"' not in output  # the JSON stays in the file
    assert summary["negatives"]["n_in"] == 12 and summary["items"]["splits"] == {"train": 9, "val": 3}
    config = tmp_path / "synth.yaml"
    config.write_text(f"out: {tmp_path / 'yaml'}\nworld_n: 12\nseed: 1\nassemble: {{val_fraction: 0.25}}\n")
    assert main(["synth", "all", "--config", str(config)]) == 0  # the same fields from YAML: the same data
    for name in ("records.jsonl", "items.jsonl", "rl/train.jsonl"):
        assert (tmp_path / "yaml" / name).read_bytes() == (out / name).read_bytes(), name
    assert main(["synth", "all", "--world-n", "12", "--out", str(out), "--ray-address", "auto"]) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err


def test_synth_all_refuses_a_changed_stage_setting_until_overwrite(tmp_path, capsys):
    out = tmp_path / "synth"
    argv = ["synth", "all", "--world-n", "8", "--out", str(out), "assemble.val_fraction=0.5"]
    assert main(argv) == 0
    assert json.loads((out / "negatives.settings.json").read_text()) == {"generator": "scene", "n": 3, "seed": 0}
    before = (out / "negatives.jsonl").read_bytes()
    capsys.readouterr()
    assert main([*argv, "--negatives-n", "2"]) == 2  # a config field as a flag, changed since the rows were made
    err = capsys.readouterr().err
    assert f"{out / 'negatives.jsonl'} holds rows made with other settings" in err and "n: 3 → 2" in err
    assert (out / "negatives.jsonl").read_bytes() == before
    assert main([*argv, "--negatives-n", "2", "--overwrite"]) == 0
    assert "synth all: 8 records → 16 negatives" in capsys.readouterr().out
