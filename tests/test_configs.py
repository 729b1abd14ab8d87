"""Every shipped YAML config loads into its dataclass, so recipes cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_synthesis.pipeline import ModelSpec, SynthConfig
from judge.config import config_from_yaml

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("synth_*.yaml"))


def test_there_are_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_synth_config_loads(path):
    assert path.read_text().startswith("#"), "each config opens with its launch command"
    config = config_from_yaml(SynthConfig, path)
    for spec in (config.model, config.reasoner_model, config.rewriter_model):
        if spec is not None:
            ModelSpec(**spec)
