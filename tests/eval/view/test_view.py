"""`mrjudge view` without a browser: what each kind of run reads into, the display orders drawn again, the
header's figures, two runs compared, bad rows and bad inputs, and the page served on loopback."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from eval.view import EXPECTED, ViewError, build_page, read_path, render_page, serve_page, write_page
from eval.view.thumbs import Thumbnails
from tests.eval.view.runs import ReadsOptions, audit_file, pairwise_run, shown_order, shown_texts, write_vlrb
from tests.support.items import write_items

MARKERS_A = {1: "WRONG", 2: "WRONG", 4: "FLIP", 6: "MUTE"}
MARKERS_B = {2: "WRONG", 3: "WRONG"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two judges' evaluations of the same eight items: A (wrong on 1 and 2, inconsistent on 4, mute on 6)
    and B (wrong on 2 and 3); each run's data file is its own, with the same ids."""
    root = tmp_path_factory.mktemp("view")
    out = {}
    for name, markers in (("a", MARKERS_A), ("b", MARKERS_B)):
        data = write_vlrb(root / f"data-{name}", markers)
        out[name] = pairwise_run(data, root / f"run-{name}")
    return out


def _rows(section) -> dict[str, dict]:
    return {row["id"]: row for row in section.rows}


def test_an_evaluation_reads_with_the_orders_each_call_saw(runs):
    (section,) = read_path(runs["a"], Thumbnails())
    rows = list(_rows(section).values())
    assert section.kind == "judge" and section.benchmark == "vl_rewardbench" and len(rows) == 8
    assert [r["status"] for r in rows] == [
        "right",
        "wrong",
        "wrong",
        "right",
        "inconsistent",
        "right",
        "undecided",
        "right",
    ]
    for row in rows:
        assert len(row["calls"]) == 2
        for call in row["calls"]:  # drawn again from the judge's seed: exactly what the backend was shown
            assert call["order"] == shown_order(call["think"], row["candidates"])
            assert call["letter"] is None or call["order"][call["slot"]] == call["pick"]
        assert sorted(tuple(c["order"]) for c in row["calls"]) == [(0, 1), (1, 0)]
    assert {r["flaw"] for r in rows} == {"hallucinated_object", "incomplete"}
    assert rows[0]["image"]["path"].endswith("images/0.png") and rows[0]["category"] == "hallucination"


def test_the_header_counts_accuracy_by_category_and_position_bias(runs):
    page = build_page([runs["a"]])
    header = page.sections[0].header
    overall = header["accuracy"][0]
    assert overall["name"] == "all" and overall["n"] == 8 and overall["accuracy"] == pytest.approx(4 / 8)
    assert overall["low"] <= overall["accuracy"] <= overall["high"]
    assert header["statuses"] == {"right": 4, "wrong": 2, "inconsistent": 1, "undecided": 1}
    position = header["position"]
    assert position["calls"] == 16 and position["unparsed_calls"] == 2  # the mute item's two calls
    assert position["picks_per_slot"]["A"] >= 2  # FLIP answered A in both orders
    assert position["consistency"] == pytest.approx(6 / 7)  # the mute item has no parsed pair


def test_two_runs_side_by_side_name_what_changed(runs):
    page = build_page([runs["a"], runs["b"]])
    compare, a, b = page.sections
    assert compare.kind == "compare" and (a.name, b.name) == ("run-a", "run-b")
    changes = {row["id"]: row["status"] for row in compare.rows}
    ids = [row["id"] for row in a.rows]
    assert changes[ids[1]] == "wrong → right" and changes[ids[3]] == "right → wrong"
    assert changes[ids[2]] == "both wrong, same pick" and changes[ids[6]] == "wrong → right"  # undecided → right
    assert compare.header["changes"] == {
        "both right": 3,
        "wrong → right": 3,
        "right → wrong": 1,
        "both wrong, same pick": 1,
    }
    assert compare.rows[0]["a"]["calls"] and compare.rows[0]["b"]["calls"]  # both reasonings travel


def test_a_folder_of_runs_gives_every_run_and_compares_each_with_the_one_before(runs):
    folder = runs["a"].parent
    sections = read_path(folder, Thumbnails())
    assert [s.name for s in sections] == ["run-a", "run-b", "run-a → run-b"]


