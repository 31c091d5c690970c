"""Shared fixtures: one real local Ray cluster for the whole session."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray with 2 CPUs; hpsearch.run joins it instead of starting its own."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Trial processes import tests.trainables: the repo root must be on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    # address="local": a fresh cluster, never one another process left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with the working directory in a fresh temporary folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
