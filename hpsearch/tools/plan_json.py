"""``hpsearch plan --json``: a :class:`~hpsearch.tools.plan.Plan` as plain data.

Pure module: bytes and seconds unformatted, every offer judged, the recommendation per
currency.
"""

from __future__ import annotations

from typing import Any

from hpsearch.tools.plan import Plan
from hpsearch.tools.plan_memory import HEADROOM, LIGHTNING_PRECISION, MIB
from hpsearch.tools.plan_offers import PlanRow, gpu_part_only, owned
from hpsearch.tools.plan_speed import STARTUP_S


def _row_json(row: PlanRow) -> dict[str, Any]:
    """One catalogue offer as judged."""
    o = row.offer
    return {
        "instance": o.key, "gpu": o.gpu_model, "gpu_count": o.gpu_count,
        "gpu_memory_gb": o.gpu_memory_gb, "fits": row.fits,
        "available_bytes": None if row.available_mib is None else row.available_mib * MIB,
        "epoch_s": row.epoch_s, "trial_s": row.trial_s, "billed_s": row.billed_s,
        "spot_billed_s": row.spot_billed_s, "share": row.share,
        "on_demand_cost": row.on_demand_cost, "spot_cost": row.spot_cost,
        "spot_factor": row.spot_factor, "currency": o.currency,
        "billing_granularity_s": o.billing_granularity_s, "min_billing_s": o.min_billing_s,
        "gpu_price_only": gpu_part_only(o), "vm_missing": row.vm_missing,
        "owned": owned(o), "why": row.why or None, "nodes": row.nodes,
        "slots": row.slots, "rented_s": row.wall_s, "idle_cost": row.idle_cost,
        "idle_share": row.idle_share,
    }


def to_json(plan: Plan) -> dict[str, Any]:
    """The plan as plain data (``plan --json``): bytes and seconds unformatted.

    ``rows`` holds every catalogue GPU offer judged, those that fit first (cheapest
    first, as printed), then those too small (``fits: false``, ``why``);
    ``recommendation`` maps each currency to the cheapest row that fits and has a cost.
    """
    p = plan.probe
    return {
        "name": plan.name,
        "trainable": plan.trainable,
        "point": plan.point,
        "params": dict(p.params),
        "precision": plan.precision,
        "lightning_precision": LIGHTNING_PRECISION[plan.precision],
        "optimizer": plan.optimizer_note,
        "batch_size": p.batch_size,
        "memory": _memory_json(plan),
        "probe": _probe_json(plan),
        "throughput": None if plan.throughput is None else {
            "samples_per_s": plan.throughput.samples_per_s,
            "gpu": plan.throughput.model},
        "trials": plan.trials,
        "epochs": plan.epochs,
        "startup_s": STARTUP_S + p.setup_s,
        "gpus_per_trial": plan.gpus_per_trial,
        "currency_filter": plan.currency_filter,
        "rows": [_row_json(r) for r in [*plan.rows, *plan.too_small]],
        "cpu_reference": _cpu_json(plan),
        "recommendation": _recommendations_json(plan),
        "budget": None if plan.budget is None else {"max_cost": plan.budget[0],
                                                    "currency": plan.budget[1]},
        "notes": list(plan.notes),
    }


def _memory_json(plan: Plan) -> dict[str, Any]:
    """The memory estimate of one trial, part by part, in bytes."""
    m = plan.memory
    return {
        "n_params": m.n_params, "n_trainable": m.n_trainable,
        "weights_bytes": m.weights_bytes, "gradients_bytes": m.gradients_bytes,
        "optimizer_bytes": m.optimizer_bytes, "ddp_bytes": m.ddp_bytes,
        "activations_bytes": m.activations_bytes,
        "transient_bytes": m.transient_bytes,
        "cuda_context_bytes": m.cuda_context_bytes,
        "training_bytes": m.training_bytes, "total_bytes": m.total_bytes,
        "headroom": HEADROOM,
    }


def _probe_json(plan: Plan) -> dict[str, Any]:
    """What the CPU probe measured."""
    p = plan.probe
    return {
        "threads": p.threads, "measured_batches": p.measured_batches,
        "train_step_s": p.train_step_s, "val_step_s": p.val_step_s,
        "train_batches": p.train_batches, "val_batches": p.val_batches,
        "train_samples": p.train_samples, "setup_s": p.setup_s,
        "cpu_epoch_s": p.cpu_epoch_s, "cpu_gflops": p.cpu_gflops,
    }


def _cpu_json(plan: Plan) -> dict[str, Any] | None:
    """The search on this machine's CPU, for reference; None without its row."""
    if plan.cpu_row is None:
        return None
    key, cost, cur = plan.cpu_row
    return {"instance": key, "epoch_s": plan.probe.cpu_epoch_s, "cost": cost,
            "currency": cur}


def _recommendations_json(plan: Plan) -> dict[str, dict[str, Any]]:
    """``{currency: the cheapest rentable row that fits}``."""
    return {cur: {"instance": row.offer.key, "gpu": row.offer.gpu_model, "kind": kind,
                  "cost": cost, "on_demand_cost": row.on_demand_cost,
                  "spot_cost": row.spot_cost, "currency": cur}
            for cur, (row, cost, kind) in plan.recommendations().items()}
