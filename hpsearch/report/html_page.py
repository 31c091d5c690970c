"""The report as one self-contained HTML page: the summary, money by node, the methods,
the plots and the per-trial table.

Pure module: plotly is imported only when the page is written. The page holds
plotly's JavaScript inlined once (no external URL is loaded), so it opens offline and
can be mailed around.
"""

from __future__ import annotations

import html
from typing import Any, Iterator

from hpsearch.report.plots import figures
from hpsearch.report.report import Report
from hpsearch.report.text import (fmt_value, front_label, method_lines, node_table,
                                  summary_lines, table_rows)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; color: #212529; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #dee2e6; padding: 0.3rem 0.5rem; text-align: left;
         vertical-align: top; }
th { background: #f1f3f5; }
table.summary th { width: 22rem; }
table.trials { width: 100%; font-size: 0.82rem; }
.trials th, .trials td { padding: 0.3rem 0.35rem; }
.trials td.num { text-align: right; font-variant-numeric: tabular-nums; }
.trials td.reason { min-width: 10rem; max-width: 22rem; overflow-wrap: anywhere; }
.trials td.params { min-width: 15rem; max-width: 26rem; overflow-wrap: anywhere; }
.method { color: #495057; font-size: 0.85rem; }
.note { color: #495057; background: #f8f9fa; border-left: 3px solid #adb5bd;
        padding: 0.5rem 0.8rem; margin: 0.5rem 0; }
.figure { margin: 1rem 0; }
.wide { overflow-x: auto; }
footer { margin-top: 2rem; color: #868e96; font-size: 0.8rem; }
"""


_SOFT_HYPHENS = {"preemptions": "pre\u00ademptions", "instance": "in\u00adstance"}


def _params_cell(params: dict[str, Any]) -> str:
    # One span per name=value, the cell wrapping after each comma (inside a value only
    # when one alone is wider than the cell): the table never scrolls sideways.
    items = [html.escape(f"{k}={fmt_value(v)}") for k, v in params.items()]
    return " ".join(f'<span class="param">{item}{"," if i < len(items) - 1 else ""}</span>'
                    for i, item in enumerate(items))


def _trials_table(report: Report) -> str:
    header, rows = table_rows(report)
    numeric = {0, 2, 3, 4, 5, 6, 7, 8}
    if "gpu util %" in header:
        numeric.add(header.index("gpu util %"))
    reason, params = len(header) - 2, len(header) - 1
    # Long one-word headers may break where a soft hyphen says: narrower columns.
    head = "".join(f"<th>{html.escape(_SOFT_HYPHENS.get(h, h))}</th>" for h in header)
    body = []
    for record, row in zip(report.trials, rows):
        cells = []
        for i, text in enumerate(row):
            if i == params:
                cells.append(f'<td class="params">{_params_cell(record["params"])}</td>')
            elif i == reason:
                cells.append(f'<td class="reason">{html.escape(text)}</td>')
            else:
                cls = ' class="num"' if i in numeric else ""
                cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>\n'
            + "\n".join(body) + "\n</tbody></table>")


def html_parts(report: Report, version: str | None = None) -> Iterator[str]:
    """The whole report as one self-contained HTML page, in parts (plotly's JS inlined
    once, with the first figure drawn)."""
    import plotly.io as pio

    s = report.summary
    title = f"hpsearch report: {s['study']}"
    yield (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n")
    yield f"<h1>Study '{html.escape(str(s['study']))}': what the money bought</h1>\n"
    yield "<h2>Summary</h2>\n"
    yield ("<table class=\"summary\"><tbody>" + "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in summary_lines(report)) + "</tbody></table>\n")
    header, rows = node_table(report)
    if rows:
        yield ("<h2>Money by node</h2><table class=\"summary\"><thead><tr>"
               + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead><tbody>"
               + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                         for row in rows) + "</tbody></table>\n")
    yield ("<h3>How the estimates are made</h3><ul class=\"method\">" + "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
        for k, v in method_lines(report)) + "</ul>\n")
    inlined = False
    for i, panel in enumerate(figures(report)):
        notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in panel.notes)
        div = ""
        if panel.figure is not None:
            div = pio.to_html(panel.figure, full_html=False, include_plotlyjs=not inlined,
                              include_mathjax=False, div_id=f"hpsearch-figure-{i + 1}",
                              config={"displaylogo": False, "responsive": True})
            div = f'<div class="figure">{div}</div>'
            inlined = True
        yield f"<h2>{html.escape(panel.heading)}</h2>{notes}{div}\n"
    yield (f"<h2>Trials</h2><p class=\"method\">* on the Pareto front "
           f"({html.escape(front_label(report))}). Money of running trials is what they "
           f"were billed up to their latest epoch.</p>\n")
    yield '<div class="wide">' + _trials_table(report) + "</div>\n"
    footer = "Written by hpsearch" + (f" {version}" if version else "") + \
        ("; plots by plotly.js, inlined: this file needs no network." if inlined else ".")
    yield f"<footer>{html.escape(footer)}</footer></body></html>\n"


def html_document(report: Report, version: str | None = None) -> str:
    """The whole report as one self-contained HTML page (see :func:`html_parts`)."""
    return "".join(html_parts(report, version))
