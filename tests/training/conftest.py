from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory):
    """A small synthetic-world dataset: sft/ and rl/ files as `mrjudge synth all` writes them."""
    from data_synthesis.pipeline import SynthConfig, run_all

    out = tmp_path_factory.mktemp("synth")
    run_all(SynthConfig(out=str(out), world_n=40, assemble={"val_fraction": 0.2}), show_progress=False)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """World records as `write_world` writes them: {"id", "image", "question", "answer", "source"}, 56x56 images."""
    from data_synthesis.world import write_world

    return write_world(12, 0, tmp_path_factory.mktemp("world"), size=56) / "records.jsonl"


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module (`pytestmark = pytest.mark.usefixtures("one_thread")`): the tiny models'
    matrices are far too small to share, and it does not stall when another process holds the other core."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def lm64(tiny_lm_dir):
    """The tiny text LM in float64, in training mode (the replay tests' exact-gradient model)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float64).train()


@pytest.fixture(scope="module")
def lm_batch(lm64):
    """Prompts of 40 and 31 tokens (left padding), 3 + 3 completions of uneven length, one completion empty
    (TRL's mask_truncated_completions), and a third prompt with a single completion (the plain path)."""
    from tests.support.replay import text_batch

    rows = [(0, 12), (1, 5), (0, 9), (1, 0), (2, 7), (0, 3), (1, 11)]
    return text_batch([40, 31, 20], rows, vocab=lm64.config.vocab_size, width=12, seed=0)
