"""Each backend against a real tiny model: transformers in-process, OpenAI over HTTP on loopback."""

from __future__ import annotations

import math

import pytest
import torch

from judge.backends import make_backend
from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.prompt import build_messages
from tests.support.items import make_items
from tests.support.parrot import PARROT_P_B
from tiny_world.servers.openai_server import make_app, serve

GREEDY = SamplingParams(max_new_tokens=40)


def _requests(items):
    return [
        ChatRequest(messages=build_messages(i.question, i.candidates), images=[i.image], n_options=len(i.candidates))
        for i in items
    ]


@pytest.fixture(scope="module")
def hf(parrot_loaded):
    return TransformersBackend(parrot_loaded)


def test_hf_generates_the_judge_format_with_label_logprobs(hf):
    gens = hf.generate(_requests(make_items(4)), GREEDY)
    for gen in gens:
        assert gen.text.endswith("<answer>B</answer>")
        probs = [math.exp(x) for x in gen.label_logprobs]
        shares = [p / sum(probs) for p in probs]
        assert shares[1] == pytest.approx(PARROT_P_B, abs=0.15)  # the parrot writes B ~70 % of the time
        assert shares[1] > shares[0] > max(shares[2:], default=0.0)


def test_hf_label_logprobs_equal_a_teacher_forced_forward(hf, parrot_loaded):
    item = make_items(1)[0]
    request = _requests([item])[0]
    gen = hf.generate([request], GREEDY)[0]
    processor, model = parrot_loaded.processor, parrot_loaded.model
    prompt = processor.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
    head = gen.text[: gen.text.rindex("<answer>") + len("<answer>")]

    # Teacher forcing: the log-prob of the tokens that spell "<answer>" + L after the common prefix.
    # With byte-level BPE the label shares its token with ">" (">B"), so the two tokenisations part ways
    # one token before the end of the prefix; summing from there is the log-prob of choosing L.
    def ids_of(text):
        return processor(text=[text], images=[item.image], return_tensors="pt")

    base = ids_of(prompt + head)["input_ids"][0].tolist()
    expected = []
    for label in ("A", "B"):
        enc = ids_of(prompt + head + label)
        ids = enc["input_ids"][0].tolist()
        first = next(i for i, (a, b) in enumerate(zip(ids, base)) if a != b)
        with torch.no_grad():
            logp = torch.log_softmax(model(**enc).logits[0].float(), -1)
        assert len(ids) - first == 1, "the label is expected to sit in one token"
        expected.append(float(logp[first - 1, ids[first]]))
    assert gen.label_logprobs[:2] == pytest.approx(expected, abs=1e-4)


def test_hf_batched_equals_one_at_a_time(hf):
    requests = _requests(make_items(5, k_choices=(2, 3, 4)))
    batched = hf.generate(requests, GREEDY)
    single = [hf.generate([r], GREEDY)[0] for r in requests]
    assert [g.text for g in batched] == [g.text for g in single]
    for b, s in zip(batched, single):
        assert b.label_logprobs == pytest.approx(s.label_logprobs, abs=1e-4)


def test_hf_sampling_is_seeded(hf):
    params = SamplingParams(max_new_tokens=40, temperature=1.0, seed=11)
    requests = _requests(make_items(6))
    first = [g.text for g in hf.generate(requests, params)]
    again = [g.text for g in hf.generate(requests, params)]
    assert first == again
    letters = {t[-10] for t in first + [g.text for g in hf.generate(requests * 4, SamplingParams(40, 1.0, seed=5))]}
    assert {"A", "B"} <= letters, "sampling at temperature 1 should show the parrot's minority answer"


def test_text_only_lm_backend(tiny_lm_dir):
    backend = make_backend(str(tiny_lm_dir), "hf", device="cpu")
    item = make_items(1)[0]
    request = ChatRequest(messages=build_messages(item.question, item.candidates, n_images=0), n_options=2)
    assert isinstance(backend.generate([request], SamplingParams(max_new_tokens=8))[0].text, str)
    with pytest.raises(ValueError, match="text-only"):
        backend.generate(_requests([item]), SamplingParams(max_new_tokens=8))


def test_openai_backend_matches_transformers(parrot_loaded, hf):
    items = make_items(4, k_choices=(2, 3))
    config = JudgeConfig(max_new_tokens=40)
    expected = Judge(hf, config).select(items)
    with serve(make_app(parrot_loaded)) as url:
        got = Judge(make_backend(url, max_concurrency=3), config).select(items)
    for e, g in zip(expected, got):
        assert g.raw == e.raw and g.votes == e.votes and g.choice == e.choice
        assert g.probs == pytest.approx(e.probs, abs=1e-3)


def test_openai_backend_retries_then_succeeds(parrot_loaded):
    with serve(make_app(parrot_loaded, fail_first=2)) as url:
        backend = make_backend(url, max_retries=3, max_concurrency=1)
        gen = backend.generate(_requests(make_items(1)), GREEDY)[0]
    assert gen.text.endswith("</answer>")


def test_openai_backend_gives_up_after_retries(parrot_loaded):
    from openai import InternalServerError

    with serve(make_app(parrot_loaded, fail_first=100)) as url:
        backend = make_backend(url, max_retries=1)
        with pytest.raises(InternalServerError):
            backend.generate(_requests(make_items(1)), GREEDY)


def test_openai_backend_times_out(parrot_loaded):
    from openai import APITimeoutError

    with serve(make_app(parrot_loaded, delay_s=2.0)) as url:
        backend = make_backend(url, model_name="tiny-judge", timeout=0.3, max_retries=0)
        with pytest.raises(APITimeoutError):
            backend.generate(_requests(make_items(1)), GREEDY)


def test_openai_backend_bounds_concurrency(parrot_loaded):
    app = make_app(parrot_loaded, delay_s=0.2)
    in_flight, peak = [0], [0]

    @app.middleware("http")
    async def count(request, call_next):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        try:
            return await call_next(request)
        finally:
            in_flight[0] -= 1

    with serve(app) as url:
        gens = make_backend(url, model_name="tiny-judge", max_concurrency=2).generate(_requests(make_items(6)), GREEDY)
    assert len(gens) == 6 and peak[0] == 2


def test_openai_backend_without_server_logprobs(parrot_loaded):
    with serve(make_app(parrot_loaded, reject_logprobs=True)) as url:
        backend = make_backend(url)
        gens = backend.generate(_requests(make_items(2)), GREEDY)
    assert all(g.text.endswith("</answer>") and g.label_logprobs is None for g in gens)
    assert backend._logprobs_supported is False


def test_openai_api_key_from_environment(parrot_loaded, monkeypatch):
    monkeypatch.setenv("MRJUDGE_API_KEY", "s3cret")
    app = make_app(parrot_loaded)
    seen = []

    @app.middleware("http")
    async def record_auth(request, call_next):
        seen.append(request.headers.get("authorization"))
        return await call_next(request)

    with serve(app) as url:
        make_backend(url).generate(_requests(make_items(1)), GREEDY)
    assert seen and all(h == "Bearer s3cret" for h in seen)


def test_vllm_backend_says_what_is_missing():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; its backend is exercised by the vLLM test environment")
    from judge.backends.vllm_offline import VLLMNotInstalled

    with pytest.raises(VLLMNotInstalled, match="pip install 'mr-judge\\[vllm\\]'"):
        make_backend("some-owner/some-model", "vllm")  # a hub id: no folder to check
