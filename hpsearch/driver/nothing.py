"""The nothing-to-run path: a continued study whose trials are all finished is told
from the study and the ledger alone (no Ray started, no node rented, nothing billed)."""

from __future__ import annotations

from typing import Any, Callable

from hpsearch.driver.interrupts import SignalsHeld, disk_full
from hpsearch.driver.outputs import RunResult, summary
from hpsearch.driver.prepare import Prepared
from hpsearch.money.fmt import fmt_money
from hpsearch.money.ledger_entries import FAILED
from hpsearch.report.progress import display_path
from hpsearch.spec import config as config_mod


def finished_study(config: config_mod.Config, url: str, ledger) -> Any | None:
    """The study of a continued run with nothing left to run (every trial finished, at
    least ``search.n_trials`` of them, and no trial's interval still open in the
    ledger), else None."""
    import optuna

    from hpsearch.adapters.optuna.study import make_storage

    if ledger.open_trials():
        return None  # a driver died mid-trial: a session settles its trials first
    study = optuna.load_study(study_name=config.name, storage=make_storage(url))
    trials = study.get_trials(deepcopy=False)
    if len(trials) < config.search.n_trials or not all(t.state.is_finished()
                                                        for t in trials):
        return None
    return study


def nothing_left_text(finished: int, n_trials: int) -> str:
    """The line saying a study has run its ``n_trials`` and how to ask for more."""
    return (f"The study already has {finished} finished trial(s) >= search.n_trials "
            f"({n_trials}); raise it with --set search.n_trials=N to run more.")


def nothing_to_run(ready: Prepared, study, ledger, out: Callable[[str], None]) -> RunResult:
    """A continued study whose trials are all finished: say so and what it holds, from
    the study and the ledger alone (the report already written is left as it is)."""
    from hpsearch.money.statement import statement

    config, run_path = ready.config, ready.run_path
    finished = len(study.get_trials(deepcopy=False))
    # Nodes a stopped driver left rented end at the last moment it was alive (as a
    # session's start settles them); then everything is closed, and the statement is
    # the same at any later time.
    try:
        with SignalsHeld():
            ledger.close_all(0.0, FAILED, at_last_event=True)
    except OSError as exc:
        full = disk_full(exc, run_path, ready.url)
        if full is None:
            raise
        raise full from None  # the rental stays open: the next run settles it the same way
    last_s = max([i.until_s() for i in ledger.intervals]
                 + [r.until_s() for r in ledger.rentals], default=0.0)
    money = statement(ledger, last_s)
    out(f"Continuing study '{config.name}' in {display_path(run_path)}: {finished} "
        f"trial(s) finished, {fmt_money(money.total, ready.currency)} spent")
    out(nothing_left_text(finished, config.search.n_trials))
    return summary(config, out, study, money, ready.currency, run_path, ready.url,
                   report=False)
