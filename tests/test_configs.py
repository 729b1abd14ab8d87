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


ACCELERATE = sorted((Path(__file__).resolve().parents[1] / "configs" / "accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", ACCELERATE, ids=lambda p: p.name)
def test_accelerate_config_loads(path):
    from accelerate.commands.config.config_args import load_config_from_file

    assert path.read_text().startswith("#"), "each config opens with its launch command"
    config = load_config_from_file(str(path))
    assert config.num_processes % config.num_machines == 0, "the same number of processes on every node"
    if path.name.startswith("multinode_"):
        # The README's node-0/node-1 commands override machine_rank and main_process_ip/port from the command line.
        assert (config.num_machines, config.num_processes, config.rdzv_backend) == (2, 16, "static")
        assert config.main_process_ip and config.main_process_port == 29500
        if config.distributed_type == "DEEPSPEED":
            # Other launchers (pdsh, openmpi, …) start every node from node 0 and need a hostfile.
            assert config.deepspeed_config["deepspeed_multinode_launcher"] == "standard"
        if config.distributed_type == "FSDP":
            # Trainer.save_model writes model.safetensors under FSDP only for a full state dict.
            assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
