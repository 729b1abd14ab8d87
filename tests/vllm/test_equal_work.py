"""The forced generation length on a real `vllm serve`, and its own token counter (benchmarks/equal_work.py)."""

from __future__ import annotations

import time

import pytest

from benchmarks.equal_work import vllm_extra_body, vllm_generation_tokens
from judge.backends.openai_http import OpenAIBackend
from judge.judging import Judge, JudgeConfig
from tests.support.items import make_items
from tests.vllm.conftest import SERVED_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM engine or server in a subprocess

TOKENS = 48
CALLS = 4  # two items with two candidates, both display orders


def _generated(url: str, backend: OpenAIBackend) -> float:
    """Tokens the server counted for judging two items (the counter can trail the answers by an engine step)."""
    before = vllm_generation_tokens(url)
    Judge(backend, JudgeConfig(max_new_tokens=TOKENS, seed=0)).select(make_items(2, k_choices=(2,)))
    counted, deadline = vllm_generation_tokens(url) - before, time.time() + 5
    while counted < CALLS * TOKENS and time.time() < deadline:
        time.sleep(0.1)
        counted = vllm_generation_tokens(url) - before
    return counted


def test_vllm_generates_exactly_the_forced_length(vllm_url):
    # The served judge is trained to end its short judge-format answer with EOS: unforced, it stops early.
    free = OpenAIBackend(vllm_url, model_name=SERVED_NAME, top_logprobs=0)
    forced = OpenAIBackend(vllm_url, model_name=SERVED_NAME, top_logprobs=0, extra_body=vllm_extra_body(TOKENS))
    assert _generated(vllm_url, free) < CALLS * TOKENS
    assert _generated(vllm_url, forced) == CALLS * TOKENS
