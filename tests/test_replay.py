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
    # Money in the ledger is the busy time at 1 USD per hour, each of the 16 billed
    # intervals rounded up to a whole second.
    busy_h = out["sim"]["busy_s"] / 3600
    assert busy_h <= out["ray"]["spent"] <= busy_h + 16 / 3600
    assert out["agree"]
