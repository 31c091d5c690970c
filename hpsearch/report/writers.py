"""Write a :class:`~hpsearch.report.report.Report` as HTML, CSV, JSON and Markdown.

Pure module: plotly is imported only when HTML is written. The HTML file is
self-contained (plotly's JavaScript inlined once, no external URL is loaded), so it
opens offline and can be mailed around; it holds the summary, the three plots (best
metric against cumulative money, metric against cost per trial with the Pareto front of
the COMPLETE trials, cost by trial state) and the per-trial table. A plot with nothing
to draw is replaced by a note saying why (no completed trial, no cost yet).

Every file is written atomically: into a temporary file in the same folder, flushed to
disk, then renamed over the old one. A write that fails (a full disk) leaves the
previous report files as they were, or none, and raises :class:`ReportWriteError`.
"""

from __future__ import annotations

import csv
import errno
import html
import io
import json
import math
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from hpsearch.errors import ConfigError, HpsearchError
from hpsearch.money.fmt import fmt_money
from hpsearch.report.axes import MetricAxis, Pin, cost_axis, metric_axis
from hpsearch.report.report import Report
from hpsearch.report.rows import ROW_COLUMNS

#: Output formats and their file names.
FORMATS = {"html": "report.html", "csv": "report.csv", "json": "report.json",
           "md": "report.md"}

_STATE_COLORS = {"COMPLETE": "#2b8a3e", "PRUNED": "#e8590c", "BUDGET_STOPPED": "#f08c00",
                 "FAIL": "#c92a2a", "RUNNING": "#1971c2", "WAITING": "#868e96"}


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


class ReportWriteError(HpsearchError):
    """A report file could not be written; the files already there are unchanged.

    The message is one line naming the path and the cause: ``disk full at PATH`` when
    the disk (or a quota) is full, else ``cannot write PATH: <cause>``.

    Args:
        path: The file (or folder) that could not be written.
        exc: The operating system's error.
    """

    def __init__(self, path: Path, exc: OSError):
        self.path = path
        self.errno = getattr(exc, "errno", None)
        if self.errno in (errno.ENOSPC, errno.EDQUOT):
            text = f"disk full at {path}"
        else:
            text = f"cannot write {path}: {getattr(exc, 'strerror', None) or exc}"
        super().__init__(text + "; the report files already there are unchanged")


def write(report: Report, out_dir: str | Path, formats: Iterable[str] = tuple(FORMATS),
          version: str | None = None) -> list[Path]:
    """Write ``report`` into ``out_dir`` (created) as ``report.<format>``; return the paths.

    All-or-nothing as far as a file system allows: every format is first written to a
    temporary file beside its target and flushed to disk; only when all of them are
    there are they renamed over the old files. A failure on the way removes the
    temporary files and leaves every old report file as it was.

    Raises:
        ReportWriteError: the folder or a file could not be written (disk full, no
            permission).
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportWriteError(out, exc) from None
    names = list(formats)
    staged: list[tuple[Path, Path]] = []
    try:
        for name in names:
            path = out / FORMATS[name]
            staged.append((_stage(path, RENDERERS[name](report, version)), path))
        for temp, path in staged:
            try:
                os.replace(temp, path)
            except OSError as exc:
                raise ReportWriteError(path, exc) from None
    finally:
        for temp, _ in staged:
            _remove(temp)
    _sync_folder(out)
    return [out / FORMATS[name] for name in names]


def atomic_write(path: str | Path, chunks: Iterable[str]) -> Path:
    """Write the text ``chunks`` to ``path`` atomically (UTF-8); return the path.

    The text goes to a temporary file in the same folder, is flushed and fsynced, and
    replaces ``path`` by a rename: a reader sees the old file or the new one, never
    part of one. If writing fails, or ``chunks`` raises, the temporary file is removed
    and ``path`` is left as it was (or absent).

    Raises:
        ReportWriteError: the operating system refused the write (the error of
            ``chunks`` itself propagates unchanged).
    """
    path = Path(path)
    temp = _stage(path, chunks)
    try:
        os.replace(temp, path)
    except OSError as exc:
        raise ReportWriteError(path, exc) from None
    finally:
        _remove(temp)
    _sync_folder(path.parent)
    return path


def _stage(path: Path, chunks: Iterable[str]) -> Path:
    """Write ``chunks`` into a new temporary file beside ``path``; return its path."""
    # Hidden, unique and in the same folder: the rename stays on one file system.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # 0o666 under the umask: the report gets the permissions of any new file.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise ReportWriteError(path, exc) from None
    f = io.open(fd, "w", encoding="utf-8", newline="")
    try:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
        f.close()
    except BaseException as exc:
        try:
            f.close()  # on a full disk this flushes again and fails again: never mind
        except OSError:
            pass
        _remove(temp)
        if isinstance(exc, OSError):
            raise ReportWriteError(path, exc) from None
        raise
    return temp


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make the renames durable; a file system that cannot sync a folder is let be."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- formatting ----------------------------------------------------------------------------

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


def _estimate_text(estimate: dict[str, Any], currency: str | None) -> str:
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
        ("Wasted", fmt_money(s["wasted_cost"], cur) + " (work lost to failures and "
                                                      "preemptions; part of spent)"),
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
        ("Saved by pruning (estimate)", _estimate_text(s["savings_vs_no_pruning"], cur)),
        ("Saved by spot pricing (estimate)", _estimate_text(s["savings_vs_on_demand"], cur)),
        ("Saved against on-demand without pruning (estimate)",
         _estimate_text(s["savings_vs_on_demand_without_pruning"], cur)),
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


# -- CSV, JSON, Markdown --------------------------------------------------------------------

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


def write_csv(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`csv_text` to ``path`` atomically."""
    atomic_write(path, [csv_text(report, version)])


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


def write_json(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`json_text` to ``path`` atomically."""
    atomic_write(path, [json_text(report, version)])


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


def write_markdown(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`markdown` to ``path`` atomically."""
    atomic_write(path, [markdown(report, version)])


# -- the plots ------------------------------------------------------------------------------

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


# -- HTML -----------------------------------------------------------------------------------

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


def write_html(report: Report, path: Path, version: str | None = None) -> None:
    """Write :func:`html_document` to ``path`` atomically."""
    atomic_write(path, html_parts(report, version))


#: The text of each format, as chunks for :func:`atomic_write`.
RENDERERS: dict[str, Callable[[Report, str | None], Iterable[str]]] = {
    "html": html_parts,
    "csv": lambda report, version: [csv_text(report, version)],
    "json": lambda report, version: [json_text(report, version)],
    "md": lambda report, version: [markdown(report, version)],
}
