"""One small local Ray cluster for the module (start-up costs seconds on 2 cores), stopped after."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_cluster():
    from rejoinder.harness import ray_cluster

    cluster = ray_cluster.connect("local", num_cpus=2)
    yield cluster
    ray_cluster.shutdown(cluster)
