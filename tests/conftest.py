"""Shared fixtures: tiny models built offline once per session, and a trained parrot judge.

Where shared test code lives: fixtures used across folders here, a folder's own in its conftest.py
(tests/training, tests/vllm, tests/ray); helpers that tests import in tests/support/ (items, images, the
replay helpers, the stand-in reward server, the rule judge); benchmark files in the benchmarks' real formats
in `tiny_world.bench_files`. A test module never imports from another test module.

The inner loop is `.venv/bin/pytest -m "not slow"`: it leaves out every test marked `@pytest.mark.slow`,
those over ~30 s on 2 CPU cores (DDP and multi-node processes, the learning benchmark, Ray evaluations,
kill-and-resume of a model stage, model servers in subprocesses, every vLLM test, gpu_checks' CPU mode, the
README's commands). `make test` runs everything, as CI does, on two pytest-xdist workers (`-n 2`): the suite
is mostly single-threaded Python (imports, servers, subprocesses), so one process left a core idle.
"""

from __future__ import annotations

import os

import pytest

# Folders whose modules share session fixtures too costly to build twice (one `vllm serve`, the framework
# installs): each runs whole on one worker. Any other module runs whole on one worker too, so that its
# module-scoped fixtures (trained tiny models) are built once.
ONE_WORKER_FOLDERS = ("tests/vllm/", "tests/frameworks/")

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Before torch is imported: each worker (and the processes it starts) gets its share of the cores, since
    # OpenMP threads over the core count spin against each other (a 2-core GRPO step was 15x slower).
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _share = max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))


def _scope(nodeid: str) -> str:
    """What runs whole on one worker: a folder of `ONE_WORKER_FOLDERS`, else the test's module."""
    path = nodeid.split("::", 1)[0]
    return next((name for name in ONE_WORKER_FOLDERS if path.startswith(name)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's `load`): its `loadscope` with `_scope` for its unit of work, in collection order (its
    `loadgroup` marks are lost on pytest 9: it renames `item._nodeid`, which pytest 9 no longer reads). Any
    other `--dist` is xdist's own."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # it would put the largest scopes first, tests/vllm among the last

    class FolderScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return FolderScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """`ONE_WORKER_FOLDERS` first: tests/vllm alone is ~7 minutes, and started last it ran alone at the end."""
    order = {name: i for i, name in enumerate(ONE_WORKER_FOLDERS)}
    items.sort(key=lambda item: order.get(_scope(item.nodeid), len(order)))  # stable: each folder keeps its order


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
