"""The report's plots (plotly figures, one :class:`Panel` each): the best metric against
money spent, metric against cost per trial with the Pareto front of the COMPLETE trials,
cost by trial state, and idle money over time per node. A plot with nothing to draw is
replaced by a note saying why (no completed trial, no cost yet).

Pure module: plotly is imported only when a figure is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from hpsearch.money.fmt import fmt_money
from hpsearch.report.axes import MetricAxis, Pin, cost_axis, metric_axis
from hpsearch.report.report import Report
from hpsearch.report.text import fmt_value, front_label

#: Each trial state's colour, in the order the plots list the states.
_STATE_COLORS = {"COMPLETE": "#2b8a3e", "PRUNED": "#e8590c", "BUDGET_STOPPED": "#f08c00",
                 "FAIL": "#c92a2a", "RUNNING": "#1971c2", "WAITING": "#868e96"}
#: Money on axes as plain decimals with 3 significant digits (not SI prefixes: "50µ").
_MONEY_TICKS = ".3~r"
#: Marker of a value drawn in place, and of one pinned below or above the metric axis.
_SYMBOLS = {Pin.IN_PLACE: "circle", Pin.BELOW: "triangle-down", Pin.ABOVE: "triangle-up"}


@dataclass
class Panel:
    """One plot of the HTML report.

    Attributes:
        heading: The plot's heading.
        figure: The plotly figure, or None when there is nothing to draw.
        notes: Sentences shown under the heading (why nothing is drawn, what is pinned).
    """

    heading: str
    figure: Any | None
    notes: list[str] = field(default_factory=list)


def _no_completed(report: Report) -> bool:
    return report.summary["best_trial"] is None


def _axis_title(report: Report) -> str:
    better = "higher" if report.summary["mode"] == "max" else "lower"
    return f"{report.metric} ({better} is better)"


def _pin_note(report: Report, axis: MetricAxis, numbers_values: Iterable[tuple[int, float]]
              ) -> str | None:
    """The note under a plot whose axis pins values, naming the trials pinned."""
    if axis.window is None:
        return None
    pinned = sorted({(n, v) for n, v in numbers_values
                     if v is not None and axis.place(v)[1] is not Pin.IN_PLACE})
    if not pinned:
        return None
    shown = ", ".join(f"trial {n}: {fmt_value(float(v))}" for n, v in pinned[:6])
    more = f" and {len(pinned) - 6} more" if len(pinned) > 6 else ""
    return (f"The {report.metric} axis follows the COMPLETE trials; {len(pinned)} "
            f"trial(s) far outside their range ({shown}{more}) are drawn at its edge as "
            f"\u25b2 (above) or \u25bc (below); hover shows their value.")


def plot_axis(report: Report) -> MetricAxis | None:
    """The metric axis both metric plots share: :func:`~hpsearch.report.axes.metric_axis` of
    the COMPLETE trials' values and those of the other trials that cost money."""
    complete = [r["value"] for r in report.trials if r["state"] == "COMPLETE"
                and r["cost"] is not None]
    others = [r["value"] for r in report.trials if r["state"] != "COMPLETE"
              and r["cost"] is not None and r["state"] != "WAITING"]
    return metric_axis(complete, others)


def _markers(axis: MetricAxis, values: Sequence[float]) -> tuple[list[float], list[str]]:
    placed = [axis.place(v) for v in values]
    return [y for y, _ in placed], [_SYMBOLS[side] for _, side in placed]


def figures(report: Report) -> list[Panel]:
    """The plots: best metric against money, metric against cost per trial with the
    Pareto front, cost by trial state, and idle money over time (when nodes were
    billed); each a :class:`Panel`."""
    cur = report.currency or ""
    money = f"money ({cur})" if cur else "money"
    ctx = _PlotContext(report, plot_axis(report),
                       dict(template="plotly_white", height=420,
                            margin=dict(l=70, r=20, t=30, b=50),
                            legend=dict(orientation="h", y=-0.18)))
    panels = [_best_panel(ctx, money), _pareto_panel(ctx), _state_panel(ctx, money)]
    if report.idle_over_time:
        panels.append(_idle_panel(report, ctx.layout, money))
    return panels


@dataclass(frozen=True)
class _PlotContext:
    """What every panel of :func:`figures` shares."""

    report: Report
    axis: MetricAxis | None
    layout: dict[str, Any]

    @property
    def y_axis(self) -> dict[str, Any]:
        return {} if self.axis is None else dict(range=[self.axis.low, self.axis.high])


