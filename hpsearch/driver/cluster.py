"""The Ray the run gets: a local Ray started for it (or a cluster joined), and what
that cluster means for the run (a trial fits a node, the trial's price as Ray shares
a node, how many trials at once, whether every node reaches the checkpoints)."""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from hpsearch.core.placement import check_fits
from hpsearch.driver.interrupts import SignalsHeld
from hpsearch.driver.prepare import Prepared
from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.spec import config as config_mod


def _concurrency(config: config_mod.Config, resources: Mapping[str, float]) -> int:
    """Trials at once: as configured, else as many as the cluster's resources hold."""
    if config.search.concurrency is not None:
        return config.search.concurrency
    fits = [resources.get("CPU", 1.0) // config.resources.cpu]
    if config.resources.gpu > 0:
        fits.append(resources.get("GPU", 0.0) // config.resources.gpu)
    return max(1, int(min(fits)))


class RaySession:
    """Starts a local Ray (or joins ``cluster.address``); shuts down only what it started.

    A local Ray listens on 127.0.0.1 only, requires a per-run token and ends with the
    driver (:class:`hpsearch.adapters.ray.local.LocalRay`). A Ray already initialised in
    this process (a test's or a notebook's) is used as it is.
    """

    #: ``ray.init`` arguments of every session: Ray's start-up notices are not the
    #: user's business; real problems surface as errors or in hpsearch.log.
    INIT = {"include_dashboard": False, "log_to_driver": False,
            "logging_level": logging.ERROR}

    def __init__(self, address: str | None):
        self.address = address
        self.local = None
        self.joined = False

    def __enter__(self):
        import ray

        from hpsearch.adapters.ray import local

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return ray
        if self.address is None:
            try:
                self.local = local.LocalRay(**self.INIT).start()
            except (ConnectionError, RuntimeError, OSError, ValueError) as exc:
                raise HpsearchError(local.start_failure(exc)) from None
            return ray
        try:
            local.connect(self.address, **self.INIT)
        except (ConnectionError, RuntimeError, ValueError,
                ray.exceptions.AuthenticationError) as exc:
            raise ConfigError("cluster.address", local.join_failure(exc),
                              self.address) from None
        self.joined = True
        return ray

    def is_cluster(self, nodes: list[dict[str, Any]]) -> bool:
        """Whether trials may run on other machines: a cluster joined at
        ``cluster.address``, or a Ray initialised before the run with several nodes (a
        local run's own Ray is this machine alone)."""
        if self.local is not None:
            return False
        return self.joined or sum(1 for n in nodes if n.get("Alive")) > 1

    def __exit__(self, *exc_info) -> None:
        # Ctrl-C and SIGTERM wait until Ray is shut down: a shutdown cut in half leaves
        # the process attached to a GCS that is gone, until Ray kills it (exit 1).
        with SignalsHeld():
            if self.local is not None:
                self.local.stop()
            elif self.joined:
                import ray

                ray.shutdown()


def trial_demand(config: config_mod.Config):
    """What one trial asks of a node: its CPUs and GPUs."""
    from hpsearch.money.nodes import Demand

    return Demand(config.resources.cpu, config.resources.gpu)


def _trial_price(config: config_mod.Config, price, nodes: list[dict[str, Any]]):
    """The run's price with a trial's share of its node as Ray divides it: the trial's
    GPUs (or CPUs) over those of the largest node it fits, which is what it is billed
    (see :meth:`hpsearch.money.nodes.Demand.share`); ``price`` unchanged without one."""
    import dataclasses

    from hpsearch.money.nodes import from_ray

    demand = trial_demand(config)
    specs = [spec for n in nodes if (spec := from_ray(n, price)) is not None
             and demand.fits(spec)]
    if not specs:
        return price
    largest = max(specs, key=lambda n: (n.gpus, n.cpus))
    share = demand.share(largest)
    return dataclasses.replace(price, share=share, per_hour=price.instance_per_hour * share)


def _largest_node_cpus(nodes: list[dict[str, Any]]) -> float | None:
    cpus = [n.get("Resources", {}).get("CPU", 0.0) for n in nodes if n.get("Alive")]
    return max(cpus) if cpus else None


def fit_to_cluster(ready: Prepared, ray, ray_session: RaySession) -> tuple[Any, int]:
    """``(trial price, concurrency)`` on the Ray the run got, after checking that a
    trial fits one of its nodes and that every node reaches the checkpoints: all before
    anything is spent."""
    from hpsearch.money import pricing

    config = ready.config
    nodes = ray.nodes()
    check_fits(config, nodes)
    price = _trial_price(config, pricing.resolve(
        config, node_cpus=_largest_node_cpus(nodes), gpu=ready.gpu), nodes)
    concurrency = _concurrency(config, ray.cluster_resources())
    ready.checkpoints.check(nodes if ray_session.is_cluster(nodes) else None)
    return price, concurrency
