"""Adapters leaving training: exported on every save, and handed to a generation server without the base.

The server is the loopback OpenAI-compatible stand-in with vLLM's runtime LoRA endpoints
(`tiny_world.servers.openai_server`): adapters are loaded there with PEFT over its own resident base.
"""

from __future__ import annotations

import pytest
import torch

from adapter_revisions import AdapterStore
from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.backends.openai_http import OpenAIBackend
from judge.models import LoadedModel, load_model
from tests.support.adapters import lora_model
from tests.support.training import CPU_LOAD, sft_config
from tiny_world.servers.openai_server import make_app, serve
from training.config import load_config
from training.handoff import AdapterHandoff
from training.policy import JudgePolicyGRPOConfig
from training.sft import run_sft

GREEDY = SamplingParams(max_new_tokens=12)
PROMPTS = ["Name a colour.", "Count to three."]


def _trained_answers(peft_model, processor):
    backend = TransformersBackend(LoadedModel(peft_model, processor, False))
    return [
        g.text
        for g in backend.generate(
            [ChatRequest(ChatRequest.user(p).messages, adapter="default") for p in PROMPTS], GREEDY
        )
    ]


def _served_answers(url, name):
    backend = OpenAIBackend(url, model_name=name)
    return [g.text for g in backend.generate([ChatRequest.user(p) for p in PROMPTS], GREEDY)]


@pytest.mark.slow  # 43 s under load (7 agents on 2 cores)
def test_lora_sft_exports_a_revision_per_save_with_its_lineage(tiny_vlm_dir, synth_data, tmp_path):
    store = AdapterStore(tmp_path / "store")
    config = sft_config(tiny_vlm_dir, synth_data, tmp_path / "run", "max_steps=4", "save_steps=2", "use_lora=true",
                  "lora_r=4", f"adapter_store={store.root}", "adapter_policy=judge")  # fmt: skip
    run_sft(config)
    revisions = store.revisions("judge")
    assert [r.step for r in revisions] == [2, 4]
    assert revisions[0].parent is None and revisions[1].parent == revisions[0].ref
    assert "loss" in revisions[1].meta["metrics"]
    assert store.resolve("judge@latest") == revisions[1]
    final = (tmp_path / "run" / "adapter_model.safetensors").read_bytes()
    assert (revisions[1].path / "adapter_model.safetensors").read_bytes() == final  # the run's own final adapter
    with pytest.raises(ValueError, match="set use_lora=true"):
        run_sft(sft_config(tiny_vlm_dir, synth_data, tmp_path / "full", "max_steps=1", f"adapter_store={store.root}"))


def test_handoff_moves_only_the_adapter_and_the_server_answers_with_the_new_weights(tiny_lm_dir, tmp_path):
    served = load_model(str(tiny_lm_dir), device="cpu")
    policy = lora_model(tiny_lm_dir, seed=3)
    processor = load_model(str(tiny_lm_dir), device="cpu").processor
    app = make_app(served)
    with serve(app) as url:
        handoff = AdapterHandoff(url, tmp_path / "store", "policy")
        base_answers = _served_answers(url, None)
        first = handoff.push(policy, step=1)
        assert app.state.adapters.adapters == [first.ref]
        assert _served_answers(url, first.ref) == _trained_answers(policy, processor) != base_answers

        optimizer = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=5.0)
        policy.train()
        loss = policy(input_ids=torch.tensor([[5, 6, 7, 8, 9]]), labels=torch.tensor([[5, 6, 7, 8, 9]])).loss
        loss.backward()
        optimizer.step()
        policy.eval()
        second = handoff.push(policy, step=2)
        assert second.id != first.id and second.parent == first.ref
        assert app.state.adapters.adapters == [second.ref]  # the old revision was unloaded
        assert (
            _served_answers(url, second.ref)
            == _trained_answers(policy, processor)
            != _trained_answers(lora_model(tiny_lm_dir, seed=3), processor)
        )
        assert _served_answers(url, None) == base_answers  # the server's base never changed

    base_bytes = sum(p.numel() * p.element_size() for p in served.model.parameters())
    assert handoff.bytes_moved == first.meta["bytes"] + second.meta["bytes"] < base_bytes / 5


def test_handoff_to_a_server_without_runtime_lora_fails_with_the_fix(tiny_lm_dir, tmp_path):
    with serve(make_app(load_model(str(tiny_lm_dir), device="cpu"))) as url:
        handoff = AdapterHandoff(url.removesuffix("/v1") + "/missing", tmp_path / "store", "policy")
        with pytest.raises(RuntimeError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            handoff.push(lora_model(tiny_lm_dir, seed=4))


def test_openai_backend_loads_and_answers_through_runtime_adapters(tiny_lm_dir, tmp_path):
    store = AdapterStore(tmp_path / "store")
    policy = lora_model(tiny_lm_dir, seed=5)
    revision = store.save("policy", policy)
    processor = load_model(str(tiny_lm_dir), device="cpu").processor
    with serve(make_app(load_model(str(tiny_lm_dir), device="cpu"))) as url:
        backend = OpenAIBackend(url)
        backend.load_adapter(revision.ref, str(revision.path))
        requests = [ChatRequest(ChatRequest.user(p).messages, adapter=revision.ref) for p in PROMPTS]
        assert [g.text for g in backend.generate(requests, GREEDY)] == _trained_answers(policy, processor)
        backend.unload_adapter(revision.ref)
        with pytest.raises(RuntimeError, match="404"):
            backend.unload_adapter(revision.ref)


def test_policy_config_checks_what_the_handoff_needs(tiny_lm_dir, tmp_path):
    common = [f"model_name_or_path={tiny_lm_dir}", "train_file=x.jsonl", f"output_dir={tmp_path}",
              "reward.model=x", "num_generations=2", "per_device_train_batch_size=2", *CPU_LOAD]  # fmt: skip
    with pytest.raises(ValueError, match="set use_lora=true, use_vllm=true and vllm_mode=server"):
        load_config(JudgePolicyGRPOConfig, None, [*common, "adapter_handoff=true", "use_lora=true"])
