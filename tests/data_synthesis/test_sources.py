"""Sources → SFT records: every format built on the fly in tmp dirs, offline (no hub, no network)."""

from __future__ import annotations

import io
import json
import socket

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from data_synthesis.records import SFTRecord, group_of
from data_synthesis.source_images import safe_name as _safe_name
from data_synthesis.sources import FieldMap, load_sft_records, write_records
from jobs.jsonl import InputError, read_jsonl
from judge.images import image_to_data_url, load_image
from judge.types import DataError

RED, BLUE = (220, 0, 0), (0, 0, 200)


def png(path, colour=RED):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)
    return path


def png_bytes(colour=RED) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


TEXT_ONLY = FieldMap(text_only=True)  # a flat set without images says so; otherwise a row with no image column is bad


def load(source, out_dir, **kwargs):
    return list(load_sft_records(source, out_dir=out_dir, **kwargs))


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Hub access off and any socket connection an error, so a silent download attempt fails the test."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


# --- JSONL and JSON -----------------------------------------------------------------------------------


def test_jsonl_image_paths_resolve_against_the_file_folder(tmp_path):
    png(tmp_path / "data" / "imgs" / "a.png")
    source = write_jsonl(
        tmp_path / "data" / "train.jsonl",
        [
            {"id": "a", "image": "imgs/a.png", "question": "Colour?", "answer": "Red."},
            {"id": 7, "image": "imgs/a.png", "query": "Shape?", "response": 3},  # other spellings, numeric answer
        ],
    )
    records = load(source, tmp_path / "out")
    assert [r.id for r in records] == ["a", "7"]
    assert records[0].image == str((tmp_path / "data" / "imgs" / "a.png").resolve())  # outside out_dir: absolute
    assert (records[1].question, records[1].answer, records[1].source) == ("Shape?", "3", "train")
    assert not (tmp_path / "out" / "images").exists()  # paths are referenced, not copied


def test_image_inside_out_dir_is_referenced_relative_to_it(tmp_path):
    png(tmp_path / "out" / "pics" / "a.png")
    source = write_jsonl(tmp_path / "d.jsonl", [{"image": "out/pics/a.png", "question": "Q?", "answer": "A."}])
    (record,) = load(source, tmp_path / "out", source_name="mine")
    assert (record.id, record.image, record.source) == ("mine-0", "pics/a.png", "mine")


def test_text_only_rows_and_limit(tmp_path):
    source = write_jsonl(tmp_path / "t.jsonl", [{"question": f"Q{i}?", "answer": f"A{i}."} for i in range(5)])
    records = load(source, tmp_path / "out", limit=2, fields=TEXT_ONLY)
    assert [(r.id, r.image) for r in records] == [("t-0", None), ("t-1", None)]


def test_llava_json_multi_turn_becomes_one_record_per_turn(tmp_path):
    png(tmp_path / "coco" / "x.png")
    conversation = [
        {"from": "human", "value": "<image>\nWhat colour is the bus?"},
        {"from": "gpt", "value": "Red."},
        {"from": "human", "value": "How many wheels?"},
        {"from": "gpt", "value": "Four."},
    ]
    single = [{"from": "human", "value": "Describe it.\n<image>"}, {"from": "gpt", "value": "A red square."}]
    source = tmp_path / "llava.json"
    source.write_text(
        json.dumps(
            [
                {"id": "x", "image": "coco/x.png", "conversations": conversation},
                {"id": "y", "image": "coco/x.png", "conversations": single},
                {"id": "z", "conversations": single},  # LLaVA text-only rows simply have no image
            ]
        )
    )
    records = load(source, tmp_path / "out")
    assert [r.id for r in records] == ["x#t0", "x#t1", "y", "z"]
    assert [r.question for r in records] == [
        "What colour is the bus?",
        "How many wheels?",
        "Describe it.",
        "Describe it.",
    ]
    assert [r.answer for r in records[:2]] == ["Red.", "Four."]
    assert records[0].image == records[1].image == str((tmp_path / "coco" / "x.png").resolve())
    assert records[3].image is None
    assert {group_of(r.id) for r in records[:2]} == {"x"}


def test_json_list_of_plain_objects_reads_like_jsonl(tmp_path):
    source = tmp_path / "plain.json"
    source.write_text(json.dumps([{"instruction": "Q?", "output": "A."}]))
    (record,) = load(source, tmp_path / "out", fields=TEXT_ONLY)
    assert (record.id, record.question, record.answer) == ("plain-0", "Q?", "A.")


def test_llava_conversation_that_ends_unanswered_is_an_error(tmp_path):
    source = tmp_path / "bad.json"
    source.write_text(json.dumps([{"id": "c", "conversations": [{"from": "human", "value": "Q?"}]}]))
    with pytest.raises(DataError, match=r"bad.json item 0: field 'conversations'"):
        load(source, tmp_path / "out")


