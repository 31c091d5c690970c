"""Write a :class:`~hpsearch.report.Report` as HTML, CSV, JSON and Markdown.

Pure module: plotly is imported only when HTML is written. The HTML file is
self-contained (plotly's JavaScript inlined once, no external URL is loaded), so it
opens offline and can be mailed around; it holds the summary, the three plots (best
metric against cumulative money, metric against cost per trial with the Pareto front,
cost by trial state) and the per-trial table.
"""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from hpsearch.errors import ConfigError
from hpsearch.report import ROW_COLUMNS, Report

#: Output formats and their file names.
FORMATS = {"html": "report.html", "csv": "report.csv", "json": "report.json",
           "md": "report.md"}

_STATE_COLORS = {"COMPLETE": "#2b8a3e", "PRUNED": "#e8590c", "FAIL": "#c92a2a",
                 "RUNNING": "#1971c2", "WAITING": "#868e96"}


def parse_formats(text: str) -> list[str]:
    """``"html,csv"`` -> ``["html", "csv"]``; ConfigError naming an unknown format."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise ConfigError("--format", "names no format; use html, csv, json or md", text)
    for name in names:
        if name not in FORMATS:
            raise ConfigError("--format", f"unknown format {name!r}; use html, csv, json or md",
                              text)
    return list(dict.fromkeys(names))


def write(report: Report, out_dir: str | Path, formats: Iterable[str] = tuple(FORMATS),
          version: str | None = None) -> list[Path]:
    """Write ``report`` into ``out_dir`` (created) as ``report.<format>``; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writers = {"html": write_html, "csv": write_csv, "json": write_json, "md": write_markdown}
    paths = []
    for name in formats:
        path = out / FORMATS[name]
        writers[name](report, path, version=version)
        paths.append(path)
    return paths


# -- formatting ----------------------------------------------------------------------------

def fmt_money(amount: float | None, currency: str | None) -> str:
    """``0.001234 USD``; ``-`` when unknown (small sums keep their digits)."""
    if amount is None:
        return "-"
    unit = f" {currency}" if currency else ""
    if abs(amount) >= 10:
        return f"{amount:.2f}{unit}"
    if abs(amount) >= 0.01:
        return f"{amount:.4f}{unit}"
    return f"{amount:.6f}{unit}"


def fmt_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_share(share: float | None) -> str:
    """``26.7%``; small shares keep two significant digits (``0.0068%``)."""
    if share is None:
        return "-"
    if share == 0 or abs(share) >= 0.001:
        return f"{100 * share:.1f}%"
    return f"{100 * share:.2g}%"


def fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in params.items())


def _estimate_text(estimate: dict[str, Any], currency: str | None) -> str:
    if estimate["amount"] is None:
        return "not estimated"
    return (f"{fmt_money(estimate['amount'], currency)} "
            f"({fmt_share(estimate['share'])} of "
            f"{fmt_money(estimate['baseline_cost'], currency)})")


