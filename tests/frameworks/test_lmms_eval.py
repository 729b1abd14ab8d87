"""`mrjudge eval vl-rewardbench --reading lmms-eval` against lmms-eval 0.7.3's own `vl_rewardbench` task code on
the same replies (`tests/frameworks/lmms_eval_driver.py`, in a subprocess; its one stand-in is the gpt-4o-mini
call that reads a reply the regex misses).

The eight replies cover every branch of lmms-eval's reading: a parsed right answer, a parsed wrong one,
"Answer 3" (naming neither response), a regex miss read by the model, a regex miss the model cannot read
(lmms-eval's coin), a judgment only inside `<think>…</think>` (stripped by lmms-eval's default
`--reasoning_tags`), "slightly better", and a reply after a lone closing tag.
"""

from __future__ import annotations

import json

import pytest

from eval.vl_rewardbench import (
    call_outcome,
    lmms_eval_category,
    lmms_eval_display,
    official_prompt,
    parse_official,
    read_llm_answer,
)
from tests.frameworks.conftest import VERSIONS, run_driver
from tests.support.vlrb import vlrb_metrics
from tiny_world.bench_files import vlrb_rows, write_vlrb_jsonl


def _replies(rows: list[dict]) -> tuple[list[str], dict[str, str]]:
    """One reply per row (see the module docstring), and what the parsing model answers for the regex misses."""
    replies, llm = [], {}
    for i, row in enumerate(rows):
        display = lmms_eval_display(row["response"])
        right = display.index(row["human_ranking"].index(0)) + 1
        wrong = 3 - right
        reply = [
            f"Accuracy: fine.\nOverall Judgment: Answer {right} is better.",
            f"**Overall Judgment**: Answer {wrong} is better.",
            "Overall Judgment: Answer 3 is better.",
            "Both answers have merits; the first is closer to the picture.",
            "I cannot tell which one is better.",
            f"<think>Overall Judgment: Answer {right} is better.</think>Both are good.",
            f"Therefore, Answer {right} is slightly better.",
            f"reasoning…</think>Overall Judgment: Answer {wrong} is better.",
        ][i]
        replies.append(reply)
        if i == 3:
            llm[reply] = f"Answer {right}"
        elif i in (4, 5):
            llm[reply] = "Neither answer is named."
    return replies, llm


@pytest.fixture(scope="module")
def both(frameworks_site, tmp_path_factory):
    root = tmp_path_factory.mktemp("lmms-eval")
    rows = vlrb_rows(root)
    data = write_vlrb_jsonl(root)
    replies, llm = _replies(rows)
    docs = [{k: v for k, v in row.items() if k != "image"} for row in rows]
    theirs, _ = run_driver(
        frameworks_site, "lmms_eval_driver.py", {"docs": docs, "replies": replies, "llm_replies": llm}, root
    )
    preds = root / "replies.jsonl"
    preds.write_text(
        "".join(json.dumps({"id": r["id"], "reply": t, "llm_answer": read_llm_answer(llm.get(t, "")) if t in llm else None}) + "\n"
                for r, t in zip(rows, replies))
    )  # fmt: skip
    ours = vlrb_metrics(data, preds, root / "ours", "--reading", "lmms-eval")
    return rows, replies, data, theirs, ours, root


def test_the_lmms_eval_reading_reproduces_lmms_evals_score_exactly(both):
    rows, replies, _, theirs, ours, _ = both
    assert theirs["version"] == VERSIONS["lmms_eval"]
    assert theirs["reasoning_tags"] == [["<think>", "</think>"], ["<analysis>", "</analysis>"]] and theirs["seed"] == 0
    assert ours["reading"] == "lmms-eval" and ours["n"] == len(rows)
    assert ours["lmms_eval_score"] == theirs["score"]  # the same float, not merely close
    for result, row in zip(theirs["results"], rows):
        assert result["category"] == lmms_eval_category(row["id"])  # its id handling
    for category in {r["category"] for r in theirs["results"]}:
        scores = [r["score"] for r in theirs["results"] if r["category"] == category]
        assert ours[f"lmms_eval_{category}"] == sum(scores) / len(scores)
    assert ours["macro_accuracy"] == pytest.approx(theirs["score"], abs=1e-12)  # the groups are its categories
    # The branches: one reply read by the model, two coin flips (one after stripping <think>), one "Answer 3".
    assert len(theirs["asked_llm"]) == 3 and ours["lmms_eval_llm_read"] == 1 and ours["lmms_eval_coin_flips"] == 2
    assert ours["lmms_eval_other_number"] == 1
    assert theirs["results"][2]["score"] == 0.0  # "Answer 3 is better" is wrong for lmms-eval


def test_lmms_evals_prompt_is_the_official_one_in_its_length_parity_order(both):
    rows, _, _, theirs, _, _ = both
    for row, prompt in zip(rows, theirs["prompts"]):
        shown = [row["response"][i] for i in lmms_eval_display(row["response"])]
        assert prompt == official_prompt(row["query"], shown)  # no "<image>\n" in these queries


def test_lmms_evals_own_sample_log_scores_the_same(both):
    rows, replies, data, theirs, _, root = both
    log = root / "vl_rewardbench_samples.jsonl"  # the shape of `lmms-eval --log_samples` rows
    log.write_text(
        "".join(json.dumps({"doc_id": i, "doc": {k: v for k, v in r.items() if k != "image"}, "target": "",
                            "resps": [[t]], "filtered_resps": [t]}) + "\n"
                for i, (r, t) in enumerate(zip(rows, replies)))
    )  # fmt: skip
    from_log = vlrb_metrics(data, log, root / "from-log", "--reading", "lmms-eval")
    # No model readings in lmms-eval's log: the reply it sent to gpt-4o-mini is a coin flip here instead.
    assert from_log["lmms_eval_coin_flips"] == 3 and from_log["lmms_eval_llm_read"] == 0


def test_the_cal_py_reading_of_the_same_replies_differs_where_the_docs_say(both):
    rows, replies, data, theirs, ours, root = both
    calls = root / "as-calls.jsonl"
    lines = []
    for row, reply in zip(rows, replies):
        display = lmms_eval_display(row["response"])
        preferred = row["human_ranking"].index(0)
        answer = parse_official(reply)
        outcome = call_outcome(answer, display, preferred)
        pred = {"agree": preferred, "reject": 1 - preferred}.get(outcome)
        lines.append(
            {
                "id": row["id"],
                "pred": pred,
                "calls": [{"display": display, "answer": answer, "outcome": outcome}],
                "raw": [reply],
            }
        )
    calls.write_text("".join(json.dumps(x) + "\n" for x in lines))
    calpy = vlrb_metrics(data, calls, root / "calpy")
    # cal.py: "Answer 3" counts as agree, the judgment inside <think> is read, regex misses leave the denominator.
    outcomes = [c["calls"][0]["outcome"] for c in lines]
    assert outcomes[2] == "agree" and outcomes[5] == "agree" and outcomes[3] == outcomes[4] == "doesntMatch"
    assert calpy["reading"] == "cal.py" and calpy["headline_k"] == 1 and calpy["unparsed"] == 2
    assert calpy["macro_accuracy"] != ours["lmms_eval_score"]
