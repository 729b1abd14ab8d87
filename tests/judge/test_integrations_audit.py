"""The reward audit (`judge.reward.audit`) in the verl and OpenRLHF files, against the reward server in this
process (the rule judge with option log-probs): the setting given as a keyword (a mapping or JSON text) or as
`$MRJUDGE_AUDIT`, the rewards the same with the audit on and off, and `audit.jsonl` holding one line per
audited completion, its gold read against verl's `ground_truth` or OpenRLHF's label.

Each test loads the files by path, as the frameworks do, so that each gets a fresh module and so its own
process-wide audit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from PIL import Image

from judge.reward.audit import RewardAudit
from tests.judge.test_integrations import QUESTION, TEXT_PROMPT, _concurrently, load_by_path
from tests.support.integration_files import load_openrlhf_file
from tests.support.reward_server import running
from tiny_world.rule_judge import ScoredRuleBackend

VERL_FILE = str(Path(__file__).resolve().parents[2] / "judge" / "integrations" / "verl.py")
KEY = "score=9"
"""The answer key: the rule judge pays `score=N` by N, the key says only `score=9` is right."""
SOLUTIONS = ["score=9", "score=2", "score=5", "Score=9."]
GOLD = {"score=9": 1.0, "score=2": 0.0, "score=5": 0.0, "Score=9.": 1.0}  # case and a final full stop aside
HOW = ("mapping", "json", "env")
"""The audit's setting: the `audit` keyword as a mapping or as JSON text, or `$MRJUDGE_AUDIT`."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    allowed = tmp_path_factory.mktemp("allowed")
    Image.new("RGB", (28, 28), (220, 20, 20)).save(allowed / "red.png")
    with running(ScoredRuleBackend(), allow_local_images=str(allowed), group_wait_s=1.0) as (url, _):
        yield url


@pytest.fixture
def env(server, monkeypatch):
    monkeypatch.setenv("MRJUDGE_REWARD_URL", server)
    monkeypatch.delenv("MRJUDGE_AUDIT", raising=False)


def _audit_setting(how: str, path: Path, monkeypatch, **more) -> dict:
    """The keyword arguments that turn the audit on (none for `env`: the variable is set instead)."""
    setting = {"auditor": "answer_key", "audit_rate": 1.0, "path": str(path), **more}
    if how == "env":
        monkeypatch.setenv("MRJUDGE_AUDIT", json.dumps(setting))
        return {}
    return {"audit": setting if how == "mapping" else json.dumps(setting)}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _closed(module) -> RewardAudit:
    audit = module.reward_audit()
    assert isinstance(audit, RewardAudit)
    audit.close()
    return audit


# -- verl ----------------------------------------------------------------------------------------------------


def _verl_rollouts(verl, **kwargs) -> list[dict]:
    """A prompt's four rollouts, one `compute_score` each and concurrent, as verl 0.9's reward loop sends them."""
    extra = {"question": QUESTION, "images": ["red.png"]}

    async def rollouts():
        calls = (verl.compute_score("colours", s, KEY, extra, group_size=4, **kwargs) for s in SOLUTIONS)
        return await asyncio.gather(*calls)

    return asyncio.run(rollouts())


@pytest.mark.parametrize("how", HOW)
def test_verl_compute_score_audits_each_sample_against_its_ground_truth(env, how, tmp_path, monkeypatch):
    plain = load_by_path(VERL_FILE, f"custom_module_plain_{how}")
    expected = _verl_rollouts(plain)
    assert plain.reward_audit() is None  # no setting, no audit
    audited = load_by_path(VERL_FILE, f"custom_module_audited_{how}")
    got = _verl_rollouts(audited, **_audit_setting(how, tmp_path / "audit.jsonl", monkeypatch))
    assert got == expected and all(g["judge_group_size"] == 4.0 for g in got)  # judged listwise, as before

    audit = _closed(audited)
    assert audit.counts["groups"] == 4 and audit.counts["completions"] == 4
    rows = _rows(tmp_path / "audit.jsonl")
    assert len(rows) == 4  # one line per audited completion
    assert {r["completion"]: r["gold"] for r in rows} == GOLD
    assert {r["completion"]: r["reward"] for r in rows} == {s: g["score"] for s, g in zip(SOLUTIONS, got)}
    assert all(r["reference"] == KEY and r["prompt"] == QUESTION and r["images"] == ["red.png"] for r in rows)
    assert sorted(r["step"] for r in rows) == [0, 1, 2, 3]  # the step is the process's count of calls


