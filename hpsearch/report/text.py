"""The report in words: numbers formatted for reading, the summary and the methods as
(label, text) pairs, and the node and trial tables as text cells; shared by the HTML
and Markdown writers.

Pure module.
"""

from __future__ import annotations

import re
from typing import Any

from hpsearch.money.fmt import fmt_money
from hpsearch.report.report import Report


def fmt_value(value: Any) -> str:
    """A metric or parameter value: floats to 4 significant digits, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_seconds(seconds: float | None) -> str:
    """``1234``, ``12.3``, ``0.12``: whole seconds from 100 on, 3 significant digits below
    (a short trial's tenth of a second does not read as 0); ``-`` when unknown."""
    if seconds is None:
        return "-"
    return f"{seconds:.0f}" if abs(seconds) >= 100 or seconds == 0 else f"{seconds:.3g}"


def fmt_share(share: float | None) -> str:
    """``26.7%``; small shares keep two significant digits (``0.0068%``)."""
    if share is None:
        return "-"
    if share == 0 or abs(share) >= 0.001:
        return f"{100 * share:.1f}%"
    return f"{100 * share:.2g}%"


def fmt_params(params: dict[str, Any]) -> str:
    """``lr=0.01, hidden=64``: the parameters a trial has (absent ones are left out)."""
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in params.items())


#: A decimal number in running text: not part of a word, a version or a fraction.
_DECIMAL = re.compile(r"(?<![\w.])-?(?:\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)"
                      r"(?!\w|\.\d)")


def _short_number(match: re.Match) -> str:
    text = match.group(0)
    mantissa = re.split(r"[eE]", text)[0]
    digits = mantissa.replace("-", "").replace(".", "").lstrip("0")
    if len(digits) <= 4:
        return text
    value = float(text)
    # Never drop integer digits for a shorter form: 12345.678 reads as 12346.
    return f"{value:.0f}" if 1e3 <= abs(value) < 1e15 and "e" not in text.lower() \
        else f"{value:.4g}"


def fmt_reason(text: str | None) -> str:
    """A stop reason or error for a table: decimals in it cut to 4 significant digits.

    ``asha: stopped at epoch 1/4 with val_acc=0.0833333333`` reads ``...=0.08333``;
    integers, fractions (``1/4``), money with few digits and version strings are kept.
    """
    if not text:
        return ""
    return _DECIMAL.sub(_short_number, str(text))


def estimate_text(estimate: dict[str, Any], currency: str | None) -> str:
    if estimate["amount"] is None:
        return "not estimated"
    if estimate["amount"] < 0:
        return (f"none: it cost {fmt_money(-estimate['amount'], currency)} more than "
                f"{fmt_money(estimate['baseline_cost'], currency)}")
    return (f"{fmt_money(estimate['amount'], currency)} "
            f"({fmt_share(estimate['share'])} of "
            f"{fmt_money(estimate['baseline_cost'], currency)})")


def _spent_text(summary: dict[str, Any], currency: str | None) -> str:
    """``0.41 USD: work kept 0.2, wasted 0.01, idle 0.2``, idle only when known."""
    parts = [f"work kept {fmt_money(summary['kept_cost'], currency)}",
             f"wasted {fmt_money(summary['wasted_cost'], currency)}"]
    if summary.get("idle_cost") is not None:
        parts.append(f"idle {fmt_money(summary['idle_cost'], currency)}")
    return f"{fmt_money(summary['total_cost'], currency)}: {', '.join(parts)}"


def front_label(report: Report) -> str:
    """``val_loss vs cost``: what the Pareto front trades off."""
    return report.summary.get("pareto_front_label") or f"{report.metric} vs cost"


