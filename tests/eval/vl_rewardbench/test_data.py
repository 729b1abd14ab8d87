"""VL-RewardBench's data: both published forms, groups from ids, bad rows, provenance, and predictions matched
back to repeated rows."""

from __future__ import annotations

import json

import pytest

from eval import vl_rewardbench as vlrb
from jobs.jsonl import InputError
from tests.eval.fixtures import VLRB_IDS, write_vlrb_jsonl, write_vlrb_parquet
from tests.eval.vl_rewardbench.forms import ROWS, github_rows, write_github_jsonl, write_hub_parquet
from tests.support.vlrb import eval_vlrb, vlrb_metrics
from tiny_world.bench_files import png_bytes as _png


def test_groups_from_id_prefix_including_povid(items):
    assert [(i.source, i.group) for i in items] == [
        ("povid", "hallucination"),
        ("rlaif_v", "hallucination"),
        ("rlhf_v", "hallucination"),
        ("mathverse", "reasoning"),
        ("mmmu", "reasoning"),
        ("wildvision", "general"),
        ("vlfeedback", "general"),
        ("povid", "hallucination"),
    ]
    assert [i.preferred for i in items] == [p for _, p in VLRB_IDS]


def test_parquet_with_image_bytes_loads_like_jsonl(tmp_path, items):
    from judge.images import load_image

    parquet = vlrb.load_vl_rewardbench(write_vlrb_parquet(tmp_path / "pq"))
    assert [(i.id, i.preferred, i.group) for i in parquet] == [(i.id, i.preferred, i.group) for i in items]
    assert load_image(parquet[0].image).size == (84, 84)


def test_github_jsonl_keeps_every_row_and_strips_image_tags(github_run):
    data, rows, items, judge, _, _ = github_run
    assert len(items) == len(ROWS) == 12
    assert [i.id for i in items][4:8] == [
        "mathverse_3414", "mathverse_3414#2", "mmmu_pro_test_Marketing_150", "mmmu_pro_test_Marketing_150#2"
    ]  # fmt: skip
    assert items[5].extra["id"] == "mathverse_3414" and items[5].responses == ["correct F", "wrong F2"]
    assert items[0].query == "Describe the image." and items[0].image.endswith("hallucination_pair_1-0.png")
    assert judge.calls == 120 and not any("<image>" in p for p in judge.prompts)
    assert "Question: Describe the image.\n\nAnswer 1:" in judge.prompts[0]
    assert [(i.source, i.group) for i in items][9] == ("vlfeedback", "general")


def test_hub_parquet_scores_the_same_calls_the_same_but_hashes_differently(github_run, tmp_path):
    data, _, _, _, _, path = github_run
    parquet = write_hub_parquet(tmp_path / "hub")
    items = vlrb.load_vl_rewardbench(parquet)
    assert [i.id for i in items][5] == "mathverse_3414#2" and isinstance(items[0].image, dict)
    assert items[0].query == "Describe the image."
    from_jsonl = vlrb_metrics(data, path, tmp_path / "a")
    from_parquet = vlrb_metrics(parquet, path, tmp_path / "b")
    keys = [k for k in from_jsonl if k.startswith(("overall", "macro", "accuracy_")) and "_ci95_" not in k]
    assert {k: from_parquet[k] for k in keys} == {k: from_jsonl[k] for k in keys}
    assert from_parquet["data_sha256"] != from_jsonl["data_sha256"]
    assert (from_parquet["data_rows"], from_parquet["data_revision"]) == (12, None)


def test_a_local_copy_of_the_hub_repository_loads(tmp_path):
    parquet = write_hub_parquet(tmp_path / "repo" / "data")
    items = vlrb.load_vl_rewardbench(tmp_path / "repo")
    assert len(items) == 12 and items.provenance["data_revision"] is None
    assert items.provenance["data_sha256"] == vlrb.load_vl_rewardbench(parquet).provenance["data_sha256"]


def test_data_sha256_changes_with_one_row_and_only_then(tmp_path):
    first = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "a")).provenance
    same = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "b")).provenance
    rows = github_rows(tmp_path / "c")
    rows[7]["response"][1] = "wrong H3"
    changed = vlrb.load_vl_rewardbench(write_github_jsonl(tmp_path / "c", rows)).provenance
    assert first["data_sha256"] == same["data_sha256"] != changed["data_sha256"]
    (tmp_path / "b/images/vlfeedback/RLHF-V-4-3.png").write_bytes(_png((1, 2, 3)))  # an image's bytes count too
    assert vlrb.load_vl_rewardbench(tmp_path / "b/data.jsonl").provenance["data_sha256"] != first["data_sha256"]
    assert vlrb.load_vl_rewardbench(tmp_path / "a/data.jsonl", limit=5).provenance["data_rows"] == 5


def test_bad_rows_are_reported_with_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "query": "q", "response": ["x"], "image": "i.png", "human_ranking": [0, 1]}\n'
        '{"id": "b", "query": "q", "response": ["x", "y"], "image": "i.png", "human_ranking": [0, 0]}\n'
        '{"id": "c", "response": ["x", "y"], "image": "i.png", "human_ranking": [0, 1]}\n'
    )
    with pytest.raises(InputError) as info:
        vlrb.load_vl_rewardbench(path)
    message = str(info.value)
    assert "line 1: field 'response'" in message
    assert "line 2: field 'human_ranking'" in message
    assert "line 3: field 'query'" in message


def test_missing_images_fail_before_any_model(tmp_path):
    path = write_vlrb_jsonl(tmp_path)
    (tmp_path / "images/3.png").unlink()
    with pytest.raises(InputError, match="image file"):
        vlrb.load_vl_rewardbench(path)


def test_bad_rows_under_max_bad_fraction_are_left_out_and_counted(tmp_path):
    path = write_vlrb_jsonl(tmp_path)
    (tmp_path / "images/3.png").unlink()  # one row's image is gone
    with pytest.raises(InputError, match="1 problem"):
        vlrb.load_vl_rewardbench(path)
    items = vlrb.load_vl_rewardbench(path, max_bad_fraction=0.2)
    assert len(items) == len(VLRB_IDS) - 1 and items.provenance["data_skipped_rows"] == 1
    assert len(items.skipped) == 1 and "field 'image': image file not found" in items.skipped[0]
    assert vlrb.load_vl_rewardbench(write_vlrb_jsonl(tmp_path / "clean")).provenance["data_skipped_rows"] == 0


def test_predictions_file_with_repeated_ids_matches_rows_in_order(github_run, tmp_path):
    data, _, items, _, _, _ = github_run
    preds = tmp_path / "user.jsonl"
    decisions = [i.preferred for i in items]
    decisions[5] = 1 - decisions[5]  # the second mathverse_3414 row is wrong, the first right
    preds.write_text("".join(json.dumps({"id": i.extra["id"], "pred": d}) + "\n" for i, d in zip(items, decisions)))
    metrics = vlrb_metrics(data, preds, tmp_path / "user")
    assert metrics["reading"] == "decisions" and metrics["accuracy_reasoning"] == pytest.approx(3 / 4)
    assert metrics["accuracy_mathverse"] == 0.5
    preds.write_text(preds.read_text() + json.dumps({"id": "mathverse_3414", "pred": 0}) + "\n")
    assert eval_vlrb(data, preds, tmp_path / "x") == 2  # a third row for a twice-seen id
