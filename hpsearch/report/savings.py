"""What pruning and spot pricing saved, estimated from the trials' own costs (a study
written before node billing; :mod:`hpsearch.report.node_money` estimates from the
nodes' bills where the study has them).

Pure module. Every figure here is an *estimate* and says how it was made (its
``method``): the savings against training every trial to the end, and against running
on on-demand instances.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from hpsearch.errors import ConfigError
from hpsearch.money import catalog as catalog_mod

METHOD_NO_PRUNING = (
    "estimate: each PRUNED trial's cost scaled linearly to max_epochs "
    "(cost x max_epochs / epochs it ran); every other trial's cost as billed. Linear "
    "scaling also repeats a trial's start-up time, so it overstates a little")
METHOD_ON_DEMAND = (
    "estimate: each spot trial's cost multiplied by its instance's on-demand/spot price "
    "ratio in the price catalogue; on-demand trials' costs as billed")
METHOD_BOTH = (
    "estimate: both of the above applied to each trial (scaled to max_epochs, then "
    "re-priced on demand)")


def estimate(total: float | None, baseline: float | None, method: str,
             **extra: Any) -> dict[str, Any]:
    """An estimate as the report shows it: ``{"estimate": True, "amount" (baseline -
    total), "baseline_cost", "share" (amount / baseline), "method", **extra}``; amount
    and share None when either figure is unknown."""
    amount = None if total is None or baseline is None else baseline - total
    share = amount / baseline if amount is not None and baseline else None
    return {"estimate": True, "amount": amount, "baseline_cost": baseline, "share": share,
            "method": method, **extra}


def no_pruning_factor(row: Mapping[str, Any], max_epochs: int | None) -> float | None:
    """How much more a trial would have cost trained to ``max_epochs`` (1 if it was).

    PRUNED trials that ran ``e`` epochs scale by ``max_epochs / e``; other trials by 1.
    None when it cannot be estimated (unknown ``max_epochs``, a pruned trial with no
    epoch).
    """
    if row["state"] != "PRUNED":
        return 1.0
    if not max_epochs or row["epochs"] <= 0:
        return None
    return max(1.0, max_epochs / row["epochs"])


def savings_vs_no_pruning(rows: Sequence[Mapping[str, Any]],
                          max_epochs: int | None) -> dict[str, Any]:
    """Estimated money pruning saved: against training every trial to the end.

    Returns ``{"estimate": True, "amount", "baseline_cost", "share", "method",
    "n_scaled", "n_not_scaled"}``: ``baseline_cost`` is every trial's cost with each
    PRUNED trial's scaled linearly to ``max_epochs``, ``amount`` what the study saved
    against it, ``share`` that amount over the baseline. With ``max_epochs`` unknown,
    amount and baseline are None and the method says why.
    """
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    if not max_epochs:
        return estimate(total, None, "not estimated: the study records no max_epochs",
                         n_scaled=0, n_not_scaled=0)
    baseline = 0.0
    scaled = not_scaled = 0
    for row in costed:
        factor = no_pruning_factor(row, max_epochs)
        if factor is None:
            not_scaled += 1
            factor = 1.0
        elif row["state"] == "PRUNED":
            scaled += 1
        baseline += row["cost"] * factor
    method = METHOD_NO_PRUNING
    if not_scaled:
        method += f"; {not_scaled} pruned trial(s) without a finished epoch counted as billed"
    return estimate(total, baseline, method, n_scaled=scaled, n_not_scaled=not_scaled)


def on_demand_ratios(instances: Iterable[str],
                     catalog: catalog_mod.Catalog) -> dict[str, float | None]:
    """``{instance: on-demand price / spot price}`` from the catalogue.

    None for an instance the catalogue does not know or that lacks either price.
    """
    out: dict[str, float | None] = {}
    for name in instances:
        try:
            offer = catalog.lookup(name)
        except ConfigError:
            out[name] = None
            continue
        if offer.on_demand_per_hour is None or not offer.spot_per_hour:
            out[name] = None
        else:
            out[name] = offer.on_demand_per_hour / offer.spot_per_hour
    return out


def on_demand_cost(row: Mapping[str, Any],
                   ratios: Mapping[str, float | None]) -> float | None:
    """What a trial's billed money would have been on demand: its spot-billed part times
    the catalogue's on-demand/spot ratio, plus the part already billed on demand; None if
    it has spot money on an instance without a ratio."""
    spot_cost = row.get("spot_cost") or 0.0
    if spot_cost <= 0:
        return row["cost"]
    ratio = ratios.get(row["instance"] or "")
    if ratio is None:
        return None
    return row["cost"] - spot_cost + spot_cost * ratio


def savings_vs_on_demand(rows: Sequence[Mapping[str, Any]],
                         ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """Estimated money spot pricing saved: against running every trial on demand.

    Returns ``{"estimate": True, "amount", "baseline_cost", "share", "method",
    "n_repriced", "not_repriced"}``: the baseline re-prices each spot trial with its
    instance's on-demand/spot ratio (``ratios``, see :func:`on_demand_ratios`); trials
    already on demand count as billed, so a study without spot trials saves 0. Spot
    trials on instances without a ratio are counted as billed and listed in
    ``not_repriced``.
    """
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    baseline = 0.0
    repriced = 0
    missing: set[str] = set()
    for row in costed:
        on_demand = on_demand_cost(row, ratios)
        if on_demand is None:
            missing.add(str(row["instance"]))
            on_demand = row["cost"]
        elif (row.get("spot_cost") or 0.0) > 0:
            repriced += 1
        baseline += on_demand
    method = METHOD_ON_DEMAND
    if missing:
        method += (f"; spot trials on {', '.join(sorted(missing))} (no on-demand price in "
                   f"the catalogue) counted as billed")
    return estimate(total, baseline, method, n_repriced=repriced,
                     not_repriced=sorted(missing))


def savings_vs_on_demand_without_pruning(rows: Sequence[Mapping[str, Any]],
                                         max_epochs: int | None,
                                         ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """Both estimates at once: every trial trained to the end on on-demand instances."""
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    if not max_epochs:
        return estimate(total, None, "not estimated: the study records no max_epochs")
    baseline = sum((on_demand_cost(r, ratios) or r["cost"])
                   * (no_pruning_factor(r, max_epochs) or 1.0) for r in costed)
    return estimate(total, baseline, METHOD_BOTH)
