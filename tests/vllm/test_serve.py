"""Judging, evaluation and synthesis through a real `vllm serve` (the CPU build, tiny32 judge, loopback).

Each test checks the served engine against the transformers backend on the same weights: the same greedy
tokens and texts, option log-probs within `LOGPROB_ATOL`, and the same verdicts and benchmark predictions.
"""

from __future__ import annotations

import json
import math

import pytest
from openai import OpenAI

from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.backends.openai_http import OpenAIBackend, _with_image_urls
from judge.judging import Judge, JudgeConfig
from judge.prompt import build_messages
from tests.support.items import make_items
from tests.support.parrot import DESCRIPTION_REPLY, REASONING
from tests.vllm.conftest import LOGPROB_ATOL, SERVED_NAME, hf_greedy

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM engine or server in a subprocess

CONFIG = JudgeConfig(max_new_tokens=40, seed=0)


def _requests(items):
    judge = Judge(None, CONFIG)  # only builds requests; never calls a backend
    return [request for item in items for request in judge._requests_for(item, judge._orders_for(item))]


def _assert_logprobs_close(served, reference):
    """Finite entries agree within the tolerance; a label vLLM left out of its top 20 is rare for HF too."""
    assert served is not None and reference is not None
    for x, y in zip(served, reference):
        if math.isfinite(x):
            assert abs(x - y) <= LOGPROB_ATOL, (served, reference)
        else:
            assert y < min(v for v in served if math.isfinite(v)), (served, reference)


def test_select_judges_both_orders_with_option_probs(vllm_url, hf):
    items = make_items(6, seed=1)
    served = Judge(OpenAIBackend(vllm_url), CONFIG).select(items)
    reference = Judge(hf, CONFIG).select(items)
    for verdict, expected, item in zip(served, reference, items):
        assert len(verdict.votes) == 2 and None not in verdict.votes  # both display orders parsed
        assert verdict.raw[0].startswith(REASONING) and verdict.raw == expected.raw
        assert verdict.votes == expected.votes and verdict.choice == expected.choice
        assert len(verdict.probs) == len(item.candidates) and math.isclose(sum(verdict.probs), 1.0, abs_tol=1e-9)
        assert verdict.probs == pytest.approx(expected.probs, abs=1e-4)
    # The parrot writes B ~70 % of the time: with both orders, each of a pair's candidates sits in B once.
    pairs = [v for v, item in zip(served, items) if len(item.candidates) == 2]
    assert pairs and all(0.4 < v.probs[0] < 0.6 for v in pairs)


def test_greedy_tokens_and_option_logprobs_match_transformers(vllm_url, hf, hf_loaded):
    items = make_items(4, seed=2, k_choices=(2, 3, 4))
    requests = _requests(items)
    params = SamplingParams(max_new_tokens=40)
    served = OpenAIBackend(vllm_url).generate(requests, params)
    reference = hf.generate(requests, params)
    for got, want in zip(served, reference):
        assert got.text == want.text
        _assert_logprobs_close(got.label_logprobs, want.label_logprobs)

    # Token for token, prompt included (chat template, image-token expansion), on two requests.
    client = OpenAI(base_url=vllm_url, api_key="EMPTY")
    for request in requests[:2]:
        response = client.chat.completions.create(
            model=SERVED_NAME,
            messages=_with_image_urls(request.messages, request.images),
            max_tokens=40,
            temperature=0.0,
            extra_body={"return_token_ids": True},
        )
        prompt_ids, new_ids = hf_greedy(hf_loaded, request, 40)
        assert response.prompt_token_ids == prompt_ids
        assert response.choices[0].token_ids == new_ids


def test_display_orders_share_the_cached_image_and_question_prefix(vllm_url):
    """Prefix caching is on by default: the second order of an item reuses the first one's prefix blocks."""
    from PIL import Image

    client = OpenAI(base_url=vllm_url, api_key="EMPTY")

    def cached(candidates, colour):
        image = Image.new("RGB", (84, 84), colour)
        messages = _with_image_urls(build_messages("Which shape is it?", candidates), [image])
        response = client.chat.completions.create(model=SERVED_NAME, messages=messages, max_tokens=1)
        return response.usage.prompt_tokens, response.usage.prompt_tokens_details.cached_tokens

    first_total, first_cached = cached(["It is a star.", "It is a moon."], (12, 34, 56))
    second_total, second_cached = cached(["It is a moon.", "It is a star."], (12, 34, 56))
    other_total, other_cached = cached(["It is a moon.", "It is a star."], (56, 34, 12))
    assert first_cached == 0
    assert 0 < second_cached < second_total  # whole KV blocks of the shared prefix, image included
    assert other_cached == 0  # another image: the image sits early in the prompt, so nothing is shared


