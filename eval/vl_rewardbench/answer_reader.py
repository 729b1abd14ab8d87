"""A model-based answer reader (`--llm-parse`, optional): a model asked which answer a reply chose, where the
official regex found none.

Both `cal.py` (`use_llm_parse`) and lmms-eval fall back on such a model, so a number quoted from either may
rest on it. The reader adds what it read beside each call (`llm_answer`, `llm_outcome`) and changes nothing
else: the readings decide whether to use it.
"""

from __future__ import annotations

from typing import Any

from eval.vl_rewardbench.official import call_outcome
from judge.backends.base import Backend, ChatRequest, SamplingParams

__all__ = ["LLM_PARSE_PROMPT", "llm_parse_rows", "read_llm_answer"]

LLM_PARSE_PROMPT = """
You are given a pairwise judgement for two responses. Please return the better response according to the judgement.
Return the Answer X ONLY. e.g., Answer 1 or Answer 2.

Judgement: {judgement}
"""
"""`cal.py`'s `PARSE_PROMPT` (the same text as lmms-eval's `LLM_PARSE_ANSWER_PROMPT`), verbatim."""


def read_llm_answer(text: str) -> int | None:
    """`cal.py`'s reading of the parser model's reply: "answer 1" anywhere wins, then "answer 2".

    >>> read_llm_answer("Answer 2"), read_llm_answer("answer 1."), read_llm_answer("neither")
    (2, 1, None)
    """
    lowered = text.lower()
    if "answer 1" in lowered:
        return 1
    if "answer 2" in lowered:
        return 2
    return None


def llm_parse_rows(backend: Backend, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ask a model which answer each regex-missed call chose (`cal.py`'s `use_llm_parse`, lmms-eval's
    fallback): text only, temperature 0, 32 tokens. Each such call gains `llm_answer` and `llm_outcome`
    (None when the reply names no answer); calls already read are not asked again."""
    todo = [
        (row, j)
        for row in rows
        for j, call in enumerate(row.get("calls") or [])
        if call["outcome"] == "doesntMatch" and "llm_answer" not in call
    ]
    if not todo:
        return rows
    requests = [
        ChatRequest(messages=[{"role": "user", "content": LLM_PARSE_PROMPT.format(judgement=row["raw"][j])}])
        for row, j in todo
    ]
    generations = backend.generate(requests, SamplingParams(max_new_tokens=32, temperature=0.0))
    for (row, j), generation in zip(todo, generations):
        call = row["calls"][j]
        answer = read_llm_answer(generation.text)
        call["llm_answer"] = answer
        call["llm_outcome"] = None if answer is None else call_outcome(answer, call["display"], row["preferred"])
    return rows
