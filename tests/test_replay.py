"""The replay backend through the real Ray Tune path agrees with the simulator."""

from __future__ import annotations

import pytest

from benchmarks.replay import crosscheck

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("policy", ["cost_aware", "ray-asha"])
def test_replay_on_ray_and_simulation_agree(ray_cluster, tmp_path, policy):
    out = crosscheck("synthetic", seed=0, n=16, workers=4, policy=policy, data=None,
                     run_dir=tmp_path / policy)
    assert out["ray"]["stopped"], "the policy should stop some of 16 trials"
    assert out["ray"]["stopped"] == out["sim"]["stopped"]
    assert out["ray"]["busy_s"] == pytest.approx(out["sim"]["busy_s"], rel=1e-9)
    # The ledger bills the machine (1 USD per hour) for the run; each trial pays its
    # share of it (0.01 CPU of the cluster's) for its busy time, unrounded.
    busy_h = out["sim"]["busy_s"] / 3600
    share = 0.01 / ray_cluster.cluster_resources()["CPU"]
    assert out["ray"]["kept"] == pytest.approx(busy_h * share, rel=1e-9)
    assert out["ray"]["spent"] > out["ray"]["kept"]
    assert out["agree"]
