"""The lines ``hpsearch plan`` prints: the memory estimate part by part, where the time
comes from, the table of GPUs that fit, and the recommendation per currency.

Pure module: it formats a :class:`~hpsearch.tools.plan.Plan`; the table's layout is
the caller's (``table`` renders a header and rows).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from hpsearch.money.fmt import fmt_money
from hpsearch.tools.plan import Plan
from hpsearch.tools.plan_memory import GIB, HEADROOM, LIGHTNING_PRECISION, MIB
from hpsearch.tools.plan_offers import PlanRow, gpu_part_only, owned
from hpsearch.tools.plan_speed import GPU_EFFICIENCY, STARTUP_S, TRAIN_STEP_FLOOR_S


def fmt_bytes(n: float) -> str:
    """``512 B``, ``12.3 KiB``, ``45.6 MiB``, ``7.89 GiB``."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float | None) -> str:
    """``0.254 s``, ``18.0 s``, ``3.0 min``, ``2.5 h``; ``-`` when unknown."""
    if s is None:
        return "-"
    if s < 1:
        return f"{s:.3g} s"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _format_params(params: Mapping[str, Any]) -> str:
    """``lr=0.001, hidden=64``, or ``(no params)``."""

    def one(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        return str(value)

    return ", ".join(f"{k}={one(v)}" for k, v in params.items()) or "(no params)"


def render(plan: Plan, table: Callable[[list[str], list[list[str]]], list[str]]
           ) -> list[str]:
    """The lines ``plan`` prints; ``table`` renders a header and rows."""
    p = plan.probe
    point = ("midpoint of each range, first categorical choice" if plan.point == "mid"
             else "upper end of each range, largest numeric choice")
    lines = [
        f"Plan for '{plan.name}' ({plan.trainable})",
        f"Configuration probed ({point}): {_format_params(p.params)}",
        f"Model: {p.n_params:,} parameters ({p.n_trainable:,} trainable); optimizer "
        f"{plan.optimizer_note}",
    ]
    lines += _memory_lines(plan)
    lines.append(_time_line(plan))
    epochs_from = ("--epochs" if plan.epochs_given else
                   "max_epochs, no trial pruned: --epochs to assume fewer")
    lines.append(
        f"Search: {plan.trials} trial(s) x {plan.epochs} epoch(s) ({epochs_from}) + "
        f"{fmt_seconds(STARTUP_S + p.setup_s)} start-up per trial, "
        f"{plan.gpus_per_trial:g} GPU(s) per trial")
    for note in plan.notes:
        lines.append(f"Note: {note}")
    lines += _table_lines(plan, table)
    if plan.too_small:
        names = []
        for row in plan.too_small:
            if row.why == "memory":
                usable = fmt_bytes(row.available_mib * MIB) if row.available_mib else "?"
                names.append(f"{row.offer.key} ({usable} usable)")
            else:
                names.append(f"{row.offer.key} ({row.why})")
        lines.append(f"Too small for this trial: {', '.join(names)}")
    if plan.cpu_row is not None:
        key, cost, cur = plan.cpu_row
        lines.append(f"This machine's CPU, for reference (measured, {p.threads} thread(s)): "
                     f"{fmt_seconds(p.cpu_epoch_s)}/epoch; the search about "
                     f"{fmt_money(cost)} {cur} at {key}")
    lines += _recommendation_lines(plan)
    lines.append("Estimates, not quotes: check the catalogue's prices (python -m hpsearch "
                 "catalog) and measure a trial on the chosen GPU.")
    return lines


def _memory_lines(plan: Plan) -> list[str]:
    """The memory estimate of one trial, part by part."""
    p, m = plan.probe, plan.memory
    lines = [
        f"Memory per trial{' per GPU' if plan.gpus_per_trial > 1 else ''} at "
        f"{plan.precision} ({LIGHTNING_PRECISION[plan.precision]}), batch "
        f"{p.batch_size if p.batch_size is not None else '?'}:",
        f"  weights       {fmt_bytes(m.weights_bytes):>10}  ({p.n_params:,} x "
        f"{p.weight_bytes:g} B)",
        f"  gradients     {fmt_bytes(m.gradients_bytes):>10}  ({p.n_trainable:,} x "
        f"{p.weight_bytes:g} B)",
        f"  optimizer     {fmt_bytes(m.optimizer_bytes):>10}",
    ]
    if m.ddp_bytes:
        lines.append(f"  ddp buckets   {fmt_bytes(m.ddp_bytes):>10}  (a copy of the "
                     "gradients)")
    lines += [
        f"  activations   {fmt_bytes(m.activations_bytes):>10}  (tensors saved for "
        f"backward in one step, measured on CPU"
        f"{' under bf16 autocast' if plan.precision != 'fp32' else ''})",
        f"  transient     {fmt_bytes(m.transient_bytes):>10}  (the largest of them again: "
        "a layer's output while its input is held)",
        f"  cuda context  {fmt_bytes(m.cuda_context_bytes):>10}  (fixed allowance)",
        f"  total         {fmt_bytes(m.total_bytes):>10}  (a GPU fits with this at most "
        f"{HEADROOM:.0%} of its memory)",
    ]
    return lines


def _time_line(plan: Plan) -> str:
    """Where the time estimate comes from: a throughput given, or this CPU scaled."""
    p = plan.probe
    if plan.throughput is not None:
        on = f" on {plan.throughput.model}" if plan.throughput.model else ""
        scaled = (" and scaled to the other GPUs by nominal throughput"
                  if plan.throughput.model else ", taken as is for every GPU")
        return (f"Time: from the throughput given, {plan.throughput.samples_per_s:g} "
                f"samples/s{on}{scaled}; {p.train_samples or '?'} training samples "
                f"per epoch, validation +{p.val_ratio:.0%} as measured on CPU")
    return (f"Time: measured on this CPU ({p.threads} thread(s), {p.measured_batches} "
            f"batch(es)): {fmt_seconds(p.train_step_s)}/train batch, "
            f"{fmt_seconds(p.val_step_s)}/val batch, {p.train_batches or '?'} + "
            f"{p.val_batches or 0} batches per epoch = {fmt_seconds(p.cpu_epoch_s)}/epoch; "
            f"GPU times scale it by matmul rate (this CPU {p.cpu_gflops:.1f} GFLOP/s "
            f"measured vs each GPU's nominal {plan.precision} rate x {GPU_EFFICIENCY:g}), "
            f"at least {TRAIN_STEP_FLOOR_S * 1000:g} ms per train batch: a rough guide; "
            "--throughput gives a measured one")


def _recommendation_lines(plan: Plan) -> list[str]:
    """The cheapest fitting offer per currency (and the whole instance when its VM is
    not priced), against the budget; or why there is none."""
    lines: list[str] = []
    recs = plan.recommendations()
    for cur, (row, cost, kind) in recs.items():
        line = (f"Recommended ({cur}): {row.offer.key} ({row.offer.gpu_model}) {kind}, "
                f"about {fmt_money(cost)} {cur} for the search"
                f"{_vm_words(row)}")
        if kind == "spot" and row.on_demand_cost is not None:
            line += f" ({fmt_money(row.on_demand_cost)} on demand)"
        lines.append(line)
        whole = plan.cheapest_whole(cur)
        if row.vm_missing and whole is not None:
            lines.append(f"  the cheapest whole instance: {whole[0].offer.key} "
                         f"({whole[0].offer.gpu_model}) {whole[2]}, about "
                         f"{fmt_money(whole[1])} {cur}, VM included")
        if plan.budget is not None and plan.budget[1] == cur:
            limit = plan.budget[0]
            verdict = "within" if cost <= limit else "OVER"
            lines.append(f"  budget.max_cost {limit:g} {cur}: {verdict}")
    if not recs and plan.rows:
        if all(owned(r.offer) for r in plan.rows):
            lines.append("No recommendation: only machines you own fit.")
        else:
            lines.append("No recommendation: no rentable GPU that fits has a time "
                         "estimate (give --throughput).")
    return lines


def _vm_words(row: PlanRow) -> str:
    """What a GPU-only row's cost says about its VM."""
    if not gpu_part_only(row.offer):
        return ""
    if row.vm_missing:
        return " plus its VM, which is billed on top and not in the catalogue"
    return " (the GPU and its VM)"


def _table_lines(plan: Plan, table: Callable[[list[str], list[list[str]]], list[str]]
                 ) -> list[str]:
    """The table of GPUs that fit, with its legend."""
    header = ["instance", "gpu", "mem_gb", "s/epoch", "s/trial", "nodes", "rented",
              "on-demand", "spot (exp.)", "idle", "cur"]
    body = []
    for row in plan.rows:
        o = row.offer
        idle = row.idle_share
        body.append([
            o.key + (" *" if row.vm_missing else "") + (" ^" if owned(o) else ""),
            f"{o.gpu_count}x {o.gpu_model}" if o.gpu_count > 1 else o.gpu_model,
            f"{o.gpu_memory_gb:g}" if o.gpu_memory_gb else "-",
            fmt_seconds(row.epoch_s) if row.epoch_s is not None else (row.why or "-"),
            fmt_seconds(row.trial_s),
            "-" if row.wall_s is None else f"{row.nodes} x {row.slots}",
            "-" if row.wall_s is None else fmt_seconds(row.wall_s)
            + (" +" if row.minimum_billed else ""),
            fmt_money(row.on_demand_cost), fmt_money(row.spot_cost),
            "-" if idle is None else f"{idle:.0%}", o.currency,
        ])
    if not body:
        return ["No catalogue GPU fits this trial"
                + (f" in {plan.currency_filter}" if plan.currency_filter else "") + "."]
    lines = ["GPUs that fit, cheapest first (whole search, billed per instance: nodes x "
             "trials at once on each, rented for the search's waves of trials; idle: the "
             "part of the bill no trial's share covers; spot includes the work preemptions "
             "are expected to lose):"]
    lines += ["  " + line for line in table(header, body)]
    if any(r.vm_missing for r in plan.rows):
        lines.append("  * the GPU's price only: the provider bills the VM around it on top, "
                     "and the catalogue does not know it")
    if any(gpu_part_only(r.offer) and not r.vm_missing for r in plan.rows):
        lines.append("  (a GPU priced apart from its VM is shown with the VM included)")
    if any(owned(r.offer) for r in plan.rows):
        lines.append("  ^ a machine you own (depreciation and power): for comparison, never "
                     "recommended")
    minimums = sorted({r.offer.min_billing_s for r in plan.rows if r.minimum_billed})
    if minimums:
        lines.append(f"  + billed at least {'/'.join(f'{m:g}' for m in minimums)} s per "
                     "instance (the offer's billing minimum, once per rental): more than "
                     "it is rented")
    return lines