_NONE_DONE = "No completed trial"


def _best_panel(ctx: _PlotContext, money: str) -> Panel:
    """Best metric so far against cumulative money, every trial's value marked."""
    import plotly.graph_objects as go

    report, axis, layout, y_axis = ctx.report, ctx.axis, ctx.layout, ctx.y_axis
    cur, metric, none_done = report.currency or "", report.metric, _NONE_DONE
    points = report.best_vs_cost
    valued = [p for p in points if p["value"] is not None]
    heading = f"Best {metric} so far against money spent"
    if not valued or axis is None:
        what = (f"{len(points)} trial(s) cost {fmt_money(points[-1]['cumulative_cost'], cur)}"
                f" and none reported {metric}" if points else "no trial has cost money yet")
        return Panel(heading, None, [
            (f"{none_done}: nothing to draw yet ({what})." if _no_completed(report)
             else f"Nothing to draw yet ({what}).")])
    else:
        curve = go.Figure(layout=layout)
        if not _no_completed(report):
            curve.add_trace(go.Scatter(
                x=[p["cumulative_cost"] for p in points],
                y=[p["best_value"] for p in points], mode="lines", line_shape="hv",
                name=f"best {metric} (COMPLETE)", line=dict(color="#1c7ed6", width=3)))
        for state in sorted({p["state"] for p in valued}, key=_state_order):
            # Points drawn in place first: the legend shows the first point's symbol.
            mine = sorted((p for p in valued if p["state"] == state),
                          key=lambda p: axis.place(p["value"])[1] is not Pin.IN_PLACE)
            ys, symbols = _markers(axis, [p["value"] for p in mine])
            curve.add_trace(go.Scatter(
                x=[p["cumulative_cost"] for p in mine], y=ys, mode="markers",
                name=f"{state.lower()} trial",
                marker=dict(color=_STATE_COLORS.get(state, "#495057"), size=9,
                            symbol=symbols),
                customdata=[p["value"] for p in mine],
                text=[f"trial {p['number']}" for p in mine],
                hovertemplate="%{text}<br>cumulative %{x:.6g}<br>" + metric
                              + " %{customdata:.4g}<extra></extra>"))
        curve.update_layout(xaxis_title=f"cumulative {money}", yaxis_title=_axis_title(report),
                            xaxis_tickformat=_MONEY_TICKS, yaxis=y_axis,
                            xaxis_range=list(cost_axis(p["cumulative_cost"] for p in points)))
        notes = [f"{none_done} yet: the best-so-far line starts with the first one."] \
            if _no_completed(report) else []
        pin = _pin_note(report, axis, ((p["number"], p["value"]) for p in valued))
        return Panel(heading, curve, notes + ([pin] if pin else []))


def _pareto_panel(ctx: _PlotContext) -> Panel:
    """Metric against cost per trial, with the Pareto front of the COMPLETE trials."""
    import plotly.graph_objects as go

    report, axis, layout, y_axis = ctx.report, ctx.axis, ctx.layout, ctx.y_axis
    cur, metric, none_done = report.currency or "", report.metric, _NONE_DONE
    valued_rows = [r for r in report.trials if r["value"] is not None
                   and r["cost"] is not None]
    heading = f"Pareto front: {front_label(report)} per trial"
    if not valued_rows or axis is None:
        return Panel(heading, None, [
            f"{none_done}, and no trial with a cost reported {metric}: nothing to draw."
            if _no_completed(report) else f"No trial with a cost reported {metric}: "
                                          f"nothing to draw."])
    else:
        scatter = go.Figure(layout=layout)
        for state in sorted({r["state"] for r in valued_rows}, key=_state_order):
            mine = sorted((r for r in valued_rows if r["state"] == state),
                          key=lambda r: axis.place(r["value"])[1] is not Pin.IN_PLACE)
            ys, symbols = _markers(axis, [r["value"] for r in mine])
            scatter.add_trace(go.Scatter(
                x=[r["cost"] for r in mine], y=ys, mode="markers", name=state.lower(),
                marker=dict(color=_STATE_COLORS.get(state, "#495057"), size=10,
                            opacity=0.8, symbol=symbols),
                customdata=[r["value"] for r in mine],
                text=[f"trial {r['number']} ({r['epochs']} epochs)" for r in mine],
                hovertemplate="%{text}<br>cost %{x:.6g}<br>" + metric
                              + " %{customdata:.4g}<extra></extra>"))
        by_number = {r["number"]: r for r in report.trials}
        front = [by_number[n] for n in report.pareto_front]
        if front:
            # A step line: past a front trial's cost, its value is what money can buy
            # until the next one.
            scatter.add_trace(go.Scatter(
                x=[r["cost"] for r in front], y=[r["value"] for r in front],
                mode="lines+markers", line_shape="hv",
                name=f"Pareto front ({front_label(report)})",
                line=dict(color="#212529", dash="dot"),
                marker=dict(symbol="star", size=15, color="#fab005",
                            line=dict(color="#212529", width=1)),
                text=[f"trial {r['number']}" for r in front],
                hovertemplate="%{text} (Pareto front)<br>cost %{x:.6g}<br>" + metric
                              + " %{y:.4g}<extra></extra>"))
        scatter.update_layout(xaxis_title=f"cost of the trial ({cur})" if cur else "cost",
                              yaxis_title=f"final {_axis_title(report)}",
                              xaxis_tickformat=_MONEY_TICKS, yaxis=y_axis,
                              xaxis_range=list(cost_axis(r["cost"] for r in valued_rows)))
        notes = [f"{none_done}: no Pareto front yet (it holds COMPLETE trials only)."] \
            if not front else []
        pin = _pin_note(report, axis, ((r["number"], r["value"]) for r in valued_rows))
        return Panel(heading, scatter, notes + ([pin] if pin else []))


