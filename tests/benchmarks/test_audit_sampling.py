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
