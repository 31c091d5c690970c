"""The report's summary of a study: the best trial, counts by state, the money (spent,
kept, wasted, idle; the budget used; the savings estimates), preemptions and pauses, GPU
use, and the checkpoints' storage money.

Pure module. Money comes from the study's ``money`` attribute, the ledger's statement
(see :mod:`hpsearch.money.statement` and :mod:`hpsearch.report.node_money`); a study
without it (written before node billing) is reported from its trials' costs alone, with
no idle figure (:mod:`hpsearch.report.savings`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from hpsearch import keys
from hpsearch.money import storage as storage_money
from hpsearch.recovery import checkpoint_usage
from hpsearch.report import gpuuse
from hpsearch.report.curves import METHOD_CURVE
from hpsearch.report.node_money import METHOD_IDLE, node_money, node_rows, node_savings
from hpsearch.report.rows import STATES
from hpsearch.report.savings import (savings_vs_no_pruning, savings_vs_on_demand,
                                     savings_vs_on_demand_without_pruning)
from hpsearch.scalars import finite as _finite
from hpsearch.spec.objective import better


def study_mode(study: Mapping[str, Any]) -> str:
    """``max`` or ``min``: the config's objective mode, else the study's direction."""
    config = (study.get("user_attrs") or {}).get(keys.ATTR_CONFIG) or {}
    mode = (config.get("objective") or {}).get("mode")
    if mode in ("max", "min"):
        return mode
    return "min" if str(study.get("direction", "")).lower().startswith("min") else "max"


def _currency(study_attrs: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The run's currency: its price's, else the first trial's, else its config's."""
    price = study_attrs.get(keys.ATTR_PRICE) or {}
    if price.get("currency"):
        return price["currency"]
    for row in rows:
        if row["currency"]:
            return row["currency"]
    pricing = (study_attrs.get(keys.ATTR_CONFIG) or {}).get("pricing") or {}
    return pricing.get("currency")


def summarise(rows: Sequence[Mapping[str, Any]], study: Mapping[str, Any],
              ratios: Mapping[str, float | None], front: Sequence[int]) -> dict[str, Any]:
    """The report's summary.

    Keys: ``study``, ``metric``, ``mode``, ``currency``, ``instance``, ``spot``,
    ``max_epochs``; ``n_trials`` and ``n_by_state``; ``best_trial``, ``best_value``,
    ``best_params``, ``best_epochs``, ``best_cost`` (the best COMPLETE trial, lowest
    number on ties; None if none completed); the money (see :func:`money_summary`);
    ``pareto_front`` (COMPLETE trials) and ``pareto_front_label`` (``"<metric> vs
    cost"``); ``preemptions``; the pauses (see :func:`pause_summary`);
    ``idle_gpu_cost`` (money paid while trials' GPUs ran no kernel, an estimate; None
    when no trial sampled a GPU), ``gpu_util_mean`` (cost-weighted over GPU trials) and
    ``idle_gpu_cost_method``.
    """
    attrs = study.get("user_attrs") or {}
    config = attrs.get(keys.ATTR_CONFIG) or {}
    price = attrs.get(keys.ATTR_PRICE) or {}
    mode = study_mode(study)
    metric = (config.get("objective") or {}).get("metric") or "value"
    return {
        "study": study.get("name"),
        "metric": metric,
        "mode": mode,
        "currency": _currency(attrs, rows),
        "instance": price.get("instance"),
        "spot": price.get("spot"),
        "max_epochs": config.get("max_epochs"),
        "n_trials": len(rows),
        "n_by_state": _count_by_state(rows),
        **_best_summary(rows, mode),
        **money_summary(rows, study, ratios),
        "preemptions": sum(r["preemptions"] for r in rows),
        **pause_summary(rows),
        "pareto_front": list(front),
        "pareto_front_label": f"{metric} vs cost",
        "best_vs_cost_method": METHOD_CURVE,
        **_gpu_summary(rows),
    }


