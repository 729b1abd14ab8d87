"""VL-RewardBench's model-based answer reader (`--llm-parse`), served by a stand-in model over HTTP."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from eval import vl_rewardbench as vlrb
from tests.support.vlrb import vlrb_metrics
from tiny_world.servers.openai_server import serve


def test_llm_parse_reads_the_calls_the_regex_missed(github_run, tmp_path):
    data, _, _, _, predictions, path = github_run
    app, seen = FastAPI(), []

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "parser", "object": "model", "created": 0, "owned_by": "t"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        seen.append(body)
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "parser",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Answer 1"}}]}  # fmt: skip

    junk = sum(c["outcome"] == "doesntMatch" for p in predictions for c in p["calls"])
    with serve(app) as url:
        metrics = vlrb_metrics(data, path, tmp_path / "llm", "--llm-parse", url)
    assert junk > 0 and len(seen) == junk and metrics["llm_parsed_calls"] == junk
    assert seen[0]["max_tokens"] == 32 and seen[0]["temperature"] == 0.0
    assert seen[0]["messages"][0]["content"].startswith("\nYou are given a pairwise judgement for two responses.")
    # By hand: every regex-missed call now chose display position 1.
    fixed = []
    for p in predictions:
        outcomes = [
            vlrb.call_outcome(1, c["display"], p["preferred"]) if c["outcome"] == "doesntMatch" else c["outcome"]
            for c in p["calls"]
        ]
        fixed.append(vlrb.item_outcome(outcomes))
    assert metrics["all_calls_overall_accuracy"] == pytest.approx(
        fixed.count("agree") / (fixed.count("agree") + fixed.count("reject"))
    )
