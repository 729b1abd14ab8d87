"""The VL-RewardBench tests' fixtures: the small file of `tests.eval.fixtures`, and a scripted official run over
the GitHub form (`forms`)."""

from __future__ import annotations

import json

import pytest

from eval import vl_rewardbench as vlrb
from eval.vl_rewardbench import VLRBConfig, official_predict
from tests.eval.fixtures import write_vlrb_jsonl
from tests.eval.vl_rewardbench.forms import CyclingJudge, write_github_jsonl


@pytest.fixture
def items(tmp_path):
    return vlrb.load_vl_rewardbench(write_vlrb_jsonl(tmp_path))


@pytest.fixture
def github_run(tmp_path):
    data = write_github_jsonl(tmp_path)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    items = vlrb.load_vl_rewardbench(data)
    judge = CyclingJudge()
    predictions = official_predict(judge, items, VLRBConfig(k=10, seed=7))
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return data, rows, items, judge, predictions, path
