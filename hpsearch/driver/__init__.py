"""The composition root: config -> study, Ray cluster, scheduler, runner -> results.

``run()`` validates everything it can before writing anything: the config, the
trainable's import path, compatibility with an existing study in the run dir, and that
some Ray node can hold one trial. Only then does it create the run dir:

    runs/<name>/
      space.yaml      the resolved config of the latest session (defaults filled in)
      ledger.jsonl    billed intervals of every trial (money spent and wasted)
      optuna.db       the Optuna study (unless ``storage`` points elsewhere)
      checkpoints/    trial-NNNN/: each trial's checkpoints (atomic, checksummed)
      tune/session-N  Ray Tune's experiment: per-attempt results and errors
      logs/           trial-NNNN.log: each trial's log records (Lightning, warnings)
      hpsearch.log    the driver's log (Ray and Tune warnings, trial errors)

Faults (see :mod:`hpsearch.recovery.faults`): one driver per run dir (a second is refused, exit
2); a read-only run dir is refused up front (exit 2); SIGTERM is handled like Ctrl-C
(exit 143 instead of 130); a full disk stops the run cleanly with every unfinished
trial resumable (exit 75); a study belongs to the run dir whose ledger holds its money
(another run dir on a shared study is refused, exit 2).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch.driver.backend import LightningBackend
from hpsearch.driver.cluster import RaySession, fit_to_cluster
from hpsearch.driver.interrupts import Signals, disk_full, interrupted_text
from hpsearch.driver.logs import attach_log, detach_log
from hpsearch.driver.nothing import finished_study, nothing_to_run
from hpsearch.driver.outputs import RunResult
from hpsearch.driver.ownership import check_existing_study
from hpsearch.driver.prepare import Prepared, prepare
from hpsearch.driver.process import ProcessState
from hpsearch.driver.rundir import (LEDGER_FILE, default_run_dir, missing_dirs,
                                    storage_url_for, undo_start)
from hpsearch.driver.session import Session
from hpsearch.errors import RunAborted, RunFailed, RunInterrupted
from hpsearch.recovery import faults

log = logging.getLogger("hpsearch")

__all__ = ["run", "RunResult", "RunAborted", "RunFailed", "RunInterrupted",
           "LightningBackend", "default_run_dir", "storage_url_for"]


def run(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    *,
    emit: Callable[[str], None] | None = print,
    progress_interval_s: float = 10.0,
    backend: Any = None,
    trainable: str | Callable[..., Any] | None = None,
) -> RunResult:
    """Run (or continue) a search: the Python form of ``python -m hpsearch run``.

    Args:
        source: Path to a ``space.yaml`` or the same content as a mapping.
        overrides: ``{"search.n_trials": 3}`` or ``["search.n_trials=3"]``.
        run_dir: Where results go; default ``runs/<name>/``. An existing run dir with a
            compatible study is continued: its finished trials count toward
            ``search.n_trials`` and its ledger toward ``budget.max_cost``.
        emit: Receives progress lines; ``None`` for silence.
        progress_interval_s: Least seconds between two status lines.
        backend: How trials run; default :class:`LightningBackend` (for benchmarks).
        trainable: The build function itself (a notebook's or a script's, cloudpickled
            to the trial processes), or an import path; replaces the ``trainable`` key,
            which may then be left out. A function is recorded in the study's config as
            ``module:qualname`` (see :func:`hpsearch.spec.trainable.display_name`), so a later
            run with the same function continues the study.

    Returns:
        A :class:`RunResult` with the study, the best trial and the run dir.

    Raises:
        ConfigError: Bad input, or a run dir that cannot be used as it is (read-only,
            held by another driver: :class:`~hpsearch.recovery.faults.RunDirBusy`, or a study
            that belongs to another run dir); nothing was written.
        LedgerCorrupt: A damaged line inside the ledger (``hpsearch repair`` mends it).
        RunAborted: A trial broke the trainable's contract (e.g. the objective is never
            logged): every trial would, so the run stopped at once (exit code 2).
        RunFailed: The first ``search.fail_fast`` trials all failed with the same error,
            or no trial of the session completed (exit code 1).
        RunInterrupted: Ctrl-C or SIGTERM; finished trials are kept, unfinished ones
            resume from their checkpoints.
        DiskFull: A write failed for lack of space; the run stopped cleanly and
            ``resume`` continues it once space is freed.
    """
    with ProcessState():
        return _run(source, overrides, run_dir, emit=emit,
                    progress_interval_s=progress_interval_s, backend=backend,
                    trainable=trainable)


def _run(source, overrides, run_dir, *, emit, progress_interval_s, backend,
         trainable) -> RunResult:
    """:func:`run`'s work, inside the process state it restores."""
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


