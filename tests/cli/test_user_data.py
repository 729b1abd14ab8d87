"""A user's own data and set-up, tried as a new user would: each case is the command they ran and what they see.

Never a silent wrong result, never a traceback: a mistake the user can fix is one `error: …` line naming the
line, the field or the address, and the fix, with exit status 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mrjudge.cli import main
from PIL import Image

from judge.loopback import free_port
from tests.support.items import write_items
from tiny_world.bench_files import write_vlrb_jsonl


def _one_error_line(err: str) -> str:
    """The `error: …` line of a command's stderr; fails on a traceback."""
    assert "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    return line


# -- a model server that does not answer ------------------------------------------------------------------------


def test_judge_against_a_dead_endpoint_is_one_line_naming_the_address_and_the_fix(tmp_path, capsys):
    items, _ = write_items(tmp_path, n=2)
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: `vllm serve` still starting, or a wrong port
    code = main(["judge", "--model", url, "--input", str(items), "--output", str(tmp_path / "v.jsonl")])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"cannot reach the model server at {url}" in line
    assert "still starting, or is the port wrong" in line and f"curl {url}/models" in line and "resumes" in line


def test_eval_against_a_dead_endpoint_is_one_line_too(tmp_path, capsys):
    data = write_vlrb_jsonl(tmp_path)
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = main(["eval", "vl-rewardbench", "--model", url, "--data", str(data), "--out", str(tmp_path / "run")])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and f"cannot reach the model server at {url}" in line


# -- an image that is broken past its header ----------------------------------------------------------------------


def _truncated_jpeg(path):
    Image.new("RGB", (320, 240), (200, 30, 30)).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the header reads; the pixels end halfway


def test_a_truncated_image_is_a_bad_line_found_before_the_model_loads(parrot_dir, tmp_path, capsys):
    items, rows = write_items(tmp_path, n=4)
    _truncated_jpeg(tmp_path / "broken.jpg")
    lines = items.read_text().splitlines()
    lines[2] = json.dumps({**rows[2], "image": "broken.jpg"})
    items.write_text("\n".join(lines) + "\n")
    out = tmp_path / "v.jsonl"
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--max-new-tokens", "8"]

    assert main(args) == 2  # 1 bad line of 4 is above the default 0.05: nothing runs, nothing is left behind
    err = capsys.readouterr().err
    assert "line 3: field 'image': cannot decode" in err and "broken.jpg" in err and "truncated" in err
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()

    assert main([*args, "--max-bad-fraction", "0.25"]) == 0  # skipped and named; the others are judged
    err = capsys.readouterr().err
    assert "skipped 1 bad row(s) of 4" in err and "line 3: field 'image'" in err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
        r["id"] for i, r in enumerate(rows) if i != 2
    ]


# -- files as editors and the web write them ---------------------------------------------------------------------