def test_bad_rows_are_skipped_and_counted(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["a"], run)
    with (run / "predictions.jsonl").open("a") as f:
        f.write('not json\n{"id": "x"}\n{"id": "nope", "pred": 0}\n')
    (section,) = read_path(run, Thumbnails())
    assert len(section.rows) == 8 and section.skipped == 3
    assert any("line 9: not valid JSON" in p for p in section.problems)
    assert any("missing 'pred'" in p for p in section.problems)
    assert any("no item with this id" in p for p in section.problems)


def test_a_missing_image_is_a_placeholder_with_its_path(tmp_path):
    data = write_vlrb(tmp_path / "data")
    run = pairwise_run(data, tmp_path / "run")
    (tmp_path / "data/images/0.png").unlink()
    page = build_page([run])
    key = page.sections[0].rows[0]["image"]["key"]
    assert key.endswith("images/0.png") and page.missing[key] == "file not found"
    assert len(page.thumbs) == 7
    assert all(url.startswith("data:image/jpeg;base64,") for url in page.thumbs.values())


def test_a_large_photo_becomes_a_small_thumbnail(tmp_path):
    data = write_vlrb(tmp_path / "data", size=64)
    photo = Image.effect_noise((6000, 4000), 80).convert("RGB")
    photo.save(tmp_path / "data/images/2.jpg", quality=90)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[2]["image"] = "images/2.jpg"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_page([pairwise_run(data, tmp_path / "run")])
    sizes = [len(url) for url in page.thumbs.values()]
    assert len(sizes) == 8 and max(sizes) < 40_000  # 24 megapixels in, a few KB out


def test_verdicts_are_read_with_the_items_beside_them(tmp_path):
    from jobs.judge_file import judge_file, load_items
    from judge.judging import Judge, JudgeConfig

    items_path, _ = write_items(tmp_path, n=6)
    items = load_items(items_path)
    judge = Judge(ReadsOptions(), JudgeConfig(orders=2, seed=5), image_root=tmp_path)
    judge_file(judge, items, tmp_path / "verdicts.jsonl", show_progress=False)
    (section,) = read_path(tmp_path / "verdicts.jsonl", Thumbnails())
    assert section.kind == "judge" and len(section.rows) == 6
    for row in section.rows:  # three candidates too: the orders come from the recorded settings
        for call in row["calls"]:
            assert call["order"] == shown_order(call["think"], row["candidates"])
    (tmp_path / "elsewhere").mkdir()
    shutil.move(tmp_path / "verdicts.jsonl", tmp_path / "elsewhere/verdicts.jsonl")
    with pytest.raises(ViewError, match="give the file `mrjudge judge --input` read as --items"):
        read_path(tmp_path / "elsewhere/verdicts.jsonl", Thumbnails())
    moved = read_path(tmp_path / "elsewhere/verdicts.jsonl", Thumbnails(), items=items_path)
    assert len(moved[0].rows) == 6
    assert all(
        call["order"] is None or len(call["order"]) == len(row["candidates"])
        for row in moved[0].rows
        for call in row["calls"]
    )


def test_an_audit_shows_what_the_judge_paid_against_the_gold(tmp_path):
    path = audit_file(tmp_path)
    page = build_page([path])
    (section,) = page.sections
    statuses = [(row["completion"], row["step"], row["status"]) for row in section.rows]
    assert statuses.count(("wrong", 0, "overpaid")) == 3 and statuses.count(("right", 0, "underpaid")) == 3
    assert statuses.count(("right", 1, "agreed")) == 3
    assert section.header["overall"]["overpay"] == 1.0 and section.header["overall"]["underpay"] == 0.5
    assert [w["window"] for w in section.header["windows"]] == [0, 1]
    assert len(page.thumbs) == 1 and section.rows[0]["even"] == 0.5


