"""benchmarks.audit_sampling: the share it draws again is the one a real audit at that rate and seed scores, and
its figures at rate 1 are the whole audit's."""

from __future__ import annotations

import json

import pytest

from benchmarks.audit_sampling import drawn, main, read_groups
from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit


def _audit(path, rate: float, seed: int = 0) -> None:
    """Three windows of two steps, three pairwise groups of two a step: "wrong" paid 0.8 in group 0 of each step,
    0.2 in the others (overpay one third), "right" paid 0.6; every group's prompt is the same."""
    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=rate, seed=seed, window=2, path=str(path)))
    for step in range(6):
        groups = [AuditedGroup("Q", ["wrong", "right"], [0.8 if i == 0 else 0.2, 0.6], "right", pairwise=True)
                  for i in range(3)]  # fmt: skip
        audit.submit(groups, step)
    audit.close()


def test_the_draw_is_the_audits_own_and_rate_one_is_the_whole(tmp_path, capsys):
    whole = tmp_path / "whole.jsonl"
    _audit(whole, 1.0)
    groups = read_groups(whole)
    assert len(groups) == 18 and all(len(g) == 2 for g in groups)  # one prompt per step: told apart by number

    for seed in range(5):  # a real audit at 0.5 scores exactly the groups the benchmark draws for it
        share = tmp_path / f"share{seed}.jsonl"
        _audit(share, 0.5, seed)
        real = [json.loads(line)["group"] for line in share.read_text().splitlines()] if share.exists() else []
        assert sorted(set(real)) == [g[0]["group"] for g in drawn(groups, 0.5, seed)]

    result = main([str(whole), "--rates", "0.5,1", "--windows", "1", "--draws", "50"])
    assert json.loads(capsys.readouterr().out)["by_rate"]["1.0"]["start"]["whole"] == 0.3333  # the JSON line
    exact = result["by_rate"]["1.0"]
    for span in ("start", "end"):
        assert exact[span]["whole"] == pytest.approx(1 / 3)
        assert exact[span]["wrong_mean"] == 6 and exact[span]["sd"] == 0 and exact[span]["within"] == 1
    half = result["by_rate"]["0.5"]["start"]
    assert half["sd"] > 0 and 0 < half["within"] < 1 and half["groups_for_tolerance"] > 6


def test_not_an_audit_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": 1}\n')
    with pytest.raises(SystemExit, match="line 1 is not an audit row"):
        read_groups(path)
    with pytest.raises(SystemExit):
        main([str(path), "--rates", "0"])
    assert "--rates: each in (0, 1], not '0'" in capsys.readouterr().err
    share = tmp_path / "share.jsonl"
    _audit(share, 0.5)
    with pytest.raises(SystemExit, match="not written at audit_rate 1.0"):
        main([str(share), "--draws", "2"])


def test_a_share_over_clusters_is_as_uncertain_as_its_clusters():
    """Answers that come in groups (one prompt's completions) give a wider interval than as many independent
    answers with the same share; no answers, no interval."""
    from benchmarks.workers import cluster_share_ci95

    independent = cluster_share_ci95([(1, 1)] * 40 + [(0, 1)] * 40, resamples=2000, seed=0)
    grouped = cluster_share_ci95([(4, 4)] * 10 + [(0, 4)] * 10, resamples=2000, seed=0)
    assert independent[0] < 0.5 < independent[1] and grouped[0] < 0.5 < grouped[1]
    assert grouped[1] - grouped[0] > 1.5 * (independent[1] - independent[0])
    assert cluster_share_ci95([(2, 2)] * 5, resamples=100, seed=0) == (1.0, 1.0)
    assert cluster_share_ci95([(0, 0)], resamples=100, seed=0) is None