def test_a_byte_order_mark_is_read_as_utf8_and_outputs_follow_the_umask(parrot_dir, tmp_path, capsys):
    items, rows = write_items(tmp_path, n=2)
    items.write_bytes(b"\xef\xbb\xbf" + items.read_bytes())  # what Notepad and Excel's "UTF-8" write
    out = tmp_path / "v.jsonl"
    args = ["judge", "--model", str(parrot_dir), "--input", str(items), "--output", str(out), "--max-new-tokens", "8"]
    assert main(args) == 0, capsys.readouterr().err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [r["id"] for r in rows]
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()  # 0644 under 022, as `open` would make it


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def test_a_remote_image_url_is_refused_as_such_not_read_as_a_path(tmp_path, capsys):
    items, rows = write_items(tmp_path, n=1)
    items.write_text(json.dumps({**rows[0], "image": "https://example.com/cat.png"}) + "\n")
    code = main(["judge", "--model", "never-loaded", "--input", str(items), "--output", str(tmp_path / "v.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "line 1: field 'image': https://example.com/cat.png is a URL: remote images are not fetched" in err
    assert "file not found" not in err


def test_a_huge_image_sent_at_full_size_is_said_once_with_the_flag(parrot_loaded, tmp_path, capsys, caplog):
    from tiny_world.servers.openai_server import make_app, serve

    items, rows = write_items(tmp_path, n=2)
    Image.new("RGB", (4000, 3300), (200, 30, 30)).save(tmp_path / "photo.png")  # 13.2 MP, over Qwen's 12.8 MP
    items.write_text("".join(json.dumps({**row, "image": "photo.png"}) + "\n" for row in rows))
    with serve(make_app(parrot_loaded)) as url:
        args = ["judge", "--model", url, "--input", str(items), "--output", str(tmp_path / "v.jsonl")]
        assert main([*args, "--max-new-tokens", "4", "--orders", "1"]) == 0
    warnings = [r.getMessage() for r in caplog.records if "at full size" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, not once per request
    assert "4000×3300 (13.2 MP)" in warnings[0] and "--max-pixels" in warnings[0]


# -- `synth records` on a user's own columns ----------------------------------------------------------------------


def _rows_with_a_picture_column(folder):
    Image.new("RGB", (32, 32), (200, 30, 30)).save(folder / "cat.png")
    rows = [{"id": str(i), "picture": "cat.png", "ask": "What colour?", "reply": "Red."} for i in range(3)]
    source = folder / "mine.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return source


def test_an_image_column_of_another_name_is_refused_not_dropped(tmp_path, capsys):
    source = _rows_with_a_picture_column(tmp_path)
    out = tmp_path / "records"
    args = ["synth", "records", "--source", str(source), "--out", str(out)]
    code = main([*args, "--question-field", "ask", "--answer-field", "reply"])
    err = capsys.readouterr().err
    assert code == 2 and "3 of 3 rows are bad" in _one_error_line(err) and not (out / "records.jsonl").exists()
    assert "field 'image': no image column (looked for image, images, image_path, img; columns here: " in err
    assert "['id', 'picture', 'ask', 'reply']) — set --image-field (synth all: fields.image=…)" in err
    assert "--text-only" in err

    assert main([*args, "--question-field", "ask", "--answer-field", "reply", "--image-field", "picture"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [Path(r["image"]).name for r in records] == ["cat.png"] * 3


def test_a_text_only_set_says_so_with_a_flag_and_is_counted_aloud(tmp_path, capsys):
    source = tmp_path / "text.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "question": "2+2?", "answer": "4"}) + "\n" for i in range(3)))
    out = tmp_path / "records"
    assert main(["synth", "records", "--source", str(source), "--out", str(out), "--text-only"]) == 0
    assert "3 of the 3 records are text-only (no image)" in capsys.readouterr().out
    assert json.loads((out / "records.summary.json").read_text())["text_only_records"] == 3


def test_a_line_that_is_not_json_is_a_bad_row_under_max_bad_fraction(tmp_path, capsys):
    source = tmp_path / "text.jsonl"
    lines = [json.dumps({"id": str(i), "question": "2+2?", "answer": "4"}) for i in range(4)]
    lines[1] = '{"id": "1", "question": "2+2?",'  # cut off mid-object
    source.write_text("\n".join(lines) + "\n")
    args = ["synth", "records", "--source", str(source), "--out", str(tmp_path / "records"), "--text-only"]
    assert main(args) == 2  # 1 of 4 is above the default 0.05: refused, with the line
    err = capsys.readouterr().err
    assert "1 of 4 rows are bad" in _one_error_line(err) and "line 2: field '<line>': not valid JSON" in err
    assert main([*args, "--max-bad-fraction", "0.25"]) == 0
    assert "wrote 3 records from 4 rows" in capsys.readouterr().out
    summary = json.loads((tmp_path / "records" / "records.summary.json").read_text())
    assert [(s["line"], s["reason"].split(" (")[0]) for s in summary["skipped"]] == [
        (2, "field '<line>': not valid JSON")
    ]


def test_synth_all_names_the_way_to_give_its_model_and_takes_nested_keys(tmp_path, capsys):
    source = _rows_with_a_picture_column(tmp_path)
    models = ["--negatives-generator", "model", "--describer", "model", "--reasoner", "model"]
    args = ["synth", "all", "--source", str(source), "--out", str(tmp_path / "s"), *models]
    assert main(args) == 2  # before any stage runs: it names the nested field and how to set it
    line = _one_error_line(capsys.readouterr().err)
    assert "negatives_generator is 'model' but `model` is not set: give it as model.model=URL_OR_FOLDER" in line
    assert not (tmp_path / "s").exists()

    url = f"http://127.0.0.1:{free_port()}/v1"
    nested = [f"model.model={url}", f"reasoner_model.model={url}", "fields.question=ask", "fields.answer=reply"]
    assert main([*args, *nested, "fields.image=picture"]) == 2  # read, then the dead endpoint is counted
    line = _one_error_line(capsys.readouterr().err)
    assert "negatives: 3 of 3 rows failed ({'connection_error': 3})" in line


# -- predictions for part of a benchmark --------------------------------------------------------------------------


def test_predictions_for_half_the_set_are_refused_not_scored_as_the_benchmark(tmp_path, capsys):
    data = write_vlrb_jsonl(tmp_path)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"id": row["id"], "pred": 0}) + "\n" for row in rows[:2]))
    args = ["eval", "vl-rewardbench", "--data", str(data), "--predictions", str(predictions)]
    assert main([*args, "--out", str(tmp_path / "all")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"the predictions cover 2 of {len(rows)} rows; {len(rows) - 2} row(s) have none" in line
    assert "--limit N" in line and not (tmp_path / "all" / "metrics.json").exists()

    assert main([*args, "--out", str(tmp_path / "first"), "--limit", "2"]) == 0  # the part they were made on
    metrics = json.loads((tmp_path / "first" / "metrics.json").read_text())
    assert (metrics["n"], metrics["data_rows"]) == (2, 2)  # the hash stands for the two rows scored


# -- synthesis stages that make nothing ---------------------------------------------------------------------------


def test_a_stage_prints_a_short_table_and_an_empty_split_is_an_error_unless_allowed(tmp_path, capsys):
    world = tmp_path / "w"
    assert main(["synth", "world", "--n", "8", "--out", str(world)]) == 0
    assert main(["synth", "negatives", "--input", str(world), "--out", str(world)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("negatives   rows") :].splitlines()
    assert table[0].split() == ["negatives", "rows", "8", "in", "→", "8", "out", "(8", "now)"]
    assert len(table) <= 8 and f"summary      {world / 'negatives.summary.json'}" in out  # the JSON is a file
    assert json.loads((world / "negatives.summary.json").read_text())["negatives"] == 24

    assert main(["synth", "describe", "--input", str(world), "--out", str(world)]) == 0
    args = ["synth", "assemble", "--input", str(world), "--out", str(world)]
    capsys.readouterr()
    assert main(args) == 2  # 8 record groups at val_fraction 0.1 hold out none: an empty val split
    line = _one_error_line(capsys.readouterr().err)
    assert "assemble: the val split is empty (val_fraction 0.1 of at most 8 record groups held out none)" in line
    assert "--allow-empty" in line
    assert main([*args, "--allow-empty"]) == 0
    assert main([*args, "--val-fraction", "0.5"]) == 0


def test_a_stage_with_no_rows_says_so(tmp_path, capsys):
    (tmp_path / "records.jsonl").write_text("")
    args = ["synth", "negatives", "--input", str(tmp_path), "--out", str(tmp_path / "out"), "--generator", "scene"]
    code = main(args)
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "negatives: no rows were written (0 came in)" in line


def test_a_description_cut_at_its_token_budget_fails_as_truncated(tiny_vlm_dir, tmp_path, capsys):
    world = tmp_path / "w"
    assert main(["synth", "world", "--n", "2", "--out", str(world)]) == 0
    assert main(["synth", "negatives", "--input", str(world), "--out", str(world)]) == 0
    args = ["synth", "describe", "--input", str(world), "--out", str(world), "--describer", "model"]
    code = main([*args, "--model", str(tiny_vlm_dir), "--describer-max-tokens", "4"])  # random weights: never stop
    assert code == 2, capsys.readouterr()
    summary = json.loads((world / "described.summary.json").read_text())
    assert (summary["failed"], summary["failed_by_reason"]) == (2, {"truncated": 2})


def test_vlrb_images_that_do_not_resolve_name_image_folder(tmp_path, capsys):
    data = write_vlrb_jsonl(tmp_path / "bench")
    moved = tmp_path / "elsewhere" / "vlrb.jsonl"  # the file copied away from its images/ folder
    moved.parent.mkdir()
    moved.write_text(data.read_text())
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"id": row["id"], "pred": 0}) + "\n" for row in rows))
    args = ["eval", "vl-rewardbench", "--data", str(moved), "--predictions", str(predictions)]
    assert main([*args, "--out", str(tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert (
        "field 'image': image file not found" in err
        and "give the folder that holds the images as --image-folder" in err
    )
    assert main([*args, "--out", str(tmp_path / "r2"), "--image-folder", str(data.parent)]) == 0
