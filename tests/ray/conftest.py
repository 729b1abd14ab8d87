"""Ray on this machine for the Ray engine tests: `ray.init(num_cpus=2)`, no cluster, started once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray with two CPUs (the CI machine's), shut down after the session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_engine(ray_local):
    """A Ray engine with two workers (actors for model work, tasks for CPU work)."""
    from jobs.executor import RayConfig, RayExecutor

    return RayExecutor(RayConfig(workers=2))