# --- Parquet and datasets --------------------------------------------------------------------------------


def test_parquet_with_custom_columns_and_image_bytes(tmp_path):
    table = pa.table(
        {
            "uid": ["conv/1#a", "conv/2"],
            "q": ["Colour?", "Colour?"],
            "a": ["Red.", "Blue."],
            "pic": [{"bytes": png_bytes(RED), "path": None}, {"bytes": png_bytes(BLUE), "path": None}],
        }
    )
    pq.write_table(table, tmp_path / "custom.parquet")
    fields = FieldMap(id="uid", image="pic", question="q", answer="a")
    out = tmp_path / "out"
    records = load(tmp_path / "custom.parquet", out, fields=fields)
    assert [r.id for r in records] == ["conv/1#a", "conv/2"]
    for record, colour in zip(records, (RED, BLUE)):
        assert record.image.startswith("images/") and record.image.endswith(".png") and "/" not in record.image[7:]
        assert load_image(record.image, base_dir=out).getpixel((0, 0)) == colour


def image_dataset(n: int, colour=RED) -> datasets.Dataset:
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "image": datasets.Image(),
            "question": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    rows = {
        "id": [f"d/{i}" for i in range(n)],
        "image": [Image.new("RGB", (8, 8), colour) for _ in range(n)],
        "question": ["Colour?"] * n,
        "answer": ["Red." if colour == RED else "Blue."] * n,
    }
    return datasets.Dataset.from_dict(rows, features=features)


def test_save_to_disk_dataset_with_image_feature(tmp_path):
    image_dataset(3).save_to_disk(str(tmp_path / "saved"))
    out = tmp_path / "out"
    records = load(tmp_path / "saved", out)
    assert [r.id for r in records] == ["d/0", "d/1", "d/2"]
    assert records[0].source == "saved"
    assert len({r.image for r in records}) == 3
    assert all(load_image(r.image, base_dir=out).getpixel((0, 0)) == RED for r in records)


def test_dataset_dict_picks_the_split(tmp_path):
    datasets.DatasetDict(train=image_dataset(2, RED), validation=image_dataset(1, BLUE)).save_to_disk(
        str(tmp_path / "dd")
    )
    out = tmp_path / "out"
    (record,) = load(tmp_path / "dd", out, split="validation")
    assert record.answer == "Blue." and load_image(record.image, base_dir=out).getpixel((0, 0)) == BLUE
    with pytest.raises(
        DataError, match=r"field 'split': 'test' not in this DatasetDict — pick one of \['train', 'validation'\]"
    ):
        load(tmp_path / "dd", out, split="test")


def test_local_data_folder_goes_through_load_dataset_offline(tmp_path, offline):
    folder = tmp_path / "folder"
    folder.mkdir()
    pq.write_table(pa.table({"prompt": ["Q0?", "Q1?"], "gt_answer": ["A0.", "A1."]}), folder / "train-0.parquet")
    records = load(folder, tmp_path / "out", fields=TEXT_ONLY)
    assert [(r.id, r.question, r.answer, r.source) for r in records] == [
        ("folder-0", "Q0?", "A0.", "folder"),
        ("folder-1", "Q1?", "A1.", "folder"),
    ]


