"""Money from the ledger's statement (the study's ``money`` attribute): what every node
billed, split into the trials' shares for work kept, work wasted, and idle capacity;
each rental's row and its idle money over time; and what the same nodes would have
billed without pruning or on demand (estimates).

Pure module.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from hpsearch import keys
from hpsearch.report import savings
from hpsearch.scalars import finite as _finite

METHOD_NO_PRUNING_NODES = (
    "estimate: each node rented longer by the work its PRUNED trials would have needed "
    "to reach max_epochs (each trial's share of the node x its remaining epochs x its "
    "median measured epoch time), at the packing the node showed while trials ran on it "
    "(their share-seconds over that span: the idle that goes with the work follows it), "
    "then billed with the node's granularity and minimum; trials the budget stopped are "
    "not counted (they resume), and 0 where pruning stopped nothing")
METHOD_ON_DEMAND_NODES = (
    "estimate: each spot node re-priced at its instance's on-demand price (the "
    "catalogue's on-demand/spot ratio), rented shorter by the work preemptions lost and "
    "the restarts after them (at its packing, as no preemption would have happened), "
    "billed with its granularity and minimum; on-demand nodes as billed, so a run "
    "without spot nodes saves 0; negative: spot cost more")
METHOD_BOTH_NODES = (
    "estimate: both of the above applied to each node (rented longer by its pruned "
    "trials' remaining work, shorter by its lost work and restarts, re-priced on demand)")
METHOD_IDLE = (
    "node money the trials' shares did not cover, per node: from the ledger, not an "
    "estimate (start-up, gaps between trials, capacity no trial reserved, and the "
    "billing's rounding and minimum)")


def node_money(study: Mapping[str, Any]) -> dict[str, Any] | None:
    """The study's ``money`` attribute (the ledger's statement), or None when the study
    has none (written before node billing) or it is not readable."""
    money = (study.get("user_attrs") or {}).get(keys.ATTR_MONEY)
    if not isinstance(money, Mapping) or not isinstance(money.get("nodes"), list):
        return None
    if any(_finite(money.get(k)) is None for k in ("total", "kept", "wasted", "idle")):
        return None
    return dict(money)


def node_rows(money: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per rental for the report's node table (no timeline)."""
    out = []
    for i, node in enumerate(money.get("nodes") or []):
        cost = _finite(node.get("cost")) or 0.0
        idle = _finite(node.get("idle_cost")) or 0.0
        out.append({
            "rental": i, "node": str(node.get("node", "")), "instance": node.get("instance"),
            "spot": bool(node.get("spot")), "lost": bool(node.get("lost")),
            "price_per_hour": _finite(node.get("price_per_hour")),
            "rented_s": _finite(node.get("length_s")), "billed_s": _finite(node.get("billed_s")),
            "cost": cost, "kept_cost": _finite(node.get("kept_cost")),
            "wasted_cost": _finite(node.get("wasted_cost")), "idle_cost": idle,
            "idle_share": idle / cost if cost > 0 else None,
            "trials": len(node.get("trials") or {}),
        })
    return out


def idle_over_time(money: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each rental's idle money so far against seconds since the first rental started:
    ``[{"rental", "node", "instance", "spot", "t_s": [...], "idle_cost": [...]}]``."""
    nodes = money.get("nodes") or []
    starts = [_finite(n.get("start_s")) for n in nodes]
    origin = min((t for t in starts if t is not None), default=0.0)
    out = []
    for i, node in enumerate(nodes):
        points = [(float(t), float(c)) for t, c in node.get("timeline") or []]
        out.append({"rental": i, "node": str(node.get("node", "")),
                    "instance": node.get("instance"), "spot": bool(node.get("spot")),
                    "t_s": [t - origin for t, _ in points],
                    "idle_cost": [c for _, c in points]})
    return out


def _packing(node: Mapping[str, Any]) -> float:
    """Share-seconds of trials over the span they ran on the node, in (0, 1]."""
    work, active = _finite(node.get("work_s")) or 0.0, _finite(node.get("active_s")) or 0.0
    return min(1.0, work / active) if work > 0 and active > 0 else 1.0


def _rebilled(node: Mapping[str, Any], extra_s: float, price: float) -> float:
    """The node's bill with its rental ``extra_s`` longer (or shorter), at ``price``."""
    from hpsearch.money.nodes import billed_seconds

    length = max(0.0, (_finite(node.get("length_s")) or 0.0) + extra_s)
    return billed_seconds(length, int(node.get("granularity_s") or 0),
                          int(node.get("min_billing_s") or 0)) * price / 3600.0


def _pruned_extra_s(money: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                    max_epochs: int) -> dict[int, float]:
    """Rental index -> share-seconds its PRUNED trials needed to reach ``max_epochs``
    (each trial on the last rental it ran on)."""
    last: dict[int, tuple[int, float]] = {}
    for i, node in enumerate(money.get("nodes") or []):
        for trial, share in (node.get("trials") or {}).items():
            last[int(trial)] = (i, _finite(share) or 0.0)
    extra: dict[int, float] = {}
    for row in rows:
        if row["state"] != "PRUNED" or row["number"] not in last or row["epochs"] <= 0:
            continue
        epoch_s = row.get("epoch_s") or ((row.get("billed_s") or 0.0) / row["epochs"])
        rental, share = last[row["number"]]
        remaining = max(0, max_epochs - row["epochs"])
        extra[rental] = extra.get(rental, 0.0) + share * remaining * epoch_s
    return extra


def node_savings(money: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                 max_epochs: int | None, ratios: Mapping[str, float | None], *,
                 pruning: bool, on_demand: bool) -> dict[str, Any]:
    """What the same nodes would have billed without pruning (``pruning``) and/or on
    demand (``on_demand``), against what they billed (see the ``METHOD_*_NODES``)."""
    total = _finite(money.get("total")) or 0.0
    if pruning and not max_epochs:
        return savings.estimate(total, None, "not estimated: the study records no max_epochs")
    extra = _pruned_extra_s(money, rows, max_epochs) if pruning else {}
    baseline = _finite(money.get("unplaced")) or 0.0
    missing: set[str] = set()
    repriced = 0
    for i, node in enumerate(money.get("nodes") or []):
        price = _finite(node.get("price_per_hour")) or 0.0
        packing = _packing(node)
        change = extra.get(i, 0.0) / packing
        if on_demand and node.get("spot"):
            ratio = ratios.get(str(node.get("instance") or ""))
            if ratio is None:
                missing.add(str(node.get("instance")))
            else:
                lost = (_finite(node.get("wasted_s")) or 0.0) + (
                    _finite(node.get("restart_s")) or 0.0)
                change -= lost / packing
                price *= ratio
                repriced += 1
        baseline += _rebilled(node, change, price)
    method = (METHOD_BOTH_NODES if pruning and on_demand
              else METHOD_NO_PRUNING_NODES if pruning else METHOD_ON_DEMAND_NODES)
    if missing:
        method += (f"; spot nodes of {', '.join(sorted(missing))} (no on-demand price in "
                   f"the catalogue) counted as billed")
    estimate = savings.estimate(total, baseline, method,
                                n_nodes=len(money.get("nodes") or []))
    if abs(estimate["amount"]) < 1e-12:
        estimate["amount"], estimate["share"] = 0.0, 0.0
    if on_demand:
        estimate.update(n_repriced=repriced, not_repriced=sorted(missing))
    if pruning:
        estimate["n_scaled"] = sum(1 for r in rows if r["state"] == "PRUNED")
    return estimate
