"""Naming a model by its LoRA adapter folder: how the base is found, and what vLLM can serve as LoRA."""

from __future__ import annotations

import json

import pytest

from judge.backends.vllm_offline import _lora_rank, vllm_lora_problems
from judge.models import resolve_adapter


def _adapter(folder, **config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, **config}))
    return folder


def test_a_model_folder_or_hub_id_is_no_adapter(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_adapter(str(tmp_path)) is None
    assert resolve_adapter("Qwen/Qwen2.5-VL-7B-Instruct") is None


def test_the_base_comes_from_the_adapter_config_or_the_override(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    adapter = _adapter(tmp_path / "a", base_model_name_or_path=str(base))
    assert resolve_adapter(str(adapter)).base == str(base.resolve())
    hub = _adapter(tmp_path / "b", base_model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct")
    assert resolve_adapter(str(hub)).base == "Qwen/Qwen2.5-VL-7B-Instruct"  # left to from_pretrained (hub, cache)
    assert resolve_adapter(str(hub), base=str(base)).base == str(base.resolve())


@pytest.mark.parametrize(
    "config, words",
    [
        ({}, "has no base_model_name_or_path"),  # PEFT wrote None: a model built from a config
        ({"base_model_name_or_path": "/nowhere/tiny"}, "'/nowhere/tiny', which is not a folder here"),
        ({"base_model_name_or_path": "./runs/tiny"}, "relative paths count from the current directory"),
        ({"base_model_name_or_path": "runs/judges/tiny"}, "the base moved"),  # two slashes: no hub id
    ],
)
def test_a_missing_base_names_the_field_and_the_fix(tmp_path, config, words):
    adapter = _adapter(tmp_path / "a", **config)
    with pytest.raises(ValueError, match="base_model_name_or_path") as caught:
        resolve_adapter(str(adapter))
    assert words in str(caught.value) and "--base" in str(caught.value)


def test_an_override_that_is_not_there_and_unreadable_configs_are_refused(tmp_path):
    adapter = _adapter(tmp_path / "a", base_model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct")
    with pytest.raises(ValueError, match="the base given"):
        resolve_adapter(str(adapter), base=str(tmp_path / "missing"))
    (adapter / "adapter_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        resolve_adapter(str(adapter))


@pytest.mark.parametrize(
    "config, problem",
    [
        ({}, None),  # plain LoRA
        ({"init_lora_weights": "gaussian"}, None),  # an init that only seeds the adapter
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"bias": "lora_only"}, "bias"),
        ({"init_lora_weights": "pissa"}, "rewrites the base"),
        ({"peft_type": "IA3"}, "LoRA only"),
    ],
)
def test_what_vllm_cannot_serve_as_lora(config, problem):
    problems = vllm_lora_problems({"peft_type": "LORA", "r": 8, **config})
    assert (problems == []) if problem is None else any(problem in p for p in problems)


def test_the_lora_rank_rounds_up_to_one_vllm_accepts():
    assert _lora_rank({"r": 4}, None) == 8
    assert _lora_rank({"r": 16, "rank_pattern": {"q_proj": 40}}, None) == 64
    assert _lora_rank({"r": 4}, 32) == 32
    with pytest.raises(ValueError, match="above vLLM's largest"):
        _lora_rank({"r": 1024}, None)
