"""Equal work in throughput figures: the forced generation length and the token counts it is checked by."""

from __future__ import annotations

import shutil

import torch

from benchmarks.equal_work import GenerateCounter, force_in_folder, vllm_extra_body, vllm_generation_tokens
from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.openai_http import OpenAIBackend
from judge.models import load_model
from tests.support.fake_vllm import recording_vllm
from tiny_world.servers.openai_server import serve


def test_generate_counter_forces_the_length_and_counts_rows_times_new_tokens(tiny_lm_dir):
    model = load_model(str(tiny_lm_dir), device="cpu").model
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.ones_like(ids)
    first = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False)[:, -1]
    model.generation_config.eos_token_id = int(first[0])  # the model's first greedy token now ends row 0
    unforced = model.generate(input_ids=ids[:1], attention_mask=mask[:1], max_new_tokens=8, do_sample=False)
    assert unforced.shape[1] - 4 == 1  # stops at once: this is the unequal work the counter rules out
    with GenerateCounter(model, max_new_tokens=8) as counter:
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
        model.generate(input_ids=ids[:1], attention_mask=mask[:1], max_new_tokens=8, do_sample=False)
    assert out.shape[1] - 4 == 8 and int(out[0, 4]) != int(first[0])  # EOS masked until the 8th token
    assert (counter.tokens, counter.calls, counter.lengths) == (2 * 8 + 8, 2, {8})
    assert "generate" not in vars(model) and model.generation_config.min_new_tokens is None  # undone on exit


def test_force_in_folder_reaches_every_later_load(tiny_lm_dir, tmp_path):
    # The reward server and Ray actors load the model in their own processes: the folder carries the rule.
    folder = shutil.copytree(tiny_lm_dir, tmp_path / "model")
    force_in_folder(folder, 6)
    model = load_model(str(folder), device="cpu").model
    assert model.generation_config.min_new_tokens == 6
    ids = torch.tensor([[5, 6, 7, 8]])
    first = model.generate(input_ids=ids, max_new_tokens=1, do_sample=False, min_new_tokens=0)[0, -1]
    model.generation_config.eos_token_id = int(first)
    assert model.generate(input_ids=ids, max_new_tokens=6, do_sample=False).shape[1] == 4 + 6


def test_openai_backend_sends_the_forced_length_and_the_server_counter_is_read():
    seen: list[dict] = []
    generated = [0.0]
    with serve(recording_vllm(seen, generated)) as url:
        backend = OpenAIBackend(url, model_name="judge", top_logprobs=0, extra_body=vllm_extra_body(12))
        before = vllm_generation_tokens(url)
        texts = backend.generate([ChatRequest.user("Pick one."), ChatRequest.user("Again.")], SamplingParams(12))
        after = vllm_generation_tokens(url)
    assert [t.text for t in texts] == ["<think>ok</think><answer>A</answer>"] * 2
    assert [(b["min_tokens"], b["ignore_eos"], b["max_tokens"]) for b in seen] == [(12, True, 12)] * 2
    assert after - before == 24
