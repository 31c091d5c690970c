"""Node kinds: which Ray nodes are spot or on-demand, and what instance they are.

Pure module. A node declares its kind with Ray custom resources when it starts::

    ray start --address HEAD:6379 --resources '{"hps_spot": 1000, "hps_instance=p3.2xlarge": 1000}'
    ray start --address HEAD:6379 --resources '{"hps_on_demand": 1000, "hps_instance=p3.2xlarge": 1000}'

(the amounts only need to exceed what trials ask: each trial takes 0.001 of its kind).
A cluster whose nodes declare no kind runs every trial anywhere at the configured price.
:func:`choose_spot` settles ``pricing.spot: auto``: spot is chosen when its price, grown
by the work expected to be lost to preemptions and the restarts, is still below the
on-demand price.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

SPOT = "hps_spot"
ON_DEMAND = "hps_on_demand"
INSTANCE_PREFIX = "hps_instance="
#: What one trial takes of its node kind's resource.
KIND_SHARE = 0.001

#: AWS Spot interruption-frequency bands (share of instances interrupted per month).
BAND_MONTHLY = {"<5%": 0.05, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}
HOURS_PER_MONTH = 730.0
#: Preemptions per hour assumed for spot when neither the config nor the catalogue
#: says: one per five hours (measured single-V100 spot runs last 0.8-3.6 h on average).
DEFAULT_SPOT_RATE_PER_HOUR = 0.2


@dataclass(frozen=True)
class NodeKind:
    """What a Ray node declares.

    Attributes:
        node_id: Ray's node id.
        alive: Whether the node is up.
        spot: True (spot), False (on-demand), None (undeclared).
        instance: The declared instance (catalogue name), or None.
    """

    node_id: str
    alive: bool
    spot: bool | None
    instance: str | None


def parse_node(node: Mapping[str, Any]) -> NodeKind:
    """A :class:`NodeKind` from one entry of ``ray.nodes()``."""
    resources = node.get("Resources", {}) or {}
    spot = True if SPOT in resources else False if ON_DEMAND in resources else None
    instance = next((k[len(INSTANCE_PREFIX):] for k in resources
                     if k.startswith(INSTANCE_PREFIX)), None)
    return NodeKind(str(node.get("NodeID", "")), bool(node.get("Alive")), spot, instance)


def declared(nodes: list[NodeKind]) -> bool:
    """Whether any node declares a kind (then trials are placed by kind)."""
    return any(n.spot is not None for n in nodes)


def kind_resource(spot: bool) -> dict[str, float]:
    """The custom resource a trial asks for to land on a node of this kind."""
    return {SPOT if spot else ON_DEMAND: KIND_SHARE}


def band_rate_per_hour(band: str) -> float | None:
    """Preemptions per hour implied by an AWS-style monthly band, or None if unknown."""
    share = BAND_MONTHLY.get(band)
    if share is None:
        return None
    return -math.log(1.0 - share) / HOURS_PER_MONTH


def spot_cost_factor(rate_per_hour: float, lost_per_preemption_s: float,
                     restart_s: float) -> float:
    """How much more than its price an hour of useful spot work costs.

    Each preemption loses the work since the last checkpoint and pays a restart, so a
    useful hour takes ``1 / (1 - rate x (lost + restart))`` billed hours (bounded).
    """
    overhead_h = rate_per_hour * (lost_per_preemption_s + restart_s) / 3600.0
    return 1.0 / max(0.05, 1.0 - overhead_h)


def choose_spot(spot_per_hour: float | None, on_demand_per_hour: float | None,
                rate_per_hour: float, lost_per_preemption_s: float,
                restart_s: float) -> tuple[bool, str]:
    """``pricing.spot: auto``: (use spot?, why) by expected cost of useful work."""
    if spot_per_hour is None:
        return False, "no spot price"
    if on_demand_per_hour is None:
        return True, "no on-demand price"
    factor = spot_cost_factor(rate_per_hour, lost_per_preemption_s, restart_s)
    expected = spot_per_hour * factor
    spot = expected < on_demand_per_hour
    return spot, (f"spot {spot_per_hour:g}/h x {factor:.3f} for {rate_per_hour:g} "
                  f"preemptions/h = {expected:.4g}/h {'<' if spot else '>='} on-demand "
                  f"{on_demand_per_hour:g}/h")