def test_a_best_of_n_run_shows_the_picks_and_grades(tmp_path):
    from eval.mmvet import load_candidates, load_mmvet, run_mmvet
    from judge.backends.openai_http import OpenAIBackend
    from judge.judging import Judge, JudgeConfig
    from tests.eval.fixtures import MMVET_GRADES, write_mmvet, write_mmvet_candidates
    from tiny_world.servers.grader_server import make_grader_app
    from tiny_world.servers.openai_server import serve

    questions = load_mmvet(write_mmvet(tmp_path))
    candidates = load_candidates(write_mmvet_candidates(tmp_path), questions)
    with serve(make_grader_app()) as url:
        judge = Judge(ReadsOptions(), JudgeConfig(orders=3, seed=1))
        run_mmvet(judge, questions, candidates, OpenAIBackend(url), tmp_path / "bon", show_progress=False)
    page = build_page([tmp_path / "bon"])
    (section,) = page.sections
    assert section.kind == "bestofn" and len(section.rows) == len(MMVET_GRADES)
    for row in section.rows:
        assert row["grades"] == MMVET_GRADES[row["id"]] and set(row["picks"]) == {"first", "random", "judge", "oracle"}
        assert row["correct"] == (row["picked_grade"] == max(row["grades"]))
        assert row["status"] == (
            "inconsistent" if row["consistent"] is False else "right" if row["correct"] else "wrong"
        )
        assert row["image"] is not None and len(row["calls"]) == 3
    assert len(page.thumbs) == len(MMVET_GRADES)


def test_a_knockout_judge_shows_its_bracket_game_by_game(tmp_path):
    """Four answers, a judge shown two at a time: the row holds the bracket, and each call the two players in
    the order it saw them (through the tournament's canonical order and back)."""
    from eval.mmvet import load_candidates, load_mmvet, run_mmvet
    from judge.backends.openai_http import OpenAIBackend
    from judge.judging import Judge, JudgeConfig
    from tests.eval.fixtures import write_mmvet, write_mmvet_candidates
    from tiny_world.servers.grader_server import make_grader_app
    from tiny_world.servers.openai_server import serve
    from tiny_world.synthetic_eval import KnockoutSelector

    questions = load_mmvet(write_mmvet(tmp_path))
    candidates = load_candidates(write_mmvet_candidates(tmp_path), questions)
    judge = KnockoutSelector(Judge(ReadsOptions(), JudgeConfig(orders=2, seed=4)), max_options=2)
    with serve(make_grader_app()) as url:
        run_mmvet(judge, questions, candidates, OpenAIBackend(url), tmp_path / "bon", show_progress=False)
    (section,) = build_page([tmp_path / "bon"]).sections
    for row in section.rows:
        k = len(row["candidates"])
        assert len(row["games"]) == k - 1 and len(row["calls"]) == 2 * (k - 1)  # a knock-out: k - 1 games
        final = max(row["games"], key=lambda g: g["round"])
        assert final["winner"] == row["pick"]
        for call in row["calls"]:
            game = row["games"][call["game"]]
            assert call["order"] == shown_order(call["think"], row["candidates"])
            assert sorted(call["order"]) == sorted(game["players"])


