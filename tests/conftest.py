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

    from hpsearch.adapters.ray.local import LocalRay

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Trial processes import tests.trainables: the repo root must be on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    # A fresh cluster, never one another process left running; protected as a run's own
    # Ray is (loopback only, a token for this session, ended with this process), so a
    # test's subprocess joins it with cluster.address=<its address> and the token's
    # environment it inherits.
    cluster = LocalRay(num_cpus=2, include_dashboard=False, log_to_driver=False,
                       logging_level=logging.ERROR).start()
    yield ray
    cluster.stop()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with the working directory in a fresh temporary folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


class FastTestLeftItsLane(AssertionError):
    """A test not marked ``slow`` started a subprocess or a Ray cluster."""


@pytest.fixture(autouse=True)
def _fast_tests_stay_in_process(request, monkeypatch):
    """``pytest -m "not slow"`` starts no subprocess and no Ray: a test that needs either
    is marked ``slow`` (CI runs those too). Enforced here, so a new test cannot slip."""
    if request.node.get_closest_marker("slow") is not None:
        return
    import subprocess

    def refuse(*args, **kwargs):
        raise FastTestLeftItsLane(
            f"{request.node.nodeid} starts a subprocess: mark it @pytest.mark.slow")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse, raising=False)
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return
    monkeypatch.setattr(ray, "init", lambda *a, **k: refuse())