def summary_lines(report: Report) -> list[tuple[str, str]]:
    """The summary as (label, text) pairs, shared by the HTML and Markdown writers."""
    s, cur = report.summary, report.currency
    states = ", ".join(f"{n} {state.lower()}" for state, n in s["n_by_state"].items() if n)
    if s["best_trial"] is not None:
        best = (f"trial {s['best_trial']}: {s['metric']} = {fmt_value(s['best_value'])} "
                f"after {s['best_epochs']} epoch(s), cost {fmt_money(s['best_cost'], cur)} "
                f"({fmt_params(s['best_params'])})")
    else:
        best = "no trial completed"
    budget = "no budget"
    if s["budget_max_cost"] is not None:
        budget = (f"{fmt_share(s['budget_used'])} of budget.max_cost "
                  f"{fmt_money(s['budget_max_cost'], cur)}")
    instance = s["instance"] or "-"
    if s["spot"]:
        instance += " (spot)"
    return [
        ("Study", f"{s['study']} ({s['metric']}, {s['mode']}imise)"),
        ("Trials", f"{s['n_trials']}" + (f" ({states})" if states else "")),
        ("Best trial", best),
        ("Spent", fmt_money(s["total_cost"], cur)),
        ("Wasted", fmt_money(s["wasted_cost"], cur) + " (work lost to failures and "
                                                      "preemptions; part of spent)"),
        ("Budget used", budget),
        ("Billed time", f"{s['billed_s']:.0f} s of trial time"),
        ("Preemptions", str(s["preemptions"])),
        ("Instance", instance),
        ("Saved by pruning (estimate)", _estimate_text(s["savings_vs_no_pruning"], cur)),
        ("Saved by spot pricing (estimate)", _estimate_text(s["savings_vs_on_demand"], cur)),
        ("Saved against on-demand without pruning (estimate)",
         _estimate_text(s["savings_vs_on_demand_without_pruning"], cur)),
        ("Pareto front (accuracy vs cost)",
         ", ".join(f"trial {n}" for n in s["pareto_front"]) or "-"),
        ("Paid for idle GPU time (estimate)", _idle_text(s, cur)),
    ]


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
        ("Saved by pruning", s["savings_vs_no_pruning"]["method"]),
        ("Saved by spot pricing", s["savings_vs_on_demand"]["method"]),
        ("Saved against on-demand without pruning",
         s["savings_vs_on_demand_without_pruning"]["method"]),
        ("Best metric against money", s["best_vs_cost_method"]),
        ("Paid for idle GPU time", s["idle_gpu_cost_method"]),
        ("Pareto front", "COMPLETE and PRUNED trials by their final metric and cost; a "
                         "trial is on the front if no other is at least as good on both "
                         "and better on one"),
    ]


def table_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """The per-trial table as header and text cells (HTML and Markdown)."""
    cur = report.currency
    unit = f" ({cur})" if cur else ""
    header = ["trial", "state", report.metric, "best", "epochs", f"cost{unit}",
              f"wasted{unit}", "billed s", "preemptions", "instance", "spot", "gpu util %",
              "stop reason / error", "params"]
    rows = []
    for r in report.trials:
        rows.append([
            str(r["number"]) + (" *" if r["on_pareto_front"] else ""), r["state"],
            fmt_value(r["value"]), fmt_value(r["best_value"]), str(r["epochs"]),
            fmt_money(r["cost"], None), fmt_money(r["wasted_cost"], None),
            "-" if r["billed_s"] is None else f"{r['billed_s']:.0f}",
            str(r["preemptions"]), r["instance"] or "-", fmt_value(r["spot"]),
            "-" if r["gpu_util_mean"] is None else f"{r['gpu_util_mean']:.0f}",
            r["stop_reason"] or r["error"] or "", fmt_params(r["params"]),
        ])
    return header, rows


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, tuples lists, keys strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# -- CSV, JSON, Markdown --------------------------------------------------------------------

def write_csv(report: Report, path: Path, version: str | None = None) -> None:
    """One row per trial; params as ``params_<name>`` columns, empty cells for None."""
    rows = report.flat_rows()
    columns = list(rows[0]) if rows else list(ROW_COLUMNS)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def json_document(report: Report, version: str | None = None) -> dict[str, Any]:
    """``{"summary", "trials", "pareto_front", "best_vs_cost", "cost_by_state"}``."""
    return _plain({
        "hpsearch_version": version,
        "summary": report.summary,
        "trials": report.trials,
        "pareto_front": report.pareto_front,
        "best_vs_cost": report.best_vs_cost,
        "cost_by_state": report.cost_by_state,
    })


