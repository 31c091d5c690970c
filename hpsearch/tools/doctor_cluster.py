"""The doctor's checks of the Ray cluster: reachable, its resources, each alive node's
kind and price, and whether one trial fits a node; or, without an address, what the
local Ray that ``run`` starts would get.

Pure module: the cluster's answers come from
:func:`hpsearch.adapters.system.cluster_info`, asked from a child process so that an
address where no Ray head answers cannot hang the doctor.
"""

from __future__ import annotations

import os
from typing import Any

from hpsearch.adapters.system import ClusterInfo, NodeInfo
from hpsearch.tools.doctor_checks import FAIL, OK, WARN, Check

def local_ray_check(inventory: Any, cpus: int | None = None,
                    trial_gpus: float = 0.0) -> Check:
    """Without an address: what the local Ray that ``run`` starts would get, and whether
    a trial reserving ``trial_gpus`` could be placed on it."""
    from hpsearch.adapters.nvml import visible_indices

    cpus = cpus or os.cpu_count() or 1
    visible = visible_indices()
    gpus = inventory.count if visible is None else len(
        [i for i in visible if i < inventory.count])
    message = (f"no cluster address: `run` starts a local Ray with this machine's "
               f"{cpus} CPU(s) and {gpus} GPU(s) (not started now; `--address HOST:PORT` "
               f"or `cluster.address` checks a running cluster)")
    if trial_gpus > gpus:
        return Check("ray cluster", FAIL,
                     f"{message}; trials reserve resources.gpu={trial_gpus:g}, so none "
                     f"could start here",
                     "run on a machine with enough GPUs, join a cluster that has them "
                     "(cluster.address), or set resources.gpu: 0 to train on CPU")
    return Check("ray cluster", OK, message)


UNREACHABLE_FIX = ("start the head on the head machine with `ray start --head "
                   "--port=6379` and pass the address it prints (HOST:6379); check the "
                   "host, the port and firewalls between here and the head "
                   "(`ray status --address HOST:PORT`)")


def _gib(value: float) -> str:
    """Bytes as GiB with one decimal."""
    return f"{value / 1024 ** 3:.1f} GiB"


def node_kind(node: NodeInfo) -> str:
    """``spot``, ``on-demand`` or ``undeclared``, with ``instance X`` when declared."""
    from hpsearch.money import nodekinds

    kind = nodekinds.parse_node(node.as_ray_node())
    text = {True: "spot", False: "on-demand", None: "undeclared kind"}[kind.spot]
    if kind.instance:
        text += f", instance {kind.instance}"
    return text


def cluster_checks(info: ClusterInfo, catalog: Any = None, config: Any = None) -> list[Check]:
    """The cluster's reachability and resources, then one check per alive node.

    A node declares its kind with the custom resources ``hps_spot`` or
    ``hps_on_demand`` and ``hps_instance=<catalogue row>`` (see
    :mod:`hpsearch.money.nodekinds`). A node that declares none runs any trial, priced at
    ``pricing.instance``, as long as no node declares a kind; once some node does,
    trials ask for their kind and an undeclared node gets none.
    """
    from hpsearch.money import nodekinds

    if info.error:
        return [Check("ray cluster", FAIL, f"cannot reach the Ray cluster at {info.address}: "
                                           f"{info.error}", UNREACHABLE_FIX)]
    res = info.resources
    alive = [n for n in info.nodes if n.alive]
    dead = len(info.nodes) - len(alive)
    totals = (f"CPU {res.get('CPU', 0):g}, GPU {res.get('GPU', 0):g}, memory "
              f"{_gib(res.get('memory', 0))}")
    checks = [Check("ray cluster", OK,
                    f"{info.address}: {len(alive)} alive node(s)"
                    f"{f', {dead} dead' if dead else ''}; {totals} ({info.seconds:.1f} s)")]
    kinds = [nodekinds.parse_node(n.as_ray_node()) for n in alive]
    declared = nodekinds.declared(kinds)
    checks += [_node_check(node, kind, declared, catalog)
               for node, kind in zip(alive, kinds)]
    if config is not None:
        fit = _fit_check(config, info)
        if fit is not None:
            checks.append(fit)
    return checks


def _node_check(node: Any, kind: Any, declared: bool, catalog: Any) -> Check:
    """One alive node: its kind and resources, whether trials are placed on it
    (``declared``: some node declares its kind) and whether its instance can be priced."""
    from hpsearch.money import nodekinds

    name = f"ray node {node.address} ({node.node_id[:8]})"
    own = (f"CPU {node.resources.get('CPU', 0):g}, GPU {node.resources.get('GPU', 0):g}")
    text = f"{node_kind(node)}; {own}"
    if kind.spot is None and declared:
        return Check(
            name, WARN, f"{text}: other nodes declare their kind, so no trial is "
                        "placed on this one",
            f"start it with `--resources '{{\"{nodekinds.ON_DEMAND}\": 1000}}'` (or "
            f"{nodekinds.SPOT}), plus `\"{nodekinds.INSTANCE_PREFIX}<catalogue row>\": "
            f"1000` to price it")
    if kind.spot is None and not kind.instance:
        text += (": runs any trial at the configured price (no node declares "
                 f"{nodekinds.SPOT}/{nodekinds.ON_DEMAND})")
    if kind.instance and catalog is not None:
        from hpsearch.errors import ConfigError

        try:
            catalog.lookup(kind.instance)
        except ConfigError as exc:
            return Check(
                name, FAIL, f"{text}: its instance cannot be priced: {exc.reason}",
                "declare a catalogue row (`python -m hpsearch catalog` lists them) or "
                "add the row with pricing.catalog")
    return Check(name, OK, text)


def _fit_check(config: Any, info: ClusterInfo) -> Check | None:
    """A failed check when no node of the cluster is large enough for one trial."""
    from hpsearch.core.placement import check_fits
    from hpsearch.errors import ConfigError

    try:
        check_fits(config, [n.as_ray_node() for n in info.nodes])
    except ConfigError as exc:
        return Check("trial fits", FAIL, str(exc),
                     "lower resources.cpu / resources.gpu, or add a node that large")
    return None

