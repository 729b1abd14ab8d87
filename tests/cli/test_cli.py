"""`mrjudge` end to end: judge round trip, resume, bad input, help, the tiny-model command (the demo: test_demo.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from mrjudge.cli import main
from PIL import Image


def _write_items(folder, n=5):
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (84, 84), (40 * i, 100, 200)).save(folder / f"img/{i}.png")
        k = 2 + i % 2
        rows.append(
            {
                "id": f"q{i}",
                "image": f"img/{i}.png",
                "question": "What colour?",
                "candidates": [f"c{j}" for j in range(k)],
                "label": i % k,
            }
        )
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_judge_round_trip_and_resume(parrot_dir, tmp_path, capsys):
    items, rows = _write_items(tmp_path)
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


def test_bad_input_names_line_and_field(tmp_path, capsys):
    items, rows = _write_items(tmp_path, n=3)
    lines = items.read_text().splitlines()
    lines[1] = json.dumps({**rows[1], "candidates": ["lonely"]})
    lines[2] = json.dumps({k: v for k, v in rows[2].items() if k != "question"})
    lines.append(json.dumps({**rows[0], "id": "q9", "image": "img/missing.png"}))
    items.write_text("\n".join(lines) + "\n")
    code = main(["judge", "--model", "never-loaded", "--input", str(items), "--output", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2: field 'candidates'" in err and "line 3: field 'question': missing" in err
    assert "line 4: field 'image': file not found" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_unloadable_model_is_a_clear_error(tmp_path, capsys):
    items, _ = _write_items(tmp_path, n=1)
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
    items, _ = _write_items(tmp_path, n=1)
    with pytest.raises(SystemExit, match="samples \\(3\\) > 1 with temperature 0"):
        main(["judge", "--model", "x", "--input", str(items), "--output", str(tmp_path / "o.jsonl"), "--samples", "3"])


def test_judge_reads_a_yaml_config(parrot_dir, tmp_path):
    items, _ = _write_items(tmp_path, n=2)
    config = tmp_path / "judge.yaml"
    config.write_text("orders: 1\nmax_new_tokens: 40\nprompt:\n  criteria: null\n")
    out = tmp_path / "v.jsonl"
    assert (
        main(
            ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--config", str(config)]
        )
        == 0
    )
    assert all(len(v["votes"]) == 1 for v in _read(out))
    config.write_text("ordrs: 1\n")
    with pytest.raises(SystemExit, match="unknown JudgeConfig field\\(s\\) \\['ordrs'\\]"):
        main(
            ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--config", str(config)]
        )


def test_tiny_model_command(tmp_path, capsys):
    assert main(["tiny-model", "--out", str(tmp_path / "m"), "--kind", "lm", "--seed", "2"]) == 0
    assert (tmp_path / "m" / "model.safetensors").exists()
    assert "tiny lm model" in capsys.readouterr().out


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
