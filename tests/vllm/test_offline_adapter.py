"""An adapter folder as the offline engine's model: vLLM serves it as LoRA over its base, like transformers' merge."""

from __future__ import annotations

import pytest

from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.types import MCItem
from tests.support.items import make_items
from tests.support.parrot import REASONING
from tests.vllm.conftest import ENGINE, save_items

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM engine or server in a subprocess

CONFIG = dict(max_new_tokens=24, seed=0)


def test_adapter_folder_as_the_model_matches_the_merged_transformers_judge(run_offline, vllm_lora_dir, tmp_path):
    rows = save_items(make_items(2, seed=7), tmp_path)
    engine = {k: v for k, v in ENGINE.items() if k not in ("enable_lora", "max_lora_rank")}  # the backend turns LoRA on
    result = run_offline({"model": str(vllm_lora_dir), "engine": engine, "judge": [{"items": rows, "config": CONFIG}]})
    (got,) = result["judge"]
    reference = TransformersBackend(str(vllm_lora_dir), device="cpu")  # the adapter merged into its base
    expected = Judge(reference, JudgeConfig(**CONFIG)).select([MCItem.from_dict(row) for row in rows])
    assert [v["raw"] for v in got] == [v.raw for v in expected]
    assert not any(v["raw"][0].startswith(REASONING) for v in got)  # the adapter, not the base, answered