def _count_by_state(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Trials per state: every state of :data:`STATES` (0 when none), then any other."""
    by_state = dict.fromkeys(STATES, 0)
    for row in rows:
        by_state[row["state"]] = by_state.get(row["state"], 0) + 1
    return by_state


def _best_summary(rows: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any]:
    """``best_trial``, ``best_value``, ``best_params``, ``best_epochs``, ``best_cost``:
    the best COMPLETE trial (the first of equals), all None if none completed."""
    best = None
    for row in rows:
        if row["state"] == "COMPLETE" and row["value"] is not None and (
                best is None or better(row["value"], best["value"], mode)):
            best = row
    return {
        "best_trial": best["number"] if best else None,
        "best_value": best["value"] if best else None,
        "best_params": dict(best["params"]) if best else None,
        "best_epochs": best["epochs"] if best else None,
        "best_cost": best["cost"] if best else None,
    }


def _gpu_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``idle_gpu_cost``, ``gpu_util_mean`` (over the trials that sampled a GPU, None
    when none did) and ``idle_gpu_cost_method``."""
    gpu_rows = [r for r in rows if r["idle_gpu_cost"] is not None]
    gpu_cost = sum(r["cost"] or 0.0 for r in gpu_rows)
    return {
        "idle_gpu_cost": (sum(r["idle_gpu_cost"] for r in gpu_rows)
                          if gpu_rows else None),
        "gpu_util_mean": (sum((r["cost"] or 0.0) * r["gpu_util_mean"] for r in gpu_rows)
                          / gpu_cost if gpu_cost > 0 else None),
        "idle_gpu_cost_method": gpuuse.METHOD_IDLE,
    }


def pause_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The pauses of a run: ``paused_trials`` (trials paused at least once),
    ``pauses`` (pauses in all), ``resumes`` (pauses undone: the trial was picked to
    train on) and ``ended_paused`` (trials whose last pause was never undone: pruned
    where they paused when the run ended, or still paused in a run that goes on)."""
    paused = [r for r in rows if r["paused_at"]]
    return {"paused_trials": len(paused),
            "pauses": sum(len(r["paused_at"]) for r in paused),
            "resumes": sum(r["resumes"] for r in paused),
            "ended_paused": sum(len(r["paused_at"]) > r["resumes"] for r in paused)}


def money_summary(rows: Sequence[Mapping[str, Any]], study: Mapping[str, Any],
                  ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """The summary's money: ``total_cost`` (what the nodes billed), ``kept_cost``,
    ``wasted_cost``, ``idle_cost`` (kept apart: total = kept + wasted + idle),
    ``node_billed_s``, ``billed_s`` (the trials' seconds), ``nodes`` (see
    :func:`~hpsearch.report.node_money.node_rows`), ``money_method``,
    ``budget_max_cost`` and ``budget_used`` (total / budget.max_cost), and the estimates
    ``savings_vs_no_pruning``, ``savings_vs_on_demand`` and
    ``savings_vs_on_demand_without_pruning``.

    From the study's ``money`` attribute when it has one; otherwise (a study from
    before node billing) from the trials' costs, with ``idle_cost`` and ``nodes``
    unknown (None, []) and the per-trial estimates.
    """
    config = (study.get("user_attrs") or {}).get(keys.ATTR_CONFIG) or {}
    max_epochs = config.get("max_epochs")
    cap = _finite((config.get("budget") or {}).get("max_cost"))
    money = node_money(study)
    trial_s = sum(r["billed_s"] or 0.0 for r in rows)
    if money is None:
        total = sum(r["cost"] or 0.0 for r in rows)
        wasted = sum(r["wasted_cost"] or 0.0 for r in rows)
        out = {"total_cost": total, "kept_cost": total - wasted, "wasted_cost": wasted,
               "idle_cost": None, "node_billed_s": None, "billed_s": trial_s, "nodes": [],
               "money_method": "the trials' own costs (a study from before node billing: "
                               "no idle figure)",
               "savings_vs_no_pruning": savings_vs_no_pruning(rows, max_epochs),
               "savings_vs_on_demand": savings_vs_on_demand(rows, ratios),
               "savings_vs_on_demand_without_pruning":
                   savings_vs_on_demand_without_pruning(rows, max_epochs, ratios)}
    else:
        def saved(pruning: bool, on_demand: bool) -> dict[str, Any]:
            return node_savings(money, rows, max_epochs, ratios, pruning=pruning,
                                on_demand=on_demand)

        nodes = node_rows(money)
        out = {"total_cost": money["total"], "kept_cost": money["kept"],
               "wasted_cost": money["wasted"], "idle_cost": money["idle"],
               "node_billed_s": sum(n["billed_s"] or 0.0 for n in nodes),
               "billed_s": trial_s, "nodes": nodes,
               "money_method": str(money.get("method") or ""),
               "idle_cost_method": METHOD_IDLE,
               "savings_vs_no_pruning": saved(True, False),
               "savings_vs_on_demand": saved(False, True),
               "savings_vs_on_demand_without_pruning": saved(True, True)}
    out["budget_max_cost"] = cap
    out["budget_used"] = out["total_cost"] / cap if cap else None
    return out


def storage_summary(rows: list[dict[str, Any]], records: Iterable[Mapping[str, Any]],
                    study: Mapping[str, Any]) -> dict[str, Any]:
    """Each row's ``storage_cost`` (set in place) and the summary's storage figures:
    ``storage_cost``, ``storage_requests_cost``, ``storage_per_month_kept``,
    ``storage_currency``, ``storage_price`` (the row's key and source),
    ``checkpoint_storage``, ``checkpoint_bytes``, ``checkpoint_s``, ``checkpoints``,
    ``checkpoint_s_mean`` and ``storage_method`` (see
    :mod:`hpsearch.money.storage`). Money is None without a recorded storage price."""
    attrs = study.get("user_attrs") or {}
    price = storage_money.StoragePrice.from_dict(attrs.get(keys.ATTR_STORAGE_PRICE) or {})
    by_number = {int(r["number"]): checkpoint_usage.from_attrs(r.get("user_attrs") or {})
                 for r in records}
    total = requests = kept = 0.0
    for row in rows:
        use = by_number.get(row["number"])
        if use is None or price is None:
            continue
        cost = storage_money.storage_cost(use, price)
        row["storage_cost"] = cost.total
        total += cost.total
        requests += cost.requests
        kept += cost.per_month_kept
    count = sum(r["checkpoints"] for r in rows)
    seconds = sum(r["checkpoint_s"] or 0.0 for r in rows)
    return {
        "storage_cost": total if price is not None else None,
        "storage_requests_cost": requests if price is not None else None,
        "storage_per_month_kept": kept if price is not None else None,
        "storage_currency": price.currency if price is not None else None,
        "storage_price": ({"row": price.key, "per_gb_month": price.per_gb_month,
                           "source": price.source, "snapshot_date": price.snapshot_date}
                          if price is not None else None),
        "checkpoint_storage": attrs.get(keys.ATTR_CHECKPOINT_STORAGE),
        "checkpoints": count,
        "checkpoint_bytes": sum(r["checkpoint_bytes"] or 0.0 for r in rows),
        "checkpoint_stored_bytes": sum(r["checkpoint_stored_bytes"] or 0.0 for r in rows),
        "checkpoint_s": seconds,
        "checkpoint_s_mean": seconds / count if count else None,
        "storage_method": storage_money.METHOD,
    }
