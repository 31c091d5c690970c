"""Placement on spot and on-demand nodes, the node watchdog and per-node prices (pure)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpsearch.spec import config as config_mod
from hpsearch import keys
from hpsearch.money import nodekinds, pricing
from hpsearch.core.placement import Placement

RAW = {
    "name": "place",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 4,
    "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1}},
    "pricing": {"instance": "aws:g4dn.xlarge", "spot": True},
    "preemption": {"spot_wait_s": 10},
}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def node(node_id: str, kind: str | None, alive: bool = True, instance: str | None = None):
    resources = {"CPU": 4.0}
    if kind is not None:
        resources[nodekinds.SPOT if kind == "spot" else nodekinds.ON_DEMAND] = 1000.0
    if instance:
        resources[nodekinds.INSTANCE_PREFIX + instance] = 1000.0
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def placement(nodes: list, overrides: dict | None = None):
    config = config_mod.load(RAW, overrides or {})
    price = pricing.resolve(config, node_cpus=4)
    clock = Clock()
    return Placement(config, price, lambda: nodes, clock), clock


def pending(trial_id: str, spot: bool | None, status: str = "PENDING"):
    config = {} if spot is None else {keys.SPOT_NODE: spot}
    return SimpleNamespace(trial_id=trial_id, status=status, config=config)


def test_undeclared_nodes_make_placement_inactive():
    p, _ = placement([node("a", None)])
    assert not p.active


def test_spot_is_chosen_while_a_spot_node_is_alive():
    p, _ = placement([node("s", "spot"), node("o", "on_demand")])
    assert p.active and p.choose() == (True, None)


def test_without_a_spot_node_a_trial_waits_then_fails_without_fallback():
    p, clock = placement([node("o", "on_demand")])
    assert p.choose() == (None, None)
    clock.now = 9.9
    assert p.choose() == (None, None)
    clock.now = 10
    spot, reason = p.choose()
    assert spot is None and "no spot node alive for 10 s" in reason
    assert "preemption.on_demand_fallback" in reason


def test_with_fallback_it_moves_to_on_demand_after_the_wait():
    p, clock = placement([node("o", "on_demand")], {"preemption.on_demand_fallback": True})
    assert p.choose() == (None, None)
    clock.now = 10
    assert p.choose() == (False, None)


def test_on_demand_runs_go_on_demand_at_once():
    p, _ = placement([node("s", "spot")], {"pricing.spot": False})
    assert p.choose() == (False, None)


def test_a_spot_node_coming_back_resets_the_wait():
    nodes = [node("o", "on_demand")]
    p, clock = placement(nodes)
    p.choose()
    clock.now = 8
    nodes.append(node("s", "spot"))
    clock.now = 9.5  # the node list is re-read after a second
    assert p.choose() == (True, None)
    nodes.pop()
    clock.now = 15
    assert p.choose() == (None, None)  # a new wait started at 15


@pytest.mark.parametrize("fallback, requeue", [(True, True), (False, False)])
def test_the_watchdog_takes_stuck_spot_trials_off_the_queue_once(fallback, requeue):
    p, clock = placement([node("s", "spot", alive=False), node("o", "on_demand")],
                         {"preemption.on_demand_fallback": fallback})
    trials = [pending("t1", True), pending("t2", False), pending("t3", True, "RUNNING"),
              pending("t4", None)]
    assert p.watch_pending(trials) == []  # the wait starts now
    clock.now = 10
    judged = p.watch_pending(trials)
    assert [(t.trial_id, again) for t, again, _ in judged] == [("t1", requeue)]
    reason = judged[0][2]
    assert ("moved to on-demand" in reason) if requeue else ("no fallback" in reason)
    clock.now = 20
    assert p.watch_pending(trials) == []  # judged once


def test_a_node_kind_alive_again_forgives_a_stuck_trial():
    nodes = [node("o", "on_demand")]
    p, clock = placement(nodes)
    trial = pending("t1", True)
    p.watch_pending([trial])
    clock.now = 5
    nodes.append(node("s", "spot"))
    assert p.watch_pending([trial]) == []
    nodes.pop()
    clock.now = 12
    assert p.watch_pending([trial]) == []  # a new wait started at 12


def test_each_node_is_priced_by_its_declared_instance_and_kind():
    p, _ = placement([node("s", "spot", instance="p3.2xlarge"),
                      node("o", "on_demand", instance="p3.2xlarge"), node("x", None)])
    spot, on_demand = p.price_for_node("s"), p.price_for_node("o")
    assert spot.instance == on_demand.instance == "aws:p3.2xlarge"
    assert spot.spot and not on_demand.spot
    assert spot.instance_per_hour == 0.95 and on_demand.instance_per_hour == 3.06
    assert p.price_for_node("x") == p.price  # undeclared: the run's price
    assert p.price_for_node("unknown") == p.price


def test_trial_resources_ask_for_the_node_kind_placed_on():
    p, _ = placement([node("s", "spot")])
    per_trial = p.resources({"cpu": 1, "gpu": 0})
    assert per_trial({}) == {"cpu": 1, "gpu": 0}
    assert per_trial({keys.SPOT_NODE: True}) == {"cpu": 1, "gpu": 0, nodekinds.SPOT: 0.001}
    assert per_trial({keys.SPOT_NODE: False}) == {"cpu": 1, "gpu": 0,
                                                  nodekinds.ON_DEMAND: 0.001}


# -- nodes that cannot reach the checkpoint storage ---------------------------------


def test_nodes_that_fail_the_storage_probe_are_avoided():
    from hpsearch.core.placement import avoid_selector

    nodes = [node("a", None), node("b", None), node("head", None)]
    nodes[2]["Resources"] = {}  # a head that runs no trials
    p, _ = placement(nodes)
    assert p.storage_unjudged() == ["a", "b", "head"]
    p.storage_verdict("a", None)
    p.storage_verdict("b", "the driver's probe file is not there")
    assert p.storage_unjudged() == ["head"]
    assert p.avoid() == ["b"] and p.storage_refused() == {"b": "the driver's probe file is not there"}
    assert not p.none_reach_storage()
    # A pass never clears a failure (a trial that refused the node is the later word).
    p.storage_verdict("b", None)
    assert p.avoid() == ["b"]
    p.storage_verdict("a", "no answer within 60 s")
    assert p.none_reach_storage()  # the head runs no trials
    assert avoid_selector([]) is None
    assert avoid_selector(["b"]) == {"ray.io/node-id": "!b"}
    assert avoid_selector(["a", "b"]) == {"ray.io/node-id": "!in(a,b)"}


def test_dead_nodes_are_not_probed():
    p, _ = placement([node("a", None, alive=False), node("b", None)])
    assert p.storage_unjudged() == ["b"]