@pytest.mark.parametrize("how", HOW)
def test_verl_compute_score_batch_audits_each_group(env, how, tmp_path, monkeypatch):
    red = {"question": QUESTION, "images": ["red.png"]}
    dark = {"question": "Is it dark?", "reference": ""}  # judged listwise with no reference, audited against "no"
    batch = {
        "data_sources": ["d"] * 7,
        "solution_strs": [*SOLUTIONS, "No.", "score=4 yes", "no"],
        "ground_truths": [KEY] * 4 + ["no"] * 3,
        "extra_infos": [red] * 4 + [dark] * 3,
    }
    expected = load_by_path(VERL_FILE, f"custom_module_batch_plain_{how}").compute_score_batch(**batch)
    audited = load_by_path(VERL_FILE, f"custom_module_batch_audited_{how}")
    got = audited.compute_score_batch(**batch, **_audit_setting(how, tmp_path / "audit.jsonl", monkeypatch))
    assert got == expected

    audit = _closed(audited)
    assert audit.counts["groups"] == 2 and audit.counts["completions"] == 7
    rows = _rows(tmp_path / "audit.jsonl")
    assert len(rows) == 7
    assert {r["completion"]: r["gold"] for r in rows} == {**GOLD, "No.": 1.0, "score=4 yes": 0.0, "no": 1.0}
    assert [r["reward"] for r in rows] == [g["score"] for g in got]  # the groups in the batch's order
    assert [r["reference"] for r in rows] == batch["ground_truths"] and {r["step"] for r in rows} == {0}


def test_verl_answer_column_reads_the_gold_from_extra_info(env, tmp_path):
    verl = load_by_path(VERL_FILE, "custom_module_answer_column")
    extra = {"question": QUESTION, "answer": "score=5"}
    setting = {"auditor": "answer_key", "audit_rate": 1.0, "answer_column": "answer", "path": str(tmp_path / "a.jsonl")}
    asyncio.run(verl.compute_score("d", "score=5", KEY, extra, audit=setting))  # judged pairwise against KEY
    _closed(verl)
    [row] = _rows(tmp_path / "a.jsonl")
    assert row["reference"] == "score=5" and row["gold"] == 1.0


def test_verl_a_bad_setting_raises_before_any_request_and_a_failing_audit_never_does(
    env, tmp_path, monkeypatch, caplog
):
    verl = load_by_path(VERL_FILE, "custom_module_bad_setting")
    score = lambda **kw: asyncio.run(verl.compute_score("d", "score=8", KEY, {"question": QUESTION}, **kw))  # noqa: E731
    with pytest.raises(ValueError, match=r"unknown keys \['rate'\]"):
        score(audit={"auditor": "answer_key", "rate": 0.5})
    monkeypatch.setenv("MRJUDGE_AUDIT", "{auditor: answer_key}")
    with pytest.raises(ValueError, match=r"\$MRJUDGE_AUDIT is not JSON"):
        score()
    with pytest.raises(ValueError, match="'self' needs the rewarding judge"):
        score(audit={"auditor": "self"})  # a lone sample cannot be judged again as its group was
    assert verl.reward_audit() is None
    monkeypatch.delenv("MRJUDGE_AUDIT")

    expected = score()
    monkeypatch.setattr(RewardAudit, "submit", lambda *a, **k: 1 / 0)
    with caplog.at_level(logging.ERROR, logger="mrjudge.verl"):
        got = [score(audit={"auditor": "answer_key", "path": str(tmp_path / "a.jsonl")}) for _ in range(2)]
    assert got == [expected, expected]
    assert caplog.text.count("the reward audit failed") == 1 and "ZeroDivisionError" in caplog.text
    _closed(verl)


