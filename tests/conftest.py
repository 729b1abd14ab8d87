"""Shared fixtures: tiny models built offline once per session, and a trained parrot judge.

Where shared test code lives: fixtures used across folders here, a folder's own in its conftest.py
(tests/training, tests/vllm, tests/ray); helpers that tests import in tests/support/ (items, images, the
replay helpers, the stand-in reward server, the rule judge); benchmark files in the benchmarks' real formats
in `tiny_world.bench_files`. A test module never imports from another test module.

The inner loop is `.venv/bin/pytest -m "not slow"`: it leaves out every test marked `@pytest.mark.slow`,
those over ~30 s on 2 CPU cores (DDP and multi-node processes, the learning benchmark, Ray evaluations,
kill-and-resume of a model stage, model servers in subprocesses, every vLLM test, gpu_checks' CPU mode, the
README's commands). `make test` runs everything, as CI does.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    from tiny_world.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-vlm"), kind="vlm", seed=0)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    from tiny_world.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-lm"), kind="lm", seed=0)


@pytest.fixture(scope="session")
def parrot_dir(tiny_vlm_dir, tmp_path_factory):
    """A tiny judge trained to answer in the judge format (B ~70 %, A ~30 %), blind to the image."""
    from tests.support.parrot import train_parrot

    return train_parrot(tiny_vlm_dir, tmp_path_factory.mktemp("parrot"))


@pytest.fixture(scope="session")
def parrot_loaded(parrot_dir):
    from judge.models import load_model

    return load_model(str(parrot_dir), device="cpu")
