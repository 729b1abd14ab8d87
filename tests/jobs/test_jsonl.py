from __future__ import annotations

import json

import pytest

from jobs.jsonl import InputError, ResumableJsonlWriter, read_records, write_jsonl_atomic
from judge.types import MCItem


def test_writer_resumes_without_duplicates(tmp_path):
    out = tmp_path / "v.jsonl"
    with ResumableJsonlWriter(out) as writer:
        writer.write([{"id": 1}, {"id": 2}])
    assert not out.exists(), "output appears only when the job finishes"
    # A crash in the middle of a line leaves a torn tail.
    with open(out.with_name("v.jsonl.partial"), "a") as handle:
        handle.write('{"id": 3, "ch')
    with ResumableJsonlWriter(out) as writer:
        assert writer.done_ids == {1, 2}
        writer.write([{"id": 2}, {"id": 3}])
        writer.finish(order=[3, 2, 1])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [3, 2, 1]
    assert not out.with_name("v.jsonl.partial").exists()
    with ResumableJsonlWriter(out) as writer:
        assert writer.done_ids == {1, 2, 3}


def test_atomic_write_leaves_no_temp_files(tmp_path):
    write_jsonl_atomic(tmp_path / "a.jsonl", [{"id": 1}])
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]


def test_all_bad_lines_are_reported(tmp_path):
    path = tmp_path / "items.jsonl"
    good = {"id": "a", "question": "q", "candidates": ["x", "y"]}
    lines = [good, {**good, "id": "b", "candidates": ["x"]}, {**good, "id": "a"}, {**good, "id": "c", "label": 5}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(InputError) as info:
        read_records(path, MCItem.from_dict)
    message = str(info.value)
    assert "line 2: field 'candidates'" in message
    assert "line 3: field 'id': duplicate id 'a' (first on line 1)" in message
    assert "line 4: field 'label'" in message


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": "a", "question": "q", "candidates": ["x", "y"]}\n{oops\n')
    with pytest.raises(InputError, match="line 2: not valid JSON"):
        read_records(path, MCItem.from_dict)


def test_many_bad_lines_are_all_counted_and_the_first_listed(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "question": "q", "candidates": ["x"]}) + "\n" for i in range(25)))
    with pytest.raises(InputError) as info:
        read_records(path, MCItem.from_dict, max_errors=20)
    lines = str(info.value).splitlines()
    assert lines[0] == f"25 problem(s) in {path}:"
    assert len(lines) == 1 + 20 + 1 and "line 20: field 'candidates'" in lines[20] and lines[-1] == "... and 5 more"
