"""VL-RewardBench's readings: the registry, metrics against hand-computed values, and cal.py's reading checked
against cal.py followed by hand at every k."""

from __future__ import annotations

import argparse
import json

import pytest
from mrjudge.cli import build_parser

from eval import vl_rewardbench as vlrb
from eval.vl_rewardbench import READINGS, score
from jobs.jsonl import InputError
from tests.eval.vl_rewardbench.forms import calpy_reference, inference_lines
from tests.support.vlrb import eval_vlrb, vlrb_metrics


def _subcommand(parser: argparse.ArgumentParser, dest: str, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if a.dest == dest).choices[name]


def _reading_choices() -> tuple[str, ...]:
    """`mrjudge eval vl-rewardbench --reading`'s choices."""
    vlrb_parser = _subcommand(_subcommand(build_parser(), "command", "eval"), "benchmark", "vl-rewardbench")
    return tuple(next(a for a in vlrb_parser._actions if a.dest == "reading").choices)


def test_every_reading_the_command_line_offers_is_registered_in_its_order():
    assert tuple(READINGS) == ("cal.py", "all-calls", "lmms-eval")
    assert _reading_choices() == tuple(READINGS)


def test_an_unknown_reading_names_the_readings_there_are(items):
    with pytest.raises(InputError, match="reading 'cal': choose one of cal.py, all-calls, lmms-eval"):
        score(items, [], reading="cal")


def test_metrics_by_hand(items):
    preds = [0, 0, None, 0, 1, 1, 0, 0]  # agree, reject, unparsed, agree, agree, reject, agree, agree
    rows = [{"id": i.id, "pred": p} for i, p in zip(items, preds)]
    rows[2]["status"] = "other"
    m = score(items, rows)
    assert m["accuracy_hallucination"] == pytest.approx(2 / 3)
    assert m["accuracy_reasoning"] == 1.0
    assert m["accuracy_general"] == 0.5
    assert m["overall_accuracy"] == pytest.approx(5 / 7)
    assert m["macro_accuracy"] == pytest.approx((2 / 3 + 1 + 0.5) / 3)
    assert (m["n"], m["decided"], m["unparsed"], m["no_majority"]) == (8, 7, 1, 1)
    assert (m["accuracy_povid"], m["accuracy_rlaif_v"], m["accuracy_rlhf_v"]) == (1.0, 0.0, None)
    assert (m["accuracy_mathverse"], m["accuracy_mmmu"], m["accuracy_wildvision"], m["accuracy_vlfeedback"]) == (
        1.0,
        1.0,
        0.0,
        1.0,
    )
    assert "consistency" not in m


def test_consistency_and_bad_predictions(items):
    rows = [{"id": i.id, "pred": i.preferred, "consistent": n % 2 == 0} for n, i in enumerate(items)]
    assert score(items, rows)["consistency"] == 0.5
    with pytest.raises(InputError, match="match no row of the data"):
        score(items, [{"id": "nope", "pred": 0}])
    with pytest.raises(InputError, match="'pred' must be 0, 1 or null"):
        score(items, [{**row, "pred": 2} if n == 0 else row for n, row in enumerate(rows)])
    with pytest.raises(InputError, match=f"the predictions cover 1 of {len(items)} rows"):
        score(items, rows[:1])  # a figure on part of the set is not the benchmark's


def test_cli_score_matches_calpy_by_hand_at_every_k(github_run, tmp_path):
    data, rows, _, _, predictions, path = github_run
    metrics = vlrb_metrics(data, path, tmp_path / "scored")
    reference = calpy_reference(inference_lines(rows, predictions))
    assert (metrics["reading"], metrics["headline_k"], metrics["calls_per_item"]) == ("cal.py", 9, 10)
    for k, (overall, macro, _groups) in reference.items():
        assert metrics[f"overall_accuracy_k{k}"] == pytest.approx(overall)
        assert metrics[f"macro_accuracy_k{k}"] == pytest.approx(macro)
    overall, macro, groups = reference[9]
    assert (metrics["overall_accuracy"], metrics["macro_accuracy"]) == (pytest.approx(overall), pytest.approx(macro))
    for group, accuracy in groups.items():
        assert metrics[f"accuracy_{group}"] == pytest.approx(accuracy)
    assert len({round(reference[k][0], 9) for k in reference}) > 1  # the ks really differ on these calls
    report = (tmp_path / "scored/report.md").read_text()
    assert "Headline: cal.py's reading at k = 9 (of 10 calls per item" in report


def test_all_calls_reading_is_the_named_option(github_run, tmp_path):
    data, _, items, _, predictions, path = github_run
    metrics = vlrb_metrics(data, path, tmp_path / "all", "--reading", "all-calls")
    outcomes = [vlrb.item_outcome([c["outcome"] for c in p["calls"]]) for p in predictions]
    agree = sum(o == "agree" for o in outcomes)
    decided = agree + sum(o == "reject" for o in outcomes)
    assert metrics["reading"] == "all-calls" and metrics["overall_accuracy"] == pytest.approx(agree / decided)
    assert metrics["unparsed"] == len(items) - decided
    assert metrics["overall_accuracy_unparsed_wrong"] == pytest.approx(agree / len(items))
    assert metrics["overall_accuracy_unparsed_coin"] == pytest.approx((agree + 0.5 * (len(items) - decided)) / 12)
    cal = vlrb_metrics(data, path, tmp_path / "cal")
    assert cal["all_calls_overall_accuracy"] == metrics["overall_accuracy"]


def test_bootstrap_interval_covers_the_estimate_and_is_reproducible(github_run, tmp_path):
    data, _, _, _, _, path = github_run
    one = vlrb_metrics(data, path, tmp_path / "one")
    two = vlrb_metrics(data, path, tmp_path / "two")
    for key in ("overall_accuracy", "macro_accuracy", "accuracy_hallucination"):
        low, high = one[f"{key}_ci95_low"], one[f"{key}_ci95_high"]
        assert low <= one[key] <= high and low < high
        assert (two[f"{key}_ci95_low"], two[f"{key}_ci95_high"]) == (low, high)
    other = vlrb_metrics(data, path, tmp_path / "other", "--seed", "5")
    assert other["bootstrap_seed"] == 5 and other["overall_accuracy"] == one["overall_accuracy"]
    assert "95 % CI" in (tmp_path / "one/report.md").read_text()


def test_headline_k_is_one_of_calpys(github_run, tmp_path, capsys):
    data, _, _, _, _, path = github_run
    assert vlrb_metrics(data, path, tmp_path / "k5", "--headline-k", "5")["overall_accuracy"] is not None
    metrics = json.loads((tmp_path / "k5/metrics.json").read_text())
    assert metrics["headline_k"] == 5 and metrics["overall_accuracy"] == metrics["overall_accuracy_k5"]
    assert eval_vlrb(data, path, tmp_path / "x", "--headline-k", "4") == 2
    assert "--headline-k 4" in capsys.readouterr().err
