"""Placing trials on spot or on-demand nodes, and pricing each at its node (pure).

When the cluster's nodes declare their kind (see :mod:`hpsearch.money.nodekinds` for the
``ray start --resources`` flags), each trial asks for its kind's resource, so it lands on
a spot node when ``pricing.spot`` says spot and on an on-demand node otherwise. If no
spot node is alive (all taken back), a trial waits ``preemption.spot_wait_s`` for one
and then falls back to on-demand when that is allowed (``pricing.spot: auto`` or
``preemption.on_demand_fallback``), or fails with the reason. Every trial is billed at
the node it runs on: its declared instance and kind.

Nodes that cannot reach the checkpoint storage (the probe of
:mod:`hpsearch.adapters.ray.storage` failed on them, or a trial refused to train there)
get no trial: :meth:`Placement.avoid` lists them and every trial's placement carries a
node label selector that excludes them (:func:`avoid_selector`, Ray's
``ray.io/node-id`` label, which every node has). Excluding the nodes that failed rather
than admitting those that passed keeps the demand satisfiable by any new node, so
Ray's autoscaler still launches replacements; a trial that lands on a new node before
its probe ran checks the storage itself and is placed elsewhere if it must be.

Pure: the node list comes from an injected function (``ray.nodes`` in a real run), and
pending trials are whatever objects carry ``trial_id``, ``status`` and ``config``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from hpsearch.money import nodekinds, pricing
from hpsearch.spec.config import Config
from hpsearch.errors import ConfigError
from hpsearch.money.pricing import Price

#: The label Ray gives every node: its node id.
NODE_ID_LABEL = "ray.io/node-id"


def avoid_selector(node_ids: list[str]) -> dict[str, str] | None:
    """A Ray label selector that excludes ``node_ids`` (None when there are none)."""
    if not node_ids:
        return None
    if len(node_ids) == 1:
        return {NODE_ID_LABEL: f"!{node_ids[0]}"}
    return {NODE_ID_LABEL: f"!in({','.join(node_ids)})"}


class Placement:
    """The cluster's node kinds and the price of a trial on each node.

    Args:
        config: The run's config.
        price: The run's price (after ``pricing.spot: auto`` was settled).
        list_nodes: ``ray.nodes`` (injected for tests).
        clock: Monotonic seconds.
        gpu: What NVML found on the driver's machine, for ``pricing.instance: auto``
            (a node that declares a kind but no instance is priced like the run).
    """

    def __init__(self, config: Config, price: Price, list_nodes: Callable[[], list],
                 clock: Callable[[], float] = time.monotonic, gpu: Any = None):
        self.config = config
        self.gpu = gpu
        self.price = price
        self.list_nodes = list_nodes
        self.clock = clock
        self.prefer_spot = price.spot
        self.fallback = (config.pricing.spot == "auto"
                         or config.preemption.on_demand_fallback)
        self._nodes: list[nodekinds.NodeKind] = []
        self._read_at = -1e9
        self._no_spot_since: float | None = None
        self._prices: dict[str, Price] = {}
        self._stuck_since: dict[str, float] = {}
        self._judged: set[str] = set()
        #: node id -> None (it reaches the checkpoint storage) or why it does not.
        self._storage: dict[str, str | None] = {}

    def nodes(self) -> list[nodekinds.NodeKind]:
        if self.clock() - self._read_at > 1.0:
            self._nodes = [nodekinds.parse_node(n) for n in self.list_nodes()]
            self._read_at = self.clock()
        return self._nodes

    @property
    def active(self) -> bool:
        """Whether nodes declare kinds (else trials run anywhere at the run's price)."""
        return nodekinds.declared(self.nodes())

    def choose(self) -> tuple[bool | None, str | None]:
        """The kind for a trial starting now: ``(spot, None)``; ``(None, None)`` to wait;
        ``(None, reason)`` when it cannot run (no spot node and no fallback)."""
        if not self.prefer_spot:
            return False, None
        if any(n.alive and n.spot for n in self.nodes()):
            self._no_spot_since = None
            return True, None
        now = self.clock()
        if self._no_spot_since is None:
            self._no_spot_since = now
        if now - self._no_spot_since < self.config.preemption.spot_wait_s:
            return None, None
        if self.fallback:
            return False, None
        return None, (f"no spot node alive for {self.config.preemption.spot_wait_s:g} s "
                      f"and on-demand is not allowed (pricing.spot: true; set "
                      f"preemption.on_demand_fallback: true to allow it)")

    def kind_alive(self, spot: bool) -> bool:
        """Whether some alive node offers this kind (re-read: nodes just went away)."""
        self._read_at = -1e9
        return any(n.alive and n.spot is spot for n in self.nodes())

    def watch_pending(self, trials: list[Any]) -> list[tuple[Any, bool, str]]:
        """The watchdog: pending trials whose node kind no alive node offers any more,
        for longer than ``preemption.spot_wait_s``. Returns ``(trial, requeue, reason)``:
        requeue it on on-demand nodes (a spot trial where falling back is allowed), or
        fail it. Each trial is returned once."""
        from hpsearch import keys

        out = []
        now = self.clock()
        for trial in trials:
            spot = (trial.config or {}).get(keys.SPOT_NODE)
            if trial.status != "PENDING" or spot is None or trial.trial_id in self._judged:
                continue
            if self.kind_alive(bool(spot)):
                self._stuck_since.pop(trial.trial_id, None)
                continue
            since = self._stuck_since.setdefault(trial.trial_id, now)
            if now - since < self.config.preemption.spot_wait_s:
                continue
            kind = "spot" if spot else "on-demand"
            if spot and self.fallback:
                requeue, reason = True, f"no {kind} node alive: moved to on-demand"
            else:
                requeue, reason = False, (
                    f"no {kind} node alive for {self.config.preemption.spot_wait_s:g} s and "
                    f"no fallback allowed" + (" (set preemption.on_demand_fallback: true)"
                                              if spot else ""))
            self._judged.add(trial.trial_id)
            out.append((trial, requeue, reason))
        return out

    # -- the checkpoint storage -------------------------------------------------------

    def storage_verdict(self, node_id: str, error: str | None) -> None:
        """Record whether ``node_id`` reaches the checkpoint storage (``error`` None)."""
        if error is not None or node_id not in self._storage:
            self._storage[node_id] = error

    def storage_unjudged(self) -> list[str]:
        """Alive nodes whose reach of the checkpoint storage is not known yet."""
        return [n.node_id for n in self.nodes() if n.alive and n.node_id not in self._storage]

    def avoid(self) -> list[str]:
        """Nodes no trial may be placed on (they cannot reach the checkpoint storage)."""
        return sorted(n for n, error in self._storage.items() if error is not None)

    def storage_refused(self) -> dict[str, str]:
        """``{node id: why}`` of the nodes that cannot reach the checkpoint storage."""
        return {n: e for n, e in self._storage.items() if e is not None}

    def none_reach_storage(self) -> bool:
        """Whether every alive node that could run a trial failed the storage probe."""
        alive = [str(n.get("NodeID", "")) for n in self.list_nodes() if n.get("Alive")
                 and (n.get("Resources") or {}).get("CPU", 0) > 0]
        return bool(alive) and all(self._storage.get(n) is not None for n in alive)

    def resources(self, base: dict[str, float]) -> Callable[[dict[str, Any]], dict]:
        """Tune's per-trial resources: ``base`` plus the kind the trial was placed on."""
        from hpsearch import keys

        def per_trial(config: dict[str, Any]) -> dict[str, float]:
            spot = config.get(keys.SPOT_NODE)
            if spot is None:
                return dict(base)
            return {**base, **nodekinds.kind_resource(bool(spot))}

        return per_trial

    def price_for_node(self, node_id: str) -> Price:
        """What ``node_id`` costs: its declared instance and kind (else the run's price)."""
        if node_id in self._prices:
            return self._prices[node_id]
        node = next((n for n in self.nodes() if n.node_id == node_id), None)
        return self.price if node is None else self.price_of(node)

    def price_of(self, node: nodekinds.NodeKind) -> Price:
        """What ``node`` costs: the catalogue row it declares (``hps_instance=...``) at
        the kind it declares, else the run's price (``instance_per_hour``: the whole
        node; ``pricing.price_per_hour`` prices every node alike)."""
        if node.node_id in self._prices:
            return self._prices[node.node_id]
        if (node.spot is None and node.instance is None) \
                or self.config.pricing.price_per_hour is not None:
            return self.price
        spot = self.price.spot if node.spot is None else node.spot
        price = pricing.resolve(self.config, instance=node.instance, spot=spot, gpu=self.gpu)
        self._prices[node.node_id] = price
        return price

    def billed_nodes(self) -> list:
        """The alive nodes as they are billed (:class:`~hpsearch.money.nodes.NodeSpec`,
        each at its own price), read afresh from the node list."""
        from hpsearch.money.nodes import from_ray

        out = []
        for entry in self.list_nodes():
            spec = from_ray(entry, self.price_of(nodekinds.parse_node(entry)))
            if spec is not None:
                out.append(spec)
        return out


def check_fits(config: Config, nodes: list[dict[str, Any]]) -> None:
    """A trial asking for more than any node has would pend forever: refuse it now.

    Args:
        config: The run's config (its ``resources``).
        nodes: Entries of ``ray.nodes()``.

    Raises:
        ConfigError: Naming ``resources.cpu`` or ``resources.gpu`` and the largest node.
    """
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    for key, field in (("CPU", "resources.cpu"), ("GPU", "resources.gpu")):
        want = config.resources.cpu if key == "CPU" else config.resources.gpu
        if want <= 0:
            continue
        most = max((r.get(key, 0.0) for r in alive), default=0.0)
        if want > most:
            where = f"the largest Ray node has {most:g}" if most else f"no Ray node has a {key}"
            raise ConfigError(field, f"no trial could ever start: {where}", want)
