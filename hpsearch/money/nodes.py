"""Nodes as a provider bills them: what is rented, for how long, and each trial's share.

Pure module. A provider bills an *instance* (a node) from the moment it is rented to the
moment it is released, rounded up to its billing granularity and at least its minimum
billing period, whether trials run on it or not. A trial pays its share of the node
while it runs: the GPUs it reserves over the node's GPUs, or, when it reserves none, its
CPUs over the node's CPUs (:meth:`Demand.share`). What no trial used is *idle* money:
paid all the same (a node waiting for its last trial, the driver starting, a minimum
billing period longer than the work).

How long nodes stay rented is the :class:`Fleet`: a local machine or a Ray cluster is
held for the whole session (:attr:`Fleet.HELD`); the simulator's elastic workers are
rented for one trial attempt each and released when it ends (:attr:`Fleet.PER_TRIAL`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Mapping


class Fleet(enum.Enum):
    """How long nodes stay rented."""

    #: Rented for the session: released when it ends or when the node leaves the cluster.
    HELD = "held"
    #: One node per trial attempt, released when the attempt ends (workers released
    #: when idle).
    PER_TRIAL = "per_trial"


def billed_seconds(length_s: float, granularity_s: int, min_billing_s: int) -> float:
    """Seconds billed for a rental of ``length_s``: rounded up to a multiple of
    ``granularity_s`` (0: not rounded, e.g. a simulated worker), and at least
    ``min_billing_s``."""
    length = max(0.0, length_s)
    if granularity_s <= 0:
        return float(max(min_billing_s, length))
    rounded = math.ceil(length / granularity_s - 1e-9) * granularity_s
    return float(max(min_billing_s, rounded))


@dataclass(frozen=True)
class NodeSpec:
    """A node as it is billed.

    Attributes:
        node_id: Ray's node id (or the simulator's worker name).
        instance: ``provider:instance`` of its catalogue row, or ``custom``.
        spot: Whether it is billed at the spot price.
        price_per_hour: The whole node's price per hour.
        currency: ISO code.
        cpus: CPUs trials can reserve on it (Ray's ``CPU`` resource).
        gpus: GPUs trials can reserve on it (Ray's ``GPU`` resource).
        granularity_s: Billed time is rounded up to a multiple of this (0: exact).
        min_billing_s: Least billed time of one rental.
    """

    node_id: str
    instance: str
    spot: bool
    price_per_hour: float
    currency: str
    cpus: float = 0.0
    gpus: float = 0.0
    granularity_s: int = 1
    min_billing_s: int = 0

    @classmethod
    def priced(cls, node_id: str, price: Any, cpus: float = 0.0,
               gpus: float = 0.0) -> "NodeSpec":
        """A node billed at ``price`` (a :class:`~hpsearch.money.pricing.Price`: its
        whole-instance price, instance, kind and billing terms)."""
        return cls(node_id, price.instance, bool(price.spot), float(price.instance_per_hour),
                   price.currency, float(cpus), float(gpus),
                   int(price.billing_granularity_s), int(price.min_billing_s))

    def minimum_cost(self) -> float:
        """What one rental of this node costs at least (its minimum billing period)."""
        return billed_seconds(0.0, self.granularity_s, self.min_billing_s) \
            * self.price_per_hour / 3600.0


@dataclass(frozen=True)
class Demand:
    """What one trial reserves (``resources.cpu`` and ``resources.gpu``)."""

    cpu: float = 1.0
    gpu: float = 0.0

    def fits(self, node: NodeSpec) -> bool:
        """Whether one trial can run on ``node`` at all."""
        if self.gpu > 0:
            return node.gpus >= self.gpu and node.cpus >= self.cpu
        return node.cpus >= self.cpu > 0 or (self.cpu <= 0 and node.cpus > 0)

    def share(self, node: NodeSpec) -> float:
        """Fraction of ``node`` a trial pays for while it runs: its GPUs over the node's,
        or (reserving no GPU) its CPUs over the node's; 1 for a node whose resources are
        unknown; never above 1."""
        if self.gpu > 0 and node.gpus > 0:
            return min(1.0, self.gpu / node.gpus)
        if node.cpus > 0:
            return min(1.0, max(0.0, self.cpu) / node.cpus)
        return 1.0


def from_ray(entry: Mapping[str, Any], price: Any) -> NodeSpec | None:
    """The :class:`NodeSpec` of one entry of ``ray.nodes()`` billed at ``price`` (the
    node's own price: its declared instance and kind), or None for a dead node."""
    if not entry.get("Alive"):
        return None
    resources = entry.get("Resources") or {}
    return NodeSpec.priced(str(entry.get("NodeID", "")), price,
                           cpus=float(resources.get("CPU", 0.0)),
                           gpus=float(resources.get("GPU", 0.0)))


def fleet_cost(n_nodes: int, seconds: float, price_per_hour: float,
               granularity_s: int = 0, min_billing_s: int = 0) -> float:
    """What ``n_nodes`` nodes rented together for ``seconds`` bill (a fixed cluster)."""
    return n_nodes * billed_seconds(seconds, granularity_s, min_billing_s) \
        * price_per_hour / 3600.0