# -- OpenRLHF ------------------------------------------------------------------------------------------------


def _openrlhf_samples(module, label: str, **kwargs) -> list[float]:
    """Four samples, one `reward_func` call each from its own thread, as OpenRLHF's executor sends them."""
    calls = [([TEXT_PROMPT + s + "<|im_end|>"], [TEXT_PROMPT], [label]) for s in SOLUTIONS]
    answers = _concurrently(lambda *call: module.reward_func(*call, **kwargs), calls)
    return [float(a["rewards"][0]) for a in answers]


@pytest.mark.parametrize("how", HOW)
def test_openrlhf_reward_func_audits_each_sample_against_its_label(env, how, tmp_path, monkeypatch):
    label = json.dumps({"reference": KEY, "images": ["red.png"]})  # judged pairwise against the reference
    plain = load_openrlhf_file()
    expected = _openrlhf_samples(plain, label)
    assert plain.reward_audit() is None
    audited = load_openrlhf_file()
    got = _openrlhf_samples(audited, label, **_audit_setting(how, tmp_path / "audit.{pid}.jsonl", monkeypatch))
    assert got == expected and len(set(got)) > 1

    audit = _closed(audited)
    assert audit.counts["groups"] == 4 and audit.counts["completions"] == 4
    rows = _rows(tmp_path / f"audit.{os.getpid()}.jsonl")  # `{pid}`: one file per process
    assert len(rows) == 4
    assert {r["completion"]: r["gold"] for r in rows} == GOLD  # the response, split off the templated query
    rewards = {r["completion"]: r["reward"] for r in rows}  # the server's floats; OpenRLHF's tensor holds float32
    assert [rewards[s] for s in SOLUTIONS] == pytest.approx(got, rel=1e-6)
    assert all(r["reference"] == KEY and r["prompt"] == QUESTION and r["images"] == ["red.png"] for r in rows)
    assert sorted(r["step"] for r in rows) == [0, 1, 2, 3]


def test_openrlhf_answer_column_and_plain_labels(env, tmp_path):
    module = load_openrlhf_file()
    setting = {"auditor": "answer_key", "audit_rate": 1.0, "answer_column": "answer", "path": str(tmp_path / "a.jsonl")}
    label = json.dumps({"reference": KEY, "images": [], "answer": "score=5"})  # judged against KEY, audited on 5
    module.reward_func([TEXT_PROMPT + "score=5<|im_end|>"], [TEXT_PROMPT], [label], audit=setting)
    _closed(module)
    [row] = _rows(tmp_path / "a.jsonl")
    assert row["reference"] == "score=5" and row["gold"] == 1.0

    module = load_openrlhf_file()  # a plain label is the reference and the key
    setting = {"auditor": "answer_key", "audit_rate": 1.0, "path": str(tmp_path / "b.jsonl")}
    module.reward_func([TEXT_PROMPT + "score=2<|im_end|>"], [TEXT_PROMPT], [KEY], audit=setting)
    _closed(module)
    [row] = _rows(tmp_path / "b.jsonl")
    assert row["reference"] == KEY and row["gold"] == 0.0 and row["completion"] == "score=2"


def test_openrlhf_a_bad_setting_is_logged_then_raised_before_any_request(env, monkeypatch, caplog):
    module = load_openrlhf_file()
    monkeypatch.setenv("MRJUDGE_AUDIT", json.dumps({"auditor": "answer_key", "audit_rate": 2}))
    with caplog.at_level(logging.ERROR, logger="mrjudge.openrlhf"):
        with pytest.raises(ValueError, match=r"audit_rate \(2\) must be in \(0, 1\]"):
            module.reward_func([TEXT_PROMPT + "score=1"], [TEXT_PROMPT], [KEY])
    assert "audit_rate (2)" in caplog.text and module.reward_audit() is None
