"""The leak check every Ray test passes through (``tests/conftest.py``) reads what is
held, and who holds it, from the session's own cluster (real local Ray)."""

from __future__ import annotations

import time

import pytest

from .conftest import RAY_RELEASE_S, _ray_holders, _ray_leftovers

pytestmark = pytest.mark.slow


def test_the_leak_check_names_a_held_actor_and_placement_group(ray_cluster):
    ray = ray_cluster

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self) -> int:
            return 1

    group = ray.util.placement_group([{"CPU": 0.5}])
    ray.get(group.ready())
    holder = Holder.remote()
    ray.get(holder.ping.remote())
    try:
        assert _ray_leftovers(ray)["CPU"] == pytest.approx(1.5)
        named = _ray_holders(ray)
        assert "Holder (pid " in named and "ALIVE" in named, named
        assert f"{group.id.hex()[:8]} CREATED [{{'CPU': 0.5}}]" in named, named
        assert f"bundles reserved: ['{group.id.hex()[:8]}']" in named, named
    finally:
        ray.kill(holder)
        ray.util.remove_placement_group(group)
    deadline = time.monotonic() + RAY_RELEASE_S
    while _ray_leftovers(ray) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ray_leftovers(ray)
    assert _ray_holders(ray) == ("actors alive: none; placement groups: none; "
                                 "bundles reserved: none")