def write_json(report: Report, path: Path, version: str | None = None) -> None:
    path.write_text(json.dumps(json_document(report, version), indent=2, allow_nan=False)
                    + "\n", encoding="utf-8")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def markdown(report: Report, version: str | None = None) -> str:
    s = report.summary
    lines = [f"# Report of study '{s['study']}'", ""]
    lines += _md_table(["", ""], summary_lines(report))
    lines += ["", "## How the estimates are made", ""]
    lines += [f"- **{label}**: {_md_cell(text)}" for label, text in method_lines(report)]
    lines += ["", "## Cost by trial state", ""]
    lines += _md_table(["state", "trials", "cost", "wasted"], [
        [state, str(v["n"]), fmt_money(v["cost"], report.currency),
         fmt_money(v["wasted_cost"], report.currency)]
        for state, v in report.cost_by_state.items()])
    lines += ["", "## Trials", "", "`*`: on the Pareto front of accuracy vs cost.", ""]
    lines += _md_table(*table_rows(report))
    if version:
        lines += ["", f"Written by hpsearch {version}."]
    return "\n".join(lines) + "\n"


def write_markdown(report: Report, path: Path, version: str | None = None) -> None:
    path.write_text(markdown(report, version), encoding="utf-8")


# -- HTML -----------------------------------------------------------------------------------

def figures(report: Report) -> list[tuple[str, Any]]:
    """The three plotly figures, with their titles."""
    import plotly.graph_objects as go

    cur = report.currency or ""
    metric = report.metric
    money = f"money ({cur})" if cur else "money"
    layout = dict(template="plotly_white", height=420, margin=dict(l=60, r=20, t=40, b=50),
                  legend=dict(orientation="h", y=-0.18))

    curve = go.Figure(layout=layout)
    points = report.best_vs_cost
    curve.add_trace(go.Scatter(
        x=[p["cumulative_cost"] for p in points], y=[p["best_value"] for p in points],
        mode="lines", line_shape="hv", name=f"best {metric} (COMPLETE)",
        line=dict(color="#1c7ed6", width=3)))
    for state in sorted({p["state"] for p in points}, key=_state_order):
        mine = [p for p in points if p["state"] == state and p["value"] is not None]
        if mine:
            curve.add_trace(go.Scatter(
                x=[p["cumulative_cost"] for p in mine], y=[p["value"] for p in mine],
                mode="markers", name=f"{state.lower()} trial",
                marker=dict(color=_STATE_COLORS.get(state, "#495057"), size=8),
                text=[f"trial {p['number']}" for p in mine],
                hovertemplate="%{text}<br>cumulative %{x:.6g}<br>" + metric + " %{y:.4g}"))
    curve.update_layout(xaxis_title=f"cumulative {money}", yaxis_title=metric,
                        xaxis_tickformat=_MONEY_TICKS)

    scatter = go.Figure(layout=layout)
    valued = [r for r in report.trials if r["value"] is not None and r["cost"] is not None]
    for state in sorted({r["state"] for r in valued}, key=_state_order):
        mine = [r for r in valued if r["state"] == state]
        scatter.add_trace(go.Scatter(
            x=[r["cost"] for r in mine], y=[r["value"] for r in mine], mode="markers",
            name=state.lower(), marker=dict(color=_STATE_COLORS.get(state, "#495057"),
                                            size=9, opacity=0.75),
            text=[f"trial {r['number']} ({r['epochs']} epochs)" for r in mine],
            hovertemplate="%{text}<br>cost %{x:.6g}<br>" + metric + " %{y:.4g}"))
    by_number = {r["number"]: r for r in report.trials}
    front = [by_number[n] for n in report.pareto_front]
    scatter.add_trace(go.Scatter(
        x=[r["cost"] for r in front], y=[r["value"] for r in front], mode="lines+markers",
        name="Pareto front", line=dict(color="#212529", dash="dot"),
        marker=dict(symbol="star", size=14, color="#fab005", line=dict(color="#212529",
                                                                       width=1)),
        text=[f"trial {r['number']}" for r in front],
        hovertemplate="%{text} (Pareto front)<br>cost %{x:.6g}<br>" + metric + " %{y:.4g}"))
    scatter.update_layout(xaxis_title=f"cost of the trial ({cur})" if cur else "cost",
                          yaxis_title=f"final {metric}", xaxis_tickformat=_MONEY_TICKS)

    bars = go.Figure(layout=layout)
    states = list(report.cost_by_state)
    spent = [report.cost_by_state[s]["cost"] for s in states]
    wasted = [report.cost_by_state[s]["wasted_cost"] for s in states]
    bars.add_trace(go.Bar(x=states, y=[a - b for a, b in zip(spent, wasted)],
                          name="spent on kept work",
                          marker_color=[_STATE_COLORS.get(s, "#495057") for s in states],
                          text=[f"{report.cost_by_state[s]['n']} trial(s)" for s in states]))
    bars.add_trace(go.Bar(x=states, y=wasted, name="wasted (lost work)",
                          marker_color="#868e96"))
    bars.update_layout(barmode="stack", xaxis_title="trial state", yaxis_title=money,
                       yaxis_tickformat=_MONEY_TICKS)
    return [
        (f"Best {metric} against money spent", curve),
        (f"{metric} against cost per trial, with the Pareto front", scatter),
        ("Cost by trial state", bars),
    ]


