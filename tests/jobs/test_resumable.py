"""The one job loop: resume from the partial file, set failed rows aside, publish in the items' order."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass

import pytest

from jobs.progress import progress_bar
from jobs.resumable import FAILED, SettingsChanged, failed_path_for, run_resumable, settings_path_for
from judge.judging import batch_seed, item_rng


@dataclass
class Item:
    id: str
    value: int


def _square(batch):
    return [{"id": item.id, "square": item.value**2} for item in batch]


def test_resume_skips_done_ids_and_publishes_in_item_order(tmp_path):
    items = [Item(f"q{i}", i) for i in range(9)]
    out = tmp_path / "out.jsonl"
    # A killed run left three rows, the last one torn mid-line.
    out.with_name("out.jsonl.partial").write_text(
        json.dumps({"id": "q5", "square": 25}) + "\n" + json.dumps({"id": "q1", "square": 1}) + '\n{"id": "q2", "sq'
    )
    seen: list[list[str]] = []

    def work(batch):
        seen.append([item.id for item in batch])
        return list(reversed(_square(batch)))  # any order within a batch

    run = run_resumable(out, items, work, batch_size=3, show_progress=False)
    assert seen == [["q0", "q2", "q3"], ["q4", "q6", "q7"], ["q8"]]
    assert run.n_todo == 7 and run.failures == [] and not run.failed_path.exists()
    assert [row["id"] for row in run.rows] == [f"q{i}" for i in range(9)]
    assert out.read_text() == "".join(json.dumps({"id": f"q{i}", "square": i * i}) + "\n" for i in range(9))
    assert not out.with_name("out.jsonl.partial").exists()
    again = run_resumable(out, items, work, batch_size=3, show_progress=False)
    assert again.n_todo == 0 and len(seen) == 3 and again.rows == run.rows


def test_failed_rows_are_set_aside_then_retried(tmp_path):
    rows = [{"id": i, "value": i} for i in range(6)]
    out = tmp_path / "stage.jsonl"
    down = {1, 4}

    def work(batch):
        return [
            {"id": r["id"], FAILED: "timeout", "error": "no reply"} if r["id"] in down else {"id": r["id"], "v": 1}
            for r in batch
        ]

    run = run_resumable(out, rows, work, batch_size=4, show_progress=False)
    assert run.failed_path == tmp_path / "stage.failed.jsonl" == failed_path_for(out)
    assert run.failures == [
        {"id": 1, "reason": "timeout", "error": "no reply"},
        {"id": 4, "reason": "timeout", "error": "no reply"},
    ]
    assert [json.loads(line)["id"] for line in run.failed_path.read_text().splitlines()] == [1, 4]
    assert [row["id"] for row in run.rows] == [0, 2, 3, 5]
    down.clear()
    retry = run_resumable(out, rows, work, batch_size=4, show_progress=False)
    assert retry.n_todo == 2 and retry.failures == [] and not retry.failed_path.exists()
    assert [row["id"] for row in retry.rows] == list(range(6))


def test_concurrency_sends_rows_one_at_a_time_and_finish_runs_in_the_driver(tmp_path):
    items = [Item(f"r{i}", i) for i in range(8)]
    sizes, threads = [], set()

    def work(batch):
        sizes.append(len(batch))
        threads.add(threading.current_thread().name)
        return [{"id": item.id, "value": item.value} for item in batch]

    def finish(batch, outputs):
        assert threading.current_thread() is threading.main_thread()
        return [{**row, "tokens": 2, "seen": [item.id for item in batch]} for row in outputs]

    run = run_resumable(
        tmp_path / "o.jsonl",
        items,
        work,
        batch_size=5,
        concurrency=3,
        finish=finish,
        tokens=lambda row: row["tokens"],
        show_progress=False,
    )
    assert sizes == [1] * 8 and all(name.startswith("rows") for name in threads)
    assert run.tokens == 16 and [row["id"] for row in run.rows] == [item.id for item in items]
    assert all(row["seen"] == [row["id"]] for row in run.rows)
    assert run.rows_for(["r3", "r0"]) == [run.rows[0], run.rows[3]]


@pytest.mark.parametrize(("option", "value"), [("concurrency", 0), ("batch_size", 0)])
def test_bad_settings_are_refused_before_any_file_is_written(tmp_path, option, value):
    settings = {"batch_size": 2, option: value}
    with pytest.raises(ValueError, match=option.replace("_", ".?")):
        run_resumable(tmp_path / "o.jsonl", [Item("a", 1)], _square, show_progress=False, **settings)
    assert list(tmp_path.iterdir()) == []


def test_batch_seed_is_the_first_items_seed_and_none_when_empty():
    items = [Item("b", 0), Item("c", 1)]
    assert batch_seed(7, items) == item_rng(7, "b", "sampling").randrange(2**31)
    assert batch_seed(7, items, "candidates") != batch_seed(7, items) != batch_seed(8, items)
    assert batch_seed(7, []) is None


@pytest.mark.parametrize("enabled", [True, False])
def test_a_bar_takes_totals_and_notes_and_a_disabled_one_draws_nothing(enabled):
    from rich.console import Console

    drawn = io.StringIO()
    console = Console(file=drawn, force_terminal=True, width=100, color_system=None)
    with progress_bar("rows", total=2, enabled=enabled, console=console) as (set_total, advance):
        advance(1)
        set_total(5)
        advance(4, note="12 tok/s")
    last_frame = drawn.getvalue().split("\r")[-1]
    if enabled:
        assert "5/5 12 tok/s" in last_frame  # the new total and the note reached the bar
    else:
        assert drawn.getvalue() == ""


def test_a_rerun_with_other_settings_is_refused_and_overwrite_starts_over(tmp_path):
    """The settings that shaped the rows are recorded; a resume with others names them instead of mixing rows."""
    items = [Item(f"q{i}", i) for i in range(4)]
    out = tmp_path / "v.jsonl"
    calls: list[int] = []

    def work(batch):
        calls.append(len(batch))
        return _square(batch)

    settings = {"judge": {"orders": 2, "max_pixels": 401408}, "model": "m"}
    assert run_resumable(out, items, work, batch_size=4, show_progress=False, settings=settings).n_todo == 4
    assert (
        json.loads(settings_path_for(out).read_text()) == settings and settings_path_for(out).name == "v.settings.json"
    )
    assert run_resumable(out, items, work, batch_size=4, show_progress=False, settings=settings).n_todo == 0

    before = out.read_bytes()
    changed = {"judge": {"orders": 1, "max_pixels": 200704}, "model": "m"}
    with pytest.raises(SettingsChanged) as refused:
        run_resumable(out, items, work, batch_size=4, show_progress=False, settings=changed)
    message = str(refused.value)
    assert "judge.max_pixels: 401408 → 200704" in message and "judge.orders: 2 → 1" in message
    assert "model:" not in message  # only what differs is named
    assert "new output" in message and "--overwrite" in message
    assert out.read_bytes() == before and calls == [4]  # nothing ran, nothing was touched

    again = run_resumable(out, items, work, batch_size=4, show_progress=False, settings=changed, overwrite=True)
    assert again.n_todo == 4 and calls == [4, 4] and json.loads(settings_path_for(out).read_text()) == changed


def test_rows_without_a_record_take_this_runs_settings(tmp_path):
    """Outputs written before settings were recorded still resume; from then on they are checked."""
    items = [Item("a", 1), Item("b", 2)]
    out = tmp_path / "old.jsonl"
    run_resumable(out, items[:1], _square, batch_size=2, show_progress=False)
    assert not settings_path_for(out).exists()
    run = run_resumable(out, items, _square, batch_size=2, show_progress=False, settings={"seed": 0})
    assert run.n_todo == 1 and json.loads(settings_path_for(out).read_text()) == {"seed": 0}
    with pytest.raises(SettingsChanged, match="seed: 0 → 1"):
        run_resumable(out, items, _square, batch_size=2, show_progress=False, settings={"seed": 1})