def test_hub_ids_keep_the_real_load_dataset_call(tmp_path, monkeypatch):
    calls = []

    def fake_load_dataset(path, name=None, split=None, revision=None):
        calls.append((path, name, split, revision))
        return datasets.Dataset.from_dict({"question": ["Q?"], "answer": ["A."]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (record,) = load("lmms-lab/some-dataset", tmp_path / "out", split="test", fields=TEXT_ONLY)
    load(
        "lmms-lab/some-dataset", tmp_path / "out", split="test", dataset_config="en", revision="v1.0", fields=TEXT_ONLY
    )
    assert calls == [("lmms-lab/some-dataset", None, "test", None), ("lmms-lab/some-dataset", "en", "test", "v1.0")]
    assert (record.id, record.source) == ("lmms-lab/some-dataset-0", "lmms-lab/some-dataset")


def test_hub_id_offline_fails_with_a_clear_error(tmp_path, offline):
    with pytest.raises(InputError, match=r"someone/not-a-dataset: cannot load split 'train' .*check the hub id"):
        load("someone/not-a-dataset", tmp_path / "out")


def test_data_url_image_is_written_as_png(tmp_path):
    url = image_to_data_url(Image.new("RGB", (8, 8), BLUE))
    source = write_jsonl(tmp_path / "u.jsonl", [{"id": "u#1", "image": url, "question": "Q?", "answer": "A."}])
    (record,) = load(source, tmp_path / "out")
    assert record.image == f"images/{_safe_name('u#1')}.png"
    assert load_image(record.image, base_dir=tmp_path / "out").getpixel((0, 0)) == BLUE


# --- errors -------------------------------------------------------------------------------------------------


def test_missing_answer_names_line_field_and_columns(tmp_path):
    png(tmp_path / "p.png")
    rows = [{"q": "Q?", "a": "A.", "img": "p.png"}] * 3 + [{"q": "Q?", "img": "p.png"}]
    source = write_jsonl(tmp_path / "data.jsonl", rows)
    with pytest.raises(DataError) as info:
        load(source, tmp_path / "out", fields=FieldMap(question="q"))
    assert str(info.value) == (
        f"{source} line 1: field 'answer': missing — set --answer-field (synth all: fields.answer=…) to the "
        "column that holds the reference answer (columns here: ['q', 'a', 'img'])"
    )
    with pytest.raises(DataError, match=r"line 4: field 'answer': column 'a' not in the row .*\['q', 'img'\]"):
        load(source, tmp_path / "out", fields=FieldMap(question="q", answer="a"))


def test_unreadable_image_names_record_and_path(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not a png")
    row = {"question": "Q?", "answer": "A."}
    gone = write_jsonl(tmp_path / "gone.jsonl", [{"id": "gone", "image": "missing.png", **row}])
    with pytest.raises(DataError) as info:
        load(gone, tmp_path / "out")
    message = str(info.value)
    assert "line 1: field 'image': record 'gone'" in message and str(tmp_path / "missing.png") in message
    torn = write_jsonl(
        tmp_path / "torn.jsonl",
        [{"id": "ok", "image": str(png(tmp_path / "ok.png")), **row}, {"id": "torn", "image": "broken.png", **row}],
    )
    with pytest.raises(DataError, match=r"line 2: field 'image': record 'torn': cannot decode .*broken\.png"):
        load(torn, tmp_path / "out", fields=FieldMap(image="image"))


def test_present_but_empty_image_is_not_silently_text_only(tmp_path):
    source = write_jsonl(tmp_path / "d.jsonl", [{"id": "n", "image": None, "question": "Q?", "answer": "A."}])
    with pytest.raises(DataError, match=r"line 1: field 'image': record 'n': column 'image' is empty"):
        load(source, tmp_path / "out")


def test_duplicate_ids_are_an_error(tmp_path):
    source = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "question": "Q?", "answer": "A."}] * 2)
    with pytest.raises(DataError, match=r"line 2: field 'id': duplicate id '1'"):
        load(source, tmp_path / "out", fields=TEXT_ONLY)


@pytest.mark.parametrize("source", ["nowhere/../missing.jsonl", "missing.parquet", "/definitely/not/here"])
def test_missing_source_that_is_not_a_hub_id(tmp_path, source):
    with pytest.raises(InputError, match="no such file or folder, and not a hub dataset id"):
        load(source, tmp_path / "out")


# --- write_records ----------------------------------------------------------------------------------------


def test_write_records_round_trips_through_sft_record(tmp_path):
    image_dataset(2).save_to_disk(str(tmp_path / "saved"))
    out = tmp_path / "out"
    path, summary = write_records(tmp_path / "saved", out)
    assert (path, summary["records"], summary["skipped"]) == (out / "records.jsonl", 2, [])
    assert json.loads((out / "records.summary.json").read_text()) == summary
    records = [SFTRecord.from_dict(row, where=f"line {n}") for n, row in read_jsonl(path)]
    assert [r.id for r in records] == ["d/0", "d/1"]
    assert all((out / r.image).is_file() for r in records)
    assert records == load(tmp_path / "saved", out)  # deterministic: same ids, same image files


def test_write_records_reports_the_bad_rows_and_writes_nothing(tmp_path):
    rows = [{"question": "Q?"}, {"question": "Q?", "answer": "A."}, {"answer": "A."}]
    source = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(InputError) as info:
        write_records(source, tmp_path / "out", fields=TEXT_ONLY)
    message = str(info.value)
    assert message.startswith(f"{source}: 2 of 3 rows are bad (66.7%), above --max-bad-fraction 0.05")
    assert "line 1: field 'answer': missing" in message and "line 3: field 'question': missing" in message
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []  # not even a temporary file is left


def test_safe_names_are_deterministic_and_distinct():
    assert _safe_name("plain-1") == "plain-1"
    names = {_safe_name(i) for i in ("a/b", "a_b", "a#b", "../x")}
    assert len(names) == 4 and all("/" not in n and not n.startswith(".") for n in names)
    assert _safe_name("a/b") == _safe_name("a/b")