def summary_lines(report: Report) -> list[tuple[str, str]]:
    """The summary as (label, text) pairs, shared by the HTML and Markdown writers."""
    s, cur = report.summary, report.currency
    states = ", ".join(f"{n} {state.lower()}" for state, n in s["n_by_state"].items() if n)
    if s["best_trial"] is not None:
        best = (f"trial {s['best_trial']}: {s['metric']} = {fmt_value(s['best_value'])} "
                f"after {s['best_epochs']} epoch(s), cost {fmt_money(s['best_cost'], cur)} "
                f"({fmt_params(s['best_params'])})")
    else:
        best = "no completed trial"
    budget = "no budget"
    if s["budget_max_cost"] is not None:
        budget = (f"{fmt_share(s['budget_used'])} of budget.max_cost "
                  f"{fmt_money(s['budget_max_cost'], cur)}")
    instance = s["instance"] or "-"
    if s["spot"]:
        instance += " (spot)"
    front = ", ".join(f"trial {n}" for n in s["pareto_front"])
    if not front:
        front = "- (no completed trial)" if s["best_trial"] is None else "-"
    return [
        ("Study", f"{s['study']} ({s['metric']}, {s['mode']}imise)"),
        ("Trials", f"{s['n_trials']}" + (f" ({states})" if states else "")),
        ("Best trial", best),
        ("Spent", _spent_text(s, cur)),
        ("Work kept", fmt_money(s["kept_cost"], cur) + " (the trials' shares of their "
                                                      "nodes, less what was lost)"),
        ("Checkpoint storage", _storage_text(s)),
        ("Wasted", fmt_money(s["wasted_cost"], cur) + " (work lost to failures, "
                                                      "preemptions and interruptions; "
                                                      "part of spent)"),
        ("Idle", (fmt_money(s["idle_cost"], cur) + " (paid capacity no trial used; part "
                  "of spent)") if s.get("idle_cost") is not None
         else "unknown (a study from before node billing)"),
        ("Budget used", budget),
        ("Billed time", f"{fmt_seconds(s['billed_s'])} s of trial time"
         + (f"; {fmt_seconds(s['node_billed_s'])} s of node time"
            if s.get("node_billed_s") is not None else "")),
        ("Preemptions", str(s["preemptions"])),
        ("Pauses", pauses_text(s)),
        ("Instance", instance),
        ("Saved by pruning (estimate)", estimate_text(s["savings_vs_no_pruning"], cur)),
        ("Saved by spot pricing (estimate)", estimate_text(s["savings_vs_on_demand"], cur)),
        ("Saved against on-demand without pruning (estimate)",
         estimate_text(s["savings_vs_on_demand_without_pruning"], cur)),
        (f"Pareto front ({front_label(report)})", front),
        ("Paid for idle GPU time (estimate)", _idle_text(s, cur)),
    ]


def pauses_text(summary: dict[str, Any]) -> str:
    """How many trials the policy paused, how often, and what became of the pauses
    (``summary`` holds :func:`hpsearch.report.summary.pause_summary`'s keys)."""
    if not summary["pauses"]:
        return "none"
    trials, pauses = summary["paused_trials"], summary["pauses"]
    text = f"{trials} trial(s) paused" + (f" {pauses} times" if pauses != trials else "")
    text += f"; {summary['resumes']} pause(s) undone (the trial trained on)"
    if summary["ended_paused"]:
        text += f"; {summary['ended_paused']} trial(s) not resumed after their last pause"
    return text


def _storage_text(summary: dict[str, Any]) -> str:
    """Storage money beside compute: spent, what keeping the checkpoints costs, and the
    measured bytes and seconds behind it."""
    count = summary.get("checkpoints") or 0
    if not count:
        return "no checkpoint written"
    cur = summary.get("storage_currency")
    text = (f"{count} checkpoint(s), {summary['checkpoint_bytes'] / 1e6:.3g} MB written, "
            f"{summary['checkpoint_s_mean']:.3g} s each")
    where = summary.get("checkpoint_storage")
    if where:
        text += f" to {where}"
    if summary.get("storage_cost") is None:
        return text + " (no storage price recorded)"
    price = summary["storage_price"]
    return (f"{fmt_money(summary['storage_cost'], cur)} spent ({text}); "
            f"{summary['checkpoint_stored_bytes'] / 1e9:.3g} GB kept: "
            f"{fmt_money(summary['storage_per_month_kept'], cur)} per month until deleted "
            f"({price['row']}, {price['per_gb_month']:g} {cur}/GB-month, "
            f"{price['snapshot_date']})")


