"""The report as CSV (one row per trial), JSON (everything, strict) and Markdown (the
summary, the methods and the tables): the formats without plots.

Pure module.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Sequence

from hpsearch.money.fmt import fmt_money
from hpsearch.report.report import Report
from hpsearch.report.rows import ROW_COLUMNS
from hpsearch.report.text import (front_label, method_lines, node_table, summary_lines,
                                  table_rows)


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, tuples lists, keys strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)  # a constant of another type (a path, a date): its text


def _csv_cell(value: Any) -> Any:
    """A CSV cell: empty for None, NaN and a parameter the trial lacks; JSON for lists."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return json.dumps(_plain(value), allow_nan=False, sort_keys=True)
    return value


def csv_text(report: Report, version: str | None = None) -> str:
    """One row per trial; params as ``params_<name>`` columns, empty cells for None."""
    rows = report.flat_rows()
    columns = list(rows[0]) if rows else list(ROW_COLUMNS)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return buffer.getvalue()


def json_document(report: Report, version: str | None = None) -> dict[str, Any]:
    """``{"summary", "trials", "pareto_front", "best_vs_cost", "cost_by_state",
    "idle_over_time"}``."""
    return _plain({
        "hpsearch_version": version,
        "summary": report.summary,
        "trials": report.trials,
        "pareto_front": report.pareto_front,
        "best_vs_cost": report.best_vs_cost,
        "cost_by_state": report.cost_by_state,
        "idle_over_time": report.idle_over_time,
    })


def json_text(report: Report, version: str | None = None) -> str:
    """:func:`json_document` as strict JSON (no NaN or Infinity)."""
    return json.dumps(json_document(report, version), indent=2, allow_nan=False) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def markdown(report: Report, version: str | None = None) -> str:
    """The summary, the methods, cost by state and the trial table as Markdown."""
    s = report.summary
    lines = [f"# Report of study '{s['study']}'", ""]
    lines += _md_table(["", ""], summary_lines(report))
    lines += ["", "## How the estimates are made", ""]
    lines += [f"- **{label}**: {_md_cell(text)}" for label, text in method_lines(report)]
    lines += ["", "## Cost by trial state", ""]
    if report.cost_by_state:
        lines += _md_table(["state", "trials", "cost", "wasted"], [
            [state, str(v["n"]), fmt_money(v["cost"], report.currency),
             fmt_money(v["wasted_cost"], report.currency)]
            for state, v in report.cost_by_state.items()])
    else:
        lines += ["No trial has a recorded cost yet."]
    header, rows = node_table(report)
    if rows:
        lines += ["", "## Money by node", ""]
        lines += _md_table(header, rows)
    lines += ["", "## Trials", "", f"`*`: on the Pareto front ({front_label(report)}).", ""]
    lines += _md_table(*table_rows(report))
    if version:
        lines += ["", f"Written by hpsearch {version}."]
    return "\n".join(lines) + "\n"
