"""Launching a prepared run: the run dir's lock, the ledger, the study's owner, then
the nothing-to-run path or a session on the run's Ray, with its signal handlers and
log file in place; what a run that could not start leaves is undone."""

from __future__ import annotations

from typing import Callable

from hpsearch.driver.cluster import RaySession, fit_to_cluster
from hpsearch.driver.interrupts import Signals, disk_full, interrupted_text
from hpsearch.driver.logs import attach_log, detach_log
from hpsearch.driver.nothing import finished_study, nothing_to_run
from hpsearch.driver.outputs import RunResult
from hpsearch.driver.ownership import check_existing_study
from hpsearch.driver.prepare import Prepared, prepare
from hpsearch.driver.rundir import LEDGER_FILE, missing_dirs, undo_start
from hpsearch.driver.session import Session
from hpsearch.errors import RunInterrupted
from hpsearch.recovery import faults


def start(source, overrides, run_dir, *, emit, progress_interval_s, backend,
          trainable) -> RunResult:
    """:func:`hpsearch.run`'s work, inside the process state it restores."""
    from hpsearch.money.ledger import Ledger

    out = emit or (lambda line: None)
    ready = prepare(source, overrides, run_dir, backend, trainable, out)
    config, run_path = ready.config, ready.run_path
    # The lock comes first, so that a second driver is refused at once, before it
    # starts Ray or reads anything. A run dir made only to hold it is removed again if
    # the run cannot start (bad input writes nothing).
    made = missing_dirs(run_path)
    run_path.mkdir(parents=True, exist_ok=True)
    lock = faults.RunLock(run_path)
    started = False
    signals = Signals()
    try:
        lock.acquire()
        ledger = Ledger(run_path / LEDGER_FILE, currency=ready.currency)  # reads only
        continuing = check_existing_study(config, ready.url, ledger, run_path)
        finished = finished_study(config, ready.url, ledger) if continuing else None
        if finished is not None:
            # Nothing to run: no Ray started, no node rented, nothing billed.
            started = True
            return nothing_to_run(ready, finished, ledger, out)
        ray_session = RaySession(config.cluster.address)
        with ray_session as ray:
            price, concurrency = fit_to_cluster(ready, ray, ray_session)
            started = True
            return _search(ready, price, ledger, continuing, concurrency, signals, out,
                           progress_interval_s)
    except KeyboardInterrupt:
        if not started:
            undo_start(lock, made, run_path)
            raise
        # A second Ctrl-C while Ray shuts down: the session is already settled.
        raise RunInterrupted(interrupted_text(run_path), signals.exit_code) from None
    except BaseException:
        if not started:
            undo_start(lock, made, run_path)
        raise
    finally:
        lock.release()


def _search(ready: Prepared, price, ledger, continuing: bool, concurrency: int,
            signals: Signals, out: Callable[[str], None],
            progress_interval_s: float) -> RunResult:
    """The search itself, with the run's signal handlers and log file in place; Ctrl-C
    and a full disk become :class:`RunInterrupted` and :class:`~faults.DiskFull`."""
    run_path = ready.run_path
    try:
        with signals:
            handler = attach_log(run_path)
            try:
                session = Session(ready.config, run_path, ready.url, price, ledger, out,
                                   ready.backend, signals, ready.gpu, ready.started_s,
                                   ready.checkpoints, ready.prior)
                return session.run(continuing, concurrency, progress_interval_s)
            finally:
                detach_log(handler)
                ready.checkpoints.close()
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM) outside Tune's loop: nothing is left half done.
        raise RunInterrupted(interrupted_text(run_path), signals.exit_code) from None
    except Exception as exc:
        full = disk_full(exc, run_path, ready.url)
        if full is None:
            raise
        raise full from None