def test_runtime_lora_adapter_matches_peft(vllm_url, vllm_lora_dir, vllm_judge_dir, hf_loaded):
    items = make_items(2, seed=4)
    served = OpenAIBackend(vllm_url)
    served.load_adapter("rev-1", str(vllm_lora_dir))
    try:
        with_adapter = Judge(served, CONFIG, adapter="rev-1").select(items)
        base = Judge(served, CONFIG).select(items)
    finally:
        served.unload_adapter("rev-1")
    reference = TransformersBackend(str(vllm_judge_dir), device="cpu")
    reference.load_adapter("rev-1", str(vllm_lora_dir))
    expected = Judge(reference, CONFIG, adapter="rev-1").select(items)
    assert [v.raw for v in with_adapter] == [v.raw for v in expected]
    assert all(a.raw != b.raw for a, b in zip(with_adapter, base))  # the adapter changes every answer
    assert all(v.raw[0].startswith(REASONING) for v in base)


def test_vl_rewardbench_mc_mode_through_vllm_serve(vllm_url, vllm_judge_dir, tmp_path):
    from mrjudge.cli import main

    from tests.eval.fixtures import write_vlrb_jsonl

    data = write_vlrb_jsonl(tmp_path)
    common = ["--data", str(data), "--quiet", "--batch-size", "8", "--max-new-tokens", "40"]
    assert main(["eval", "vl-rewardbench", "--model", vllm_url, "--out", str(tmp_path / "vllm"), *common]) == 0
    assert main(["eval", "vl-rewardbench", "--model", str(vllm_judge_dir), "--out", str(tmp_path / "hf"), *common]) == 0
    metrics = json.loads((tmp_path / "vllm" / "metrics.json").read_text())
    assert metrics["n"] == 8 and metrics["unparsed"] == 0
    rows = [json.loads(line) for line in (tmp_path / "vllm" / "predictions.jsonl").read_text().splitlines()]
    expected = [json.loads(line) for line in (tmp_path / "hf" / "predictions.jsonl").read_text().splitlines()]
    assert [(r["id"], r["pred"], r["raw"]) for r in rows] == [(r["id"], r["pred"], r["raw"]) for r in expected]
    assert metrics == json.loads((tmp_path / "hf" / "metrics.json").read_text())


def test_describe_stage_through_vllm_serve(vllm_url, tmp_path, capsys):
    from mrjudge.cli import main

    world, negatives, described = (tmp_path / name for name in ("world", "negatives", "described"))
    assert main(["synth", "world", "--n", "4", "--seed", "0", "--out", str(world)]) == 0
    scene = ["--generator", "scene", "--n", "2"]
    assert main(["synth", "negatives", "--input", str(world), "--out", str(negatives), *scene]) == 0
    args = ["synth", "describe", "--input", str(negatives), "--out", str(described), "--describer", "model"]
    assert main([*args, "--model", vllm_url, "--batch-size", "4"]) == 0
    rows = [json.loads(line) for line in (described / "described.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    assert all(r["description"] == DESCRIPTION_REPLY and r["description_meta"]["describer"] == "model" for r in rows)


def test_requests_without_logprobs_and_sampling(vllm_url):
    """Plain generation (no option log-probs) and seeded sampling: the same seed gives the same text."""
    from PIL import Image

    backend = OpenAIBackend(vllm_url)
    request = ChatRequest.user("Describe the picture.", [Image.new("RGB", (84, 84), (0, 120, 240))])
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    first, again = backend.generate([request], params), backend.generate([request], params)
    assert first[0].label_logprobs is None and first[0].text == again[0].text


def test_adapter_only_handoff_to_vllm_serve(vllm_url, vllm_judge_dir, hf_loaded, tmp_path):
    """The GRPO hand-off against the real engine: each push exports a store revision, vLLM loads it by name
    and answers exactly as the trained PEFT model; the previous revision is unloaded."""
    import torch

    from judge.models import LoadedModel
    from tests.support.adapters import lora_model
    from training.handoff import AdapterHandoff

    policy = lora_model(vllm_judge_dir, seed=2)
    handoff = AdapterHandoff(vllm_url, tmp_path / "store", "policy")
    requests = [ChatRequest(messages=r.messages, images=r.images) for r in _requests(make_items(2, seed=6))]
    greedy = SamplingParams(max_new_tokens=16)

    def trained_answers():
        backend = TransformersBackend(LoadedModel(policy, hf_loaded.processor, True))
        return [
            g.text
            for g in backend.generate([ChatRequest(r.messages, r.images, adapter="default") for r in requests], greedy)
        ]

    def served_answers(name):
        return [g.text for g in OpenAIBackend(vllm_url, model_name=name).generate(requests, greedy)]

    names = []
    try:
        for step in (1, 2):
            if step == 2:
                with torch.no_grad():  # a training step's worth of change to the adapter
                    for name, param in policy.named_parameters():
                        if "lora_B" in name:
                            param.mul_(-1.5)
            revision = handoff.push(policy, step=step)
            names.append(revision.ref)
            assert served_answers(revision.ref) == trained_answers()
        served = {m.id for m in OpenAI(base_url=vllm_url, api_key="EMPTY").models.list().data}
        assert names[1] in served and names[0] not in served  # the previous revision was unloaded
        assert handoff.bytes_moved < sum(p.numel() * p.element_size() for p in hf_loaded.model.parameters())
    finally:
        if names:
            OpenAIBackend(vllm_url).unload_adapter(names[-1])