def test_inputs_of_no_known_kind_are_refused_naming_what_was_expected(tmp_path, runs):
    (tmp_path / "other.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(ViewError) as caught:
        build_page([tmp_path / "other.jsonl"])
    assert EXPECTED in str(caught.value)
    items_path, _ = write_items(tmp_path / "items", n=2)
    with pytest.raises(ViewError, match="these are MC items, not verdicts"):
        build_page([items_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ViewError, match="no run in this folder"):
        build_page([tmp_path / "empty"])
    with pytest.raises(ViewError, match="no such file or folder"):
        build_page([tmp_path / "nowhere"])
    moved = tmp_path / "moved"
    shutil.copytree(runs["a"], moved)
    metrics = json.loads((moved / "metrics.json").read_text())
    metrics["data_source"] = str(tmp_path / "gone.jsonl")
    (moved / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(ViewError, match=r"gone\.jsonl is not a file here\); give the benchmark's file as --data"):
        build_page([moved])
    assert len(build_page([moved], data=runs["a"].parent / "data-a/vlrb.jsonl").sections[0].rows) == 8


def test_a_users_predictions_file_is_read_with_the_benchmark_file(runs, tmp_path):
    """`mrjudge eval --predictions` keeps no predictions of its own: the user's `{"id", "pred"}` file is viewed."""
    rows = [json.loads(line) for line in (runs["a"] / "predictions.jsonl").read_text().splitlines()]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": r["id"], "pred": r["pred"]}) + "\n" for r in rows))
    with pytest.raises(ViewError, match="give the benchmark's file as --data"):
        build_page([preds])
    (section,) = build_page([preds], data=runs["a"].parent / "data-a/vlrb.jsonl").sections
    assert section.name == "preds" and [r["calls"] for r in section.rows] == [[]] * 8
    expected = ["undecided" if r["pred"] is None else "right" if r["pred"] == r["preferred"] else "wrong" for r in rows]
    assert [r["status"] for r in section.rows] == expected and expected.count("undecided") == 1
    (tmp_path / "scored").mkdir()
    (tmp_path / "scored/metrics.json").write_text("{}")
    with pytest.raises(ViewError, match="view that file: `mrjudge view PREDICTIONS.jsonl --data BENCHMARK_FILE`"):
        build_page([tmp_path / "scored"])


def test_the_command_writes_one_page_and_reports_errors_in_one_line(runs, tmp_path, capsys):
    from mrjudge.cli import main

    out = tmp_path / "page.html"
    assert main(["view", str(runs["a"]), str(runs["b"]), "--out", str(out)]) == 0
    html = out.read_text()
    assert "<script src=" not in html and "<link" not in html and "http://" not in html.split("<script>")[0]
    data = json.loads(html.split('id="view-data">')[1].split("</script>")[0].replace("<\\/", "</"))
    assert [s["kind"] for s in data["sections"]] == ["compare", "judge", "judge"] and len(data["thumbs"]) == 16
    assert "wrote" in capsys.readouterr().out
    assert main(["view", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such file or folder" in err and "Traceback" not in err


def test_a_texts_own_script_tag_cannot_end_the_data_block(tmp_path):
    data = write_vlrb(tmp_path / "data", {0: "</script><script>alert(1)</script>"})
    html = render_page(build_page([pairwise_run(data, tmp_path / "run")]))
    assert html.count("</script>") == 2  # the data block's and the page script's own


def test_serve_hands_out_the_page_and_only_its_own_images(runs):
    from judge.loopback import free_port

    page = build_page([runs["a"]])
    server = serve_page(page, free_port())
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/") as reply:
            assert b"mr-judge view" in reply.read()
        key = page.sections[0].rows[0]["image"]["key"]
        with urllib.request.urlopen(base + "/original?key=" + urllib.request.quote(key)) as reply:
            assert reply.headers["Content-Type"] == "image/png" and reply.read().startswith(b"\x89PNG")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(base + "/original?key=/etc/passwd")
    finally:
        server.shutdown()
        server.server_close()


def test_write_page_is_atomic_and_returns_its_size(runs, tmp_path):
    out = tmp_path / "deep/page.html"
    size = write_page(build_page([runs["a"]], out=out), out)
    assert out.stat().st_size == size and not list(out.parent.glob("*.tmp*"))


@pytest.mark.parametrize("tournament", ["knockout", "round_robin"])
def test_a_tournaments_games_name_their_players_in_the_callers_order(tournament):
    """`RewardResult.games` (what `Verdict.games` is built from) through the canonical order and back: each
    game's verdict saw exactly its two players' texts, its choice 0 being the first player."""
    from judge.judging import Judge, JudgeConfig
    from judge.reward.scoring import RewardRequest, compute_rewards

    responses = ["zeta wrong", "correct, alpha", "beta wrong", "gamma wrong", "delta wrong"]
    request = RewardRequest(prompt="Q?", responses=responses, mode="tournament", tournament=tournament, id="r")
    (result,) = compute_rewards(Judge(ReadsOptions(), JudgeConfig(orders=2, seed=2)), [request], max_options=2)
    assert len(result.games) == len(result.verdicts) == (4 if tournament == "knockout" else 10)
    for (_, i, j), verdict in zip(result.games, result.verdicts):
        seen = {text for raw in verdict.raw for text in shown_texts(raw)}
        assert seen == {responses[i], responses[j]}
        if "correct" in responses[i] + responses[j]:
            assert (i, j)[verdict.choice] == 1  # the right answer wins every game it plays
