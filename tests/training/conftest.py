from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory):
    """A small synthetic-world dataset: sft/ and rl/ files as `mrjudge synth all` writes them."""
    from data_synthesis.pipeline import SynthConfig, run_all

    out = tmp_path_factory.mktemp("synth")
    run_all(SynthConfig(out=str(out), world_n=40, assemble={"val_fraction": 0.2}), show_progress=False)
    return out