def _idle_text(summary: dict[str, Any], currency: str | None) -> str:
    if summary.get("idle_gpu_cost") is None:
        return "no GPU use sampled (CPU trials, or no NVML on the trial nodes)"
    util = summary.get("gpu_util_mean")
    return (f"{fmt_money(summary['idle_gpu_cost'], currency)}"
            + (f" (mean GPU utilisation {util:.0f}%, weighted by cost)"
               if util is not None else ""))


def method_lines(report: Report) -> list[tuple[str, str]]:
    """How each estimate and the money curve were made."""
    s = report.summary
    return [
        ("Money", s.get("money_method") or ""),
        *([("Idle", s["idle_cost_method"])] if s.get("idle_cost_method") else []),
        ("Saved by pruning", s["savings_vs_no_pruning"]["method"]),
        ("Saved by spot pricing", s["savings_vs_on_demand"]["method"]),
        ("Saved against on-demand without pruning",
         s["savings_vs_on_demand_without_pruning"]["method"]),
        ("Best metric against money", s["best_vs_cost_method"]),
        ("Paid for idle GPU time", s["idle_gpu_cost_method"]),
        ("Checkpoint storage", s.get("storage_method", "")),
        ("Pareto front", f"COMPLETE trials by their final {s['metric']} and cost "
                         f"({s['mode']}imise {s['metric']}); a trial is on the front if no "
                         f"other is at least as good on both and better on one. Pruned "
                         f"trials stopped part-way, so they are plotted but not on it"),
    ]


def node_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """Money by node (one row per rental) as header and text cells; no rows for a study
    from before node billing."""
    cur = report.currency
    unit = f" ({cur})" if cur else ""
    header = ["node", "instance", "kind", "rented s", "billed s", f"billed{unit}",
              f"work kept{unit}", f"wasted{unit}", f"idle{unit}", "idle", "trials"]
    rows = []
    for n in report.summary.get("nodes") or []:
        kind = ("spot" if n["spot"] else "on-demand") + (", lost" if n["lost"] else "")
        rows.append([
            n["node"][:12], str(n["instance"] or "-"), kind, fmt_seconds(n["rented_s"]),
            fmt_seconds(n["billed_s"]), fmt_money(n["cost"], None),
            fmt_money(n["kept_cost"], None), fmt_money(n["wasted_cost"], None),
            fmt_money(n["idle_cost"], None), fmt_share(n["idle_share"]), str(n["trials"]),
        ])
    return header, rows


def _gpu_sampled(report: Report) -> bool:
    return any(r["gpu_util_mean"] is not None for r in report.trials)


def table_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """The per-trial table as header and text cells (HTML and Markdown).

    The ``gpu util %`` column is there only when a trial sampled its GPU, ``paused
    after`` only when a trial was paused. A parameter a trial does not have (a
    conditional one) is left out of its params cell.
    """
    cur = report.currency
    unit = f" ({cur})" if cur else ""
    gpu = _gpu_sampled(report)
    # The epochs each trial was paused after (whether it trained on after its last
    # pause shows in its epochs), only when the policy paused one.
    paused = report.summary["pauses"] > 0
    header = ["trial", "state", report.metric, "best", "epochs", f"cost{unit}",
              f"wasted{unit}", "billed s", "preemptions",
              *(["paused after"] if paused else []), "instance", "spot",
              *(["gpu util %"] if gpu else []), "stop reason / error", "params"]
    rows = []
    for r in report.trials:
        rows.append([
            str(r["number"]) + (" *" if r["on_pareto_front"] else ""), r["state"],
            fmt_value(r["value"]), fmt_value(r["best_value"]), str(r["epochs"]),
            fmt_money(r["cost"], None), fmt_money(r["wasted_cost"], None),
            fmt_seconds(r["billed_s"]),
            str(r["preemptions"]),
            *([", ".join(map(str, r["paused_at"])) or "-"] if paused else []),
            r["instance"] or "-", fmt_value(r["spot"]),
            *([("-" if r["gpu_util_mean"] is None else f"{r['gpu_util_mean']:.0f}")]
              if gpu else []),
            fmt_reason(r["stop_reason"] or r["error"]), fmt_params(r["params"]),
        ])
    return header, rows
