"""The run's outputs: what :func:`hpsearch.run` returns, and the summary a session ends
with (its best trials, pauses, money; the report written beside the study)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpsearch import keys
from hpsearch.errors import HpsearchError
from hpsearch.report.progress import display_path, display_url, top_table
from hpsearch.spec import config as config_mod
from hpsearch.spec import objective
from hpsearch.trials import TrialState

log = logging.getLogger("hpsearch")


@dataclass
class RunResult:
    """What :func:`hpsearch.run` returns.

    Attributes:
        study: The Optuna study holding every trial of the run.
        best_trial: The best COMPLETE trial (``optuna.trial.FrozenTrial``), or None.
        run_dir: Where the run's files are.
        storage_url: The Optuna storage URL (for ``optuna-dashboard``).
        spent: Money the whole study has spent (all sessions), in ``currency``: what its
            nodes billed (= ``kept + wasted + idle``).
        currency: The run's currency.
        stop_reason: Why the session stopped before ``n_trials`` (budget), or None.
        kept: Of ``spent``, the trials' shares of their nodes for work kept.
        wasted: Of ``spent``, the trials' shares paid for work lost (preemption, failure).
        idle: Of ``spent``, paid capacity no trial used.
    """

    study: Any
    best_trial: Any
    run_dir: Path
    storage_url: str
    spent: float = 0.0
    currency: str = "USD"
    stop_reason: str | None = None
    kept: float = 0.0
    wasted: float = 0.0
    idle: float = 0.0


def summary(config: config_mod.Config, out: Callable[[str], None], study, money,
            currency: str, run_path: Path, url: str, stop_reason: str | None = None,
            stopped_early: str | None = None, report: bool = True) -> RunResult:
    """Print what the study holds at the end of a session (its best trials, pauses, the
    money of ``money``, the ledger's statement, and ``stopped_early``), write its report
    (unless ``report`` is False: nothing changed since the last one) and return it."""
    from hpsearch.money.statement import summary_lines
    from hpsearch.report.writers import FORMATS

    rows = _state_rows(study)
    best = next((r for r in rows if r["state"] == "COMPLETE"), None)
    out("")
    if rows:
        out(f"Top trials of study '{config.name}' ({len(rows)} finished):")
        for line in top_table(rows, config.objective.metric, config.space):
            out("  " + line)
    if best is not None:
        out(f"Best: trial {best['number']} {config.objective.metric}={best['value']:.4g}")
    else:
        out("No trial completed.")
    paused = _pauses(study)
    if paused is not None:
        out(f"Paused: {paused}")
    for line in summary_lines(money, config.budget.max_cost):
        out(line)
    if stopped_early:
        out(stopped_early)
    report_files = [name for name in FORMATS.values() if (run_path / name).exists()]
    if report:
        try:
            from hpsearch.adapters.optuna.results import write_study_report

            report_files = [p.name for p in write_study_report(study, run_path)]
        except Exception as exc:  # noqa: BLE001 - the study is the record; a report is derived
            log.exception("writing the report failed")
            report_files = []
            # A ReportWriteError names the file and the cause ("disk full at PATH").
            cause = str(exc) if isinstance(exc, HpsearchError) else "see hpsearch.log"
            out(f"Report: not written ({cause}); retry with python -m hpsearch "
                f"report {display_path(run_path)}")
    if report_files:
        out(f"Report: {display_path(run_path / report_files[0])}")
    out(f"Results: {display_path(run_path)}/ (space.yaml, ledger.jsonl, "
        + "".join(f"{name}, " for name in report_files)
        + "tune/, logs/, hpsearch.log)")
    out(f"Dashboard: optuna-dashboard {display_url(url, run_path)}")
    best_trial = study.best_trial if best is not None else None
    return RunResult(study=study, best_trial=best_trial, run_dir=run_path,
                     storage_url=url, spent=money.total, currency=currency,
                     stop_reason=stop_reason, kept=money.kept,
                     wasted=money.wasted, idle=money.idle)


def stopped_early_text(study, stop_reason: str | None, budget_closed: bool) -> str | None:
    """The line saying why a session stopped before ``search.n_trials`` (None if it did
    not), with how to continue when the budget closed it (``budget_closed``)."""
    if not stop_reason:
        return None
    hint = (" Raise the budget and run the same command again to continue the "
            "study" if budget_closed else "")
    stopped = sum(1 for t in study.get_trials(deepcopy=False)
                  if t.user_attrs.get(keys.ATTR_LIFECYCLE) == TrialState.BUDGET_STOPPED.value
                  and not t.state.is_finished())
    if hint and stopped:
        hint += (f": its {stopped} trial(s) stopped by budget resume first, from "
                 f"their checkpoints")
    return f"Stopped early: {stop_reason}.{hint + '.' if hint else ''}"


def _pauses(study) -> str | None:
    """What the policy's pauses came to, as the report says it; None if it paused no
    trial."""
    from hpsearch.report.rows import pauses_of
    from hpsearch.report.summary import pause_summary
    from hpsearch.report.text import pauses_text

    summary = pause_summary([pauses_of(t.user_attrs)
                             for t in study.get_trials(deepcopy=False)])
    return pauses_text(summary) if summary["pauses"] else None


def _state_rows(study: Any) -> list[dict[str, Any]]:
    """The study's finished trials, best first (COMPLETE, then PRUNED, then FAIL)."""
    from optuna.trial import TrialState

    # Best first: the lowest key, so higher-is-better scores are negated.
    sign = -objective.mode_sign("max" if study.direction.name == "MAXIMIZE" else "min")
    order = {TrialState.COMPLETE: 0, TrialState.PRUNED: 1, TrialState.FAIL: 2}
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state not in order:
            continue
        value = t.value
        if value is None and t.intermediate_values:
            value = t.intermediate_values[max(t.intermediate_values)]
        rows.append({
            "number": t.number,
            "state": t.state.name,
            "value": value,
            "epochs": t.user_attrs.get(keys.ATTR_EPOCHS, len(t.intermediate_values)),
            "params": t.params,
            "_key": (order[t.state], sign * value if value is not None else float("inf")),
        })
    rows.sort(key=lambda r: r["_key"])
    return rows
