"""The offline vLLM engine takes the pixel range as `mm_processor_kwargs` and reports token usage.

The tiny32 judge's processor keeps images at 3,136 to 12,544 pixels, so a 1600x1200 photo costs it 12
visual tokens (112x84); `max_pixels=200704` raises the range, and the photo becomes 504x364 (234 tokens) in vLLM's
processor exactly as in transformers'.
"""

from __future__ import annotations

import pytest

from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.types import MCItem
from tests.support.images import CAP, PHOTO, photo, visual_tokens
from tests.vllm.conftest import ENGINE
from tiny_world.model import TINY_MAX_PIXELS

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # a vLLM engine or server in a subprocess

CONFIG = dict(orders=1, max_new_tokens=8, seed=0)


def test_offline_engine_takes_the_range_and_counts_usage_like_transformers(run_offline, vllm_judge_dir, tmp_path):
    path = tmp_path / "photo.jpg"
    photo().save(path, quality=90)
    row = {"id": "p", "image": str(path), "question": "Is it a sunset?", "candidates": ["Yes.", "No."]}
    spec = {
        "model": str(vllm_judge_dir),
        "engine": {**ENGINE, "max_pixels": CAP},
        "judge": [{"items": [row], "config": CONFIG}],
    }
    [[verdict]] = run_offline(spec)["judge"]

    item = MCItem.from_dict(row)
    [want] = Judge(
        TransformersBackend(str(vllm_judge_dir), device="cpu", max_pixels=CAP), JudgeConfig(**CONFIG)
    ).select([item])
    [own] = Judge(TransformersBackend(str(vllm_judge_dir), device="cpu"), JudgeConfig(**CONFIG)).select([item])
    assert verdict["usage"] == want.usage  # prompt (image included) and generated tokens, stop token counted
    assert verdict["raw"] == want.raw
    assert want.usage["prompt_tokens"] - own.usage["prompt_tokens"] == visual_tokens(
        *PHOTO, max_pixels=CAP
    ) - visual_tokens(*PHOTO, max_pixels=TINY_MAX_PIXELS)
