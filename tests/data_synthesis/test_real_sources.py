"""Real SFT sets into `mrjudge synth records`: LLaVA JSON with large and broken images, TRL's VLM format,
several images per row, hub config names; bad rows skipped and listed, or the stage stops (exit 2)."""

from __future__ import annotations

import io
import json
import random

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mrjudge.cli import main
from PIL import Image

from data_synthesis.assemble import to_sft_example
from data_synthesis.pipeline import SynthConfig, load_rows
from data_synthesis.sources import FieldMap, load_sft_records, write_records
from jobs.jsonl import InputError, read_jsonl
from judge.images import load_image
from judge.types import DataError


def photo(path, size=(64, 48), seed=0, fmt="JPEG"):
    """A noisy picture (noise, so JPEG cannot shrink it to nothing), saved as `fmt`."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    small = Image.new("RGB", (16, 12))
    small.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(16 * 12)])
    small.resize(size, Image.Resampling.BILINEAR).save(path, format=fmt)
    return path


def encoded(size=(40, 30), seed=0, fmt="JPEG") -> bytes:
    buffer = io.BytesIO()
    rng = random.Random(seed)
    small = Image.new("RGB", (8, 6))
    small.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(8 * 6)])
    small.resize(size).save(buffer, format=fmt)
    return buffer.getvalue()


def llava_row(i, image, question="What is in the picture?", answer="A photo of noise."):
    return {
        "id": f"llava-{i}",
        "image": image,
        "conversations": [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": answer}],
    }


@pytest.fixture(scope="module")
def llava_set(tmp_path_factory):
    """40 LLaVA rows over a COCO-like folder, two of them 2400×1800 photos; no broken rows yet."""
    root = tmp_path_factory.mktemp("llava")
    rows = []
    for i in range(40):
        size = (2400, 1800) if i in (3, 17) else (64, 48)
        photo(root / "coco" / "train2017" / f"{i:012d}.jpg", size=size, seed=i)
        rows.append(llava_row(i, f"coco/train2017/{i:012d}.jpg"))
    return root, rows


def broken(root, rows, n_bad):
    """`rows` with the first `n_bad` of five kinds of damage (missing file, truncated JPEG, not an image,
    empty answer, wrong type) applied at fixed lines; returns the damaged JSON path and the damaged ids."""
    rows = [dict(r) for r in rows]
    truncated = root / "coco" / "truncated.jpg"
    truncated.write_bytes((root / "coco" / "train2017" / f"{3:012d}.jpg").read_bytes()[:5000])
    (root / "coco" / "text.jpg").write_text("this is not a jpeg")
    damage = [
        (5, lambda r: {**r, "image": "coco/train2017/missing.jpg"}),
        (11, lambda r: {**r, "image": "coco/truncated.jpg"}),
        (23, lambda r: {**r, "image": "coco/text.jpg"}),
        (29, lambda r: llava_row(29, r["image"], answer="  ")),
        (31, lambda r: {**llava_row(31, r["image"]), "conversations": [{"from": "human", "value": {"q": 1}}]}),
    ][:n_bad]
    for index, change in damage:
        rows[index] = change(rows[index])
    path = root / f"llava_{n_bad}.json"
    path.write_text(json.dumps(rows))
    return path, [f"llava-{index}" for index, _ in damage]


def test_llava_set_with_a_few_broken_images_skips_and_lists_them(llava_set, tmp_path, capsys):
    root, rows = llava_set
    source, bad = broken(root, rows, 2)  # 2 of 40 = 5 %: at the default limit, so skipped and listed
    out = tmp_path / "out"
    args = ["--image-workers", "4", "--source-name", "llava_v1_5"]
    assert main(["synth", "records", "--source", str(source), "--out", str(out), *args]) == 0
    assert "wrote 38 records from 40 rows" in capsys.readouterr().out
    summary = json.loads((out / "records.summary.json").read_text())
    assert (summary["rows"], summary["records"], summary["bad_fraction"]) == (40, 38, 0.05)
    assert [(s["line"], s["id"]) for s in summary["skipped"]] == [(6, bad[0]), (12, bad[1])]
    assert "image file not found" in summary["skipped"][0]["reason"]
    assert "cannot decode" in summary["skipped"][1]["reason"] and "truncated" in summary["skipped"][1]["reason"]
    records = [row for _, row in read_jsonl(out / "records.jsonl")]
    assert [r["id"] for r in records] == [f"llava-{i}" for i in range(40) if f"llava-{i}" not in bad]
    assert {r["source"] for r in records} == {"llava_v1_5"}
    # Kept as they came: the photos are referenced where they lie (the large ones too), never copied or re-encoded.
    assert records[3]["image"] == str((root / "coco" / "train2017" / f"{3:012d}.jpg").resolve())
    assert load_image(records[3]["image"]).size == (2400, 1800)
    assert not (out / "images").exists()


def test_every_kind_of_bad_row_is_named(llava_set, tmp_path):
    root, rows = llava_set
    source, bad = broken(root, rows, 5)
    _, summary = write_records(source, tmp_path / "out", max_bad_fraction=0.2)
    reasons = {s["id"]: s["reason"] for s in summary["skipped"]}
    assert list(reasons) == bad
    assert "image file not found" in reasons["llava-5"]
    assert "cannot decode" in reasons["llava-11"] and "cannot decode" in reasons["llava-23"]
    assert reasons["llava-29"].startswith("turn 1: field 'answer': expected non-empty text")
    assert reasons["llava-31"].startswith("turn 0: field 'question': expected non-empty text, got {'q': 1}")


def test_too_many_broken_rows_exit_2_and_write_nothing(llava_set, tmp_path, capsys):
    root, rows = llava_set
    source, bad = broken(root, rows, 3)  # 3 of 40 = 7.5 % > 5 %
    out = tmp_path / "out"
    assert main(["synth", "records", "--source", str(source), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "3 of 40 rows are bad (7.5%), above --max-bad-fraction 0.05" in error and "no records written" in error
    assert "line 6 (id 'llava-5'): field 'image'" in error and "line 24 (id 'llava-23')" in error
    assert list(out.iterdir()) == []  # no records, no summary, no temporary file
    # The user's way out: raise the limit, and the same rows are skipped and listed.
    assert main(["synth", "records", "--source", str(source), "--out", str(out), "--max-bad-fraction", "0.1"]) == 0
    assert [s["id"] for s in json.loads((out / "records.summary.json").read_text())["skipped"]] == bad


def test_strict_reader_raises_at_the_first_bad_row(llava_set, tmp_path):
    root, rows = llava_set
    source, _ = broken(root, rows, 1)
    with pytest.raises(DataError, match=r"item 5: field 'image': record 'llava-5': image file not found"):
        list(load_sft_records(source, out_dir=tmp_path / "out"))


def test_worker_count_does_not_change_the_output(llava_set, tmp_path):
    root, rows = llava_set
    source, _ = broken(root, rows, 2)
    one = write_records(source, tmp_path / "one", image_workers=1)[0].read_text()
    many = write_records(source, tmp_path / "many", image_workers=8)[0].read_text()
    assert one == many


# --- TRL's VLM format ------------------------------------------------------------------------------------


def test_trl_messages_with_images_column(tmp_path):
    photo(tmp_path / "imgs" / "a.jpg", seed=1)
    photo(tmp_path / "imgs" / "b.png", seed=2, fmt="PNG")
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}
    rows = [
        {  # the TRL docs' shape; a system message is not a turn
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                user,
                {"role": "assistant", "content": [{"type": "text", "text": "Noise."}]},
            ],
            "images": ["imgs/a.jpg"],
        },
        {  # plain-string contents (TRL puts the images before the first user message), two turns
            "id": "multi",
            "messages": [
                {"role": "user", "content": "Colour?"},
                {"role": "assistant", "content": "Mixed."},
                {"role": "user", "content": "Sharp?"},
                {"role": "assistant", "content": "No."},
            ],
            "images": ["imgs/b.png"],
        },
        {  # prompt/completion split, image carried by the part itself
            "prompt": [
                {"role": "user", "content": [{"type": "image", "image": "imgs/a.jpg"}, {"type": "text", "text": "Q?"}]}
            ],
            "completion": [{"role": "assistant", "content": [{"type": "text", "text": "A."}]}],
        },
        {
            "messages": [{"role": "user", "content": "Text only?"}, {"role": "assistant", "content": "Yes."}],
            "images": [],
        },
        {"messages": [user, {"role": "assistant", "content": "Two parts, no image."}], "images": []},
    ]
    source = tmp_path / "trl.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, summary = write_records(source, tmp_path / "out", max_bad_fraction=0.25)
    records = [row for _, row in read_jsonl(tmp_path / "out" / "records.jsonl")]
    assert [(r["id"], r["question"], r["answer"]) for r in records] == [
        ("trl-0", "What is shown?", "Noise."),
        ("multi#t0", "Colour?", "Mixed."),
        ("multi#t1", "Sharp?", "No."),
        ("trl-2", "Q?", "A."),
        ("trl-3", "Text only?", "Yes."),
    ]
    a, b = (str((tmp_path / "imgs" / n).resolve()) for n in ("a.jpg", "b.png"))
    assert [r["image"] for r in records] == [a, b, b, a, None]
    ((line, reason),) = [(s["line"], s["reason"]) for s in summary["skipped"]]
    assert line == 5 and reason.startswith("field 'images': record 'trl-4': 1 image part(s) in the messages but 0")


def test_trl_parquet_image_bytes_are_written_as_they_came(tmp_path):
    jpeg, png = encoded(seed=3), encoded(seed=4, fmt="PNG")
    messages = [
        [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Q{i}?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"A{i}."}]},
        ]
        for i in range(2)
    ]
    features = datasets.Features(
        {
            "messages": datasets.List(
                {
                    "role": datasets.Value("string"),
                    "content": datasets.List({"type": datasets.Value("string"), "text": datasets.Value("string")}),
                }
            ),
            "images": datasets.List(datasets.Image()),
        }
    )
    rows = {"messages": messages, "images": [[{"bytes": jpeg, "path": None}], [{"bytes": png, "path": None}]]}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "saved"))
    out = tmp_path / "out"
    _, summary = write_records(tmp_path / "saved", out)
    records = [row for _, row in read_jsonl(out / "records.jsonl")]
    assert [r["image"] for r in records] == ["images/saved-0.jpg", "images/saved-1.png"]
    assert (out / "images" / "saved-0.jpg").read_bytes() == jpeg  # byte for byte: no decode-and-re-encode
    assert (out / "images" / "saved-1.png").read_bytes() == png
    assert summary["skipped"] == []


# --- several images per row -------------------------------------------------------------------------------


def test_rows_with_several_images_keep_them_all_in_order(tmp_path):
    for name, seed in (("left.jpg", 5), ("right.jpg", 6)):
        photo(tmp_path / "data" / "pairs" / name, seed=seed)
    rows = [
        llava_row("pair", ["pairs/left.jpg", "pairs/right.jpg"], question="<image>\nWhich differs?"),
        {"id": "bytes-pair", "images": [], "question": "Q?", "answer": "A."},
    ]
    source = tmp_path / "data" / "mixed.jsonl"
    rows[1]["images"] = [_data_url(encoded(seed=7), "jpeg"), _data_url(encoded(seed=8, fmt="PNG"), "png")]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    _, summary = write_records(source, out)
    records = [row for _, row in read_jsonl(out / "records.jsonl")]
    assert records[0]["image"] == [str((tmp_path / "data" / "pairs" / n).resolve()) for n in ("left.jpg", "right.jpg")]
    assert records[0]["question"] == "Which differs?"
    assert records[1]["image"] == ["images/bytes-pair/0.jpg", "images/bytes-pair/1.png"]
    assert summary["rows_with_several_images"] == 2
    # Later stages carry the list: paths are rebased for another folder, and the SFT example has one image
    # part per image.
    (moved,) = [r for r in load_rows(out, "records", out / "sub") if r["id"] == "bytes-pair"]
    assert moved["image"] == ["../images/bytes-pair/0.jpg", "../images/bytes-pair/1.png"]
    item = {"id": "x", "image": moved["image"], "question": "Q?", "candidates": ["A.", "B."]}
    example = to_sft_example(item, "<think>t</think><answer>A</answer>")
    parts = [p for p in example["messages"][0]["content"] if p["type"] == "image"]
    assert example["images"] == moved["image"] and len(parts) == 2


def _data_url(data: bytes, kind: str) -> str:
    import base64

    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


# --- hub options -----------------------------------------------------------------------------------------


def test_dataset_config_name_through_the_real_load_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    folder = tmp_path / "hubby"
    for config, answer in (("easy", "Yes."), ("hard", "No.")):
        (folder / config).mkdir(parents=True)
        pq.write_table(pa.table({"question": ["Q?"], "answer": [answer]}), folder / config / "train-0.parquet")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: easy\n  data_files: easy/*.parquet\n"
        "- config_name: hard\n  data_files: hard/*.parquet\n---\n"
    )
    text_only = FieldMap(text_only=True)  # a question/answer set without images, said so
    (record,) = load_sft_records(folder, out_dir=tmp_path / "out", dataset_config="hard", fields=text_only)
    assert record.answer == "No."
    with pytest.raises(InputError, match="nope"):
        list(load_sft_records(folder, out_dir=tmp_path / "out", dataset_config="nope", fields=text_only))


def test_revision_on_a_local_file_is_refused(tmp_path):
    source = tmp_path / "d.jsonl"
    source.write_text(json.dumps({"question": "Q?", "answer": "A."}) + "\n")
    with pytest.raises(ValueError, match="--revision choose a hub dataset's subset and version"):
        write_records(source, tmp_path / "out", revision="main")


# --- synth all ------------------------------------------------------------------------------------------


def test_synth_all_takes_the_source_options(tmp_path):
    config = SynthConfig(
        source="data.jsonl",
        negatives_generator="model",
        describer="model",
        reasoner="model",
        model={"model": "runs/mllm"},
        reasoner_model={"model": "http://127.0.0.1:8000/v1"},
        split="validation",
        dataset_config="en",
        revision="abc123",
        fields={"question": "q", "answer": "a"},
        image_root="/data/images",
        max_bad_fraction=0.1,
        negatives_max_new_tokens=1024,
    )
    assert config.fields == {"question": "q", "answer": "a"}
    with pytest.raises(ValueError, match="fields: .*unexpected keyword argument 'qestion'"):
        SynthConfig(fields={"qestion": "q"})
    with pytest.raises(ValueError, match=r"max_bad_fraction must be in \[0, 1\]"):
        SynthConfig(max_bad_fraction=5)


def test_synth_all_reads_the_source_with_those_options(tiny_vlm_dir, tmp_path):
    """`synth all` on a real-shaped source: field map, image root, bad-row limit and budgets reach their stages."""
    from data_synthesis.pipeline import run_all

    for i in range(3):
        photo(tmp_path / "pics" / f"{i}.jpg", seed=i)
    rows = [{"uid": f"r{i}", "pic": f"{i}.jpg", "q": "What is shown?", "a": "Noise."} for i in range(3)]
    rows.append({"uid": "r3", "pic": "gone.jpg", "q": "Q?", "a": "A."})
    source = tmp_path / "data" / "rows.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"model": str(tiny_vlm_dir), "backend": "hf", "options": {"device": "cpu"}}
    config = SynthConfig(
        out=str(tmp_path / "out"),
        source=str(source),
        fields={"id": "uid", "image": "pic", "question": "q", "answer": "a"},
        image_root=str(tmp_path / "pics"),
        max_bad_fraction=0.25,
        negatives_generator="model",
        describer="model",
        reasoner="model",
        model=spec,
        reasoner_model=spec,
        negatives_max_attempts=1,
        negatives_max_new_tokens=4,
        describe_max_new_tokens=4,
        max_failed_fraction=1.0,  # the untrained describer's rows all fail (below): keep going to check the rest
    )
    summary = run_all(config, show_progress=False)
    assert (summary["records"]["records"], [s["id"] for s in summary["records"]["skipped"]]) == (3, ["r3"])
    records = [row for _, row in read_jsonl(tmp_path / "out" / "records.jsonl")]
    assert [r["image"] for r in records] == [str((tmp_path / "pics" / f"{i}.jpg").resolve()) for i in range(3)]
    negatives = [row for _, row in read_jsonl(tmp_path / "out" / "negatives.jsonl")]
    assert [row["negatives_meta"]["attempts"] for row in negatives] == [1, 1, 1]  # max_attempts reached the stage
    # The 4-token budget reached the describer: an untrained model never stops, so each description is cut
    # there, and a cut description is never used: the row fails as `truncated`, to be asked again.
    assert (summary["described"]["failed"], summary["described"]["failed_by_reason"]) == (3, {"truncated": 3})
    # Run again: the records stage sees the same options and keeps its output (no second pass over the images).
    before = (tmp_path / "out" / "records.jsonl").stat().st_mtime_ns
    assert run_all(config, show_progress=False)["records"]["options"]["image_root"] == str(tmp_path / "pics")
    assert (tmp_path / "out" / "records.jsonl").stat().st_mtime_ns == before
    source.write_text(source.read_text().replace('"r3"', '"r4"'))  # the source changed: read it again
    assert [s["id"] for s in run_all(config, show_progress=False)["records"]["skipped"]] == ["r4"]