#: Money on axes as plain decimals with 3 significant digits (not SI prefixes: "50µ").
_MONEY_TICKS = ".3~r"


def _state_order(state: str) -> int:
    order = list(_STATE_COLORS)
    return order.index(state) if state in order else len(order)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; color: #212529; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #dee2e6; padding: 0.3rem 0.6rem; text-align: left;
         vertical-align: top; }
th { background: #f1f3f5; }
table.summary th { width: 22rem; }
.trials td.num { text-align: right; font-variant-numeric: tabular-nums; }
.method { color: #495057; font-size: 0.85rem; }
.figure { margin: 1rem 0; }
.wide { overflow-x: auto; }
.trials td:last-child { min-width: 16rem; }
footer { margin-top: 2rem; color: #868e96; font-size: 0.8rem; }
"""


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str,
                numeric: Iterable[int] = ()) -> str:
    numeric = set(numeric)
    num = ' class="num"'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "\n".join(
        "<tr>" + "".join(
            f"<td{num if i in numeric else ''}>{html.escape(c)}</td>"
            for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def html_document(report: Report, version: str | None = None) -> str:
    """The whole report as one self-contained HTML page (plotly's JS inlined once)."""
    import plotly.io as pio

    s = report.summary
    title = f"hpsearch report: {s['study']}"
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>Study '{html.escape(str(s['study']))}': what the money bought</h1>",
             "<h2>Summary</h2>",
             "<table class=\"summary\"><tbody>" + "".join(
                 f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                 for k, v in summary_lines(report)) + "</tbody></table>",
             "<h3>How the estimates are made</h3><ul class=\"method\">" + "".join(
                 f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
                 for k, v in method_lines(report)) + "</ul>"]
    for i, (heading, fig) in enumerate(figures(report)):
        div = pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0),
                          include_mathjax=False, div_id=f"hpsearch-figure-{i + 1}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f"<h2>{html.escape(heading)}</h2><div class=\"figure\">{div}</div>")
    header, rows = table_rows(report)
    parts.append("<h2>Trials</h2><p class=\"method\">* on the Pareto front of accuracy vs "
                 "cost. Money of running trials is what they were billed up to their latest "
                 "epoch.</p>")
    parts.append('<div class="wide">' + _html_table(header, rows, "trials",
                                                     numeric=(0, 2, 3, 4, 5, 6, 7, 8))
                 + "</div>")
    footer = "Written by hpsearch" + (f" {version}" if version else "") + \
        "; plots by plotly.js, inlined: this file needs no network."
    parts.append(f"<footer>{html.escape(footer)}</footer></body></html>")
    return "\n".join(parts) + "\n"


def write_html(report: Report, path: Path, version: str | None = None) -> None:
    path.write_text(html_document(report, version), encoding="utf-8")
