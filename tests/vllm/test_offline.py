"""The offline engine (`judge.backends.vllm_offline.VLLMBackend` over `vllm.LLM`), run in the vLLM venv.

One engine start serves the whole module: the worker judges, generates and loads a LoRA in one subprocess
(`tests/vllm/offline_worker.py`), and each test checks one part of what it returns against the
transformers backend on the same weights.
"""

from __future__ import annotations

import math

import pytest

from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.prompt import build_messages
from judge.types import MCItem
from tests.support.items import make_items
from tests.support.parrot import REASONING
from tests.vllm.conftest import ENGINE, LOGPROB_ATOL, hf_greedy, save_items

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM engine or server in a subprocess

CONFIG = dict(max_new_tokens=40, seed=0)
LORA_CONFIG = dict(max_new_tokens=24, seed=0)


def _prefix_requests(folder):
    """One item's two display orders, then the first order again over another image."""
    from PIL import Image

    paths = []
    for name, colour in (("prefix-a", (12, 34, 56)), ("prefix-b", (56, 34, 12))):
        path = folder / f"{name}.png"
        Image.new("RGB", (84, 84), colour).save(path)
        paths.append(str(path))
    orders = [["It is a star.", "It is a moon."], ["It is a moon.", "It is a star."]]
    shown = [(orders[0], paths[0]), (orders[1], paths[0]), (orders[0], paths[1])]
    return [
        {"messages": build_messages("Which shape is it?", candidates), "images": [path], "n_options": 2}
        for candidates, path in shown
    ]


@pytest.fixture(scope="module")
def offline(run_offline, vllm_judge_dir, vllm_lora_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("offline-items")
    items = make_items(6, seed=5, k_choices=(2, 3, 4))
    lora_items = make_items(2, seed=6)
    rows, lora_rows = save_items(items, folder), save_items(lora_items, folder)
    prefix = _prefix_requests(folder)
    spec = {
        "model": str(vllm_judge_dir),
        "engine": ENGINE,  # enable_prefix_caching is left to VLLMBackend's default
        "adapters": {"rev-1": str(vllm_lora_dir)},
        "judge": [
            {"items": rows, "config": CONFIG},
            {"items": lora_rows, "config": LORA_CONFIG, "adapter": "rev-1"},
        ],
        # One call per request, in order, so each finds what the earlier ones left in the prefix cache.
        "generate": [{"requests": [r], "max_new_tokens": 40} for r in prefix],
    }
    result = run_offline(spec)
    return {"result": result, "rows": rows, "lora_rows": lora_rows, "prefix": prefix}


def _items(rows):
    return [MCItem.from_dict(row) for row in rows]


def test_offline_select_matches_transformers(offline, hf):
    got = offline["result"]["judge"][0]
    expected = [v.to_dict() for v in Judge(hf, JudgeConfig(**CONFIG)).select(_items(offline["rows"]))]
    assert len(got) == len(expected) == 6
    for verdict, want in zip(got, expected):
        assert verdict["raw"] == want["raw"] and verdict["raw"][0].startswith(REASONING)
        assert verdict["votes"] == want["votes"] and None not in verdict["votes"]
        assert verdict["choice"] == want["choice"]
        assert math.isclose(sum(verdict["probs"]), 1.0, abs_tol=1e-9)
        assert verdict["probs"] == pytest.approx(want["probs"], abs=1e-4)


def test_offline_greedy_tokens_and_option_logprobs_match_transformers(offline, hf, hf_loaded):
    from judge.images import load_image

    for spec, calls in zip(offline["prefix"], offline["result"]["generate"]):
        (got,) = calls
        request = ChatRequest(
            messages=spec["messages"], images=[load_image(p) for p in spec["images"]], n_options=spec["n_options"]
        )
        prompt_ids, new_ids = hf_greedy(hf_loaded, request, 40)
        assert got["prompt_token_ids"] == prompt_ids
        assert got["token_ids"] == new_ids
        (want,) = hf.generate([request], SamplingParams(max_new_tokens=40))
        assert got["text"] == want.text
        for x, y in zip(got["label_logprobs"], want.label_logprobs):
            assert (abs(x - y) <= LOGPROB_ATOL) if math.isfinite(x) else (y < -5)


def test_prefix_caching_is_on_by_default_and_shares_the_image_and_question(offline):
    engine = offline["result"]["engine"]
    assert engine["enable_prefix_caching"] is True
    first, second, other = (calls[0] for calls in offline["result"]["generate"])
    shared = next(
        i for i, (a, b) in enumerate(zip(first["prompt_token_ids"], second["prompt_token_ids"])) if a != b
    )  # the image and the question come before the candidates
    block = engine["block_size"]
    assert shared >= block, "the shared prefix should fill at least one KV-cache block"
    assert first["num_cached_tokens"] == 0
    assert second["num_cached_tokens"] == (shared // block) * block
    assert other["num_cached_tokens"] == 0  # same words, another image: the image is part of the prefix


def test_offline_lora_request_matches_peft(offline, vllm_judge_dir, vllm_lora_dir):
    got = offline["result"]["judge"][1]
    reference = TransformersBackend(str(vllm_judge_dir), device="cpu")
    reference.load_adapter("rev-1", str(vllm_lora_dir))
    expected = Judge(reference, JudgeConfig(**LORA_CONFIG), adapter="rev-1").select(_items(offline["lora_rows"]))
    assert [v["raw"] for v in got] == [v.raw for v in expected]
    assert not any(v["raw"][0].startswith(REASONING) for v in got)  # the adapter, not the base, answered