def _state_panel(ctx: _PlotContext, money: str) -> Panel:
    """Cost by trial state: kept and wasted work stacked."""
    import plotly.graph_objects as go

    report, layout = ctx.report, ctx.layout
    heading = "Cost by trial state"
    states = list(report.cost_by_state)
    if not states:
        return Panel(heading, None, ["No trial has a recorded cost yet: nothing to "
                                            "draw."])
    else:
        spent = [report.cost_by_state[s]["cost"] for s in states]
        wasted = [report.cost_by_state[s]["wasted_cost"] for s in states]
        bars = go.Figure(layout=layout)
        kept = [a - b for a, b in zip(spent, wasted)]
        # A legend entry only for what is there: no "wasted" swatch for a run that lost
        # nothing, no "kept" one for a run where everything failed.
        counts = [f"{report.cost_by_state[s]['n']} trial(s)" for s in states]
        # The count goes on the larger part of each bar, where it fits.
        bars.add_trace(go.Bar(x=states, y=kept, name="kept work (bar in the state's colour)",
                              marker_color=[_STATE_COLORS.get(s, "#495057") for s in states],
                              text=[c if k >= w else "" for c, k, w in zip(counts, kept, wasted)],
                              showlegend=any(k > 0 for k in kept)))
        bars.add_trace(go.Bar(x=states, y=wasted, name="wasted (work lost)",
                              marker=dict(color="#adb5bd", pattern_shape="/"),
                              text=[c if w > k else "" for c, k, w in zip(counts, kept, wasted)],
                              showlegend=any(w > 0 for w in wasted)))
        bars.update_layout(barmode="stack", xaxis_title="trial state", yaxis_title=money,
                           yaxis_tickformat=_MONEY_TICKS, yaxis_range=list(cost_axis(spent)),
                           legend_traceorder="normal")
        return Panel(heading, bars)


def _idle_panel(report: Report, layout: dict[str, Any], money: str) -> Panel:
    """Idle money so far against time since the first node was rented, per node."""
    import plotly.graph_objects as go

    figure = go.Figure(layout=layout)
    for series in report.idle_over_time:
        kind = "spot" if series["spot"] else "on-demand"
        figure.add_trace(go.Scatter(
            x=series["t_s"], y=series["idle_cost"], mode="lines", line_shape="linear",
            name=f"{series['node'][:12]} ({series['instance']}, {kind})"))
    figure.update_layout(xaxis_title="seconds since the first node was rented",
                         yaxis_title=f"idle {money} so far", yaxis_tickformat=_MONEY_TICKS)
    return Panel("Idle money over time, per node", figure, [
        "Money the nodes billed that no trial's share covered, as it accrued; the last "
        "step of each node is its billing's rounding and minimum."])


def _state_order(state: str) -> int:
    order = list(_STATE_COLORS)
    return order.index(state) if state in order else len(order)
