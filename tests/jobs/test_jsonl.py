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


def _mc_lines(n: int, bad: set[int]) -> str:
    """`n` MC-item lines; those numbered in `bad` (1-based) have one candidate, or are not JSON when even."""
    lines = []
    for number in range(1, n + 1):
        row = {"id": str(number), "question": "q", "candidates": ["x", "y"]}
        if number in bad:
            lines.append("{torn" if number % 2 == 0 else json.dumps({**row, "candidates": ["x"]}))
        else:
            lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


def test_bad_lines_under_the_fraction_are_skipped_and_listed(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(_mc_lines(40, bad={3, 8}))
    records = read_records(path, MCItem.from_dict, max_bad_fraction=0.05)
    assert [r.id for r in records] == [str(i) for i in range(1, 41) if i not in (3, 8)]
    assert records.rows == 40 and len(records.skipped) == 2
    assert "line 3: field 'candidates'" in records.skipped[0] and "line 8: not valid JSON" in records.skipped[1]


def test_bad_lines_over_the_fraction_stop_naming_the_flag(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(_mc_lines(10, bad={3, 8}))
    with pytest.raises(InputError) as info:
        read_records(path, MCItem.from_dict, max_bad_fraction=0.05)
    message = str(info.value)
    assert f"{path}: 2 of 10 rows are bad (20.0%), above --max-bad-fraction 0.05" in message
    assert "line 3: field 'candidates'" in message and "line 8: not valid JSON" in message
    with pytest.raises(ValueError, match=r"--max-bad-fraction must be in \[0, 1\], got 2"):
        read_records(path, MCItem.from_dict, max_bad_fraction=2)
