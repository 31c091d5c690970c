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
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch import keys
from hpsearch.trials import TrialState
from hpsearch.driver.backend import LightningBackend
from hpsearch.driver.closing import SessionEnd
from hpsearch.driver.header import SessionHeader
from hpsearch.driver.cluster import RaySession, fit_to_cluster, trial_demand
from hpsearch.driver.interrupts import Signals, SignalsHeld, disk_full, interrupted_text
from hpsearch.driver.logs import WorkerDeathNotices, attach_log, detach_log
from hpsearch.driver.nothing import finished_study, nothing_left_text, nothing_to_run
from hpsearch.driver.outputs import RunResult, stopped_early_text, summary
from hpsearch.driver.ownership import check_existing_study, check_owner
from hpsearch.driver.policies import pruning_policy
from hpsearch.driver.prepare import Prepared, prepare
from hpsearch.driver.process import ProcessState
from hpsearch.driver.rundir import (LEDGER_FILE, default_run_dir, missing_dirs,
                                    storage_url_for, trial_log_path, undo_start)
from hpsearch.driver.studymoney import StudyMoney
from hpsearch.driver.tuner import TunerBuilder
from hpsearch.errors import RunAborted, RunFailed, RunInterrupted
from hpsearch.money.fmt import fmt_money
from hpsearch.money.ledger_entries import FAILED
from hpsearch.recovery import faults
from hpsearch.report.progress import Progress, display_path

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
                session = _Session(ready.config, run_path, ready.url, price, ledger, out,
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


#: Seconds the run's nodes are expected to stay rented after its last trial ends (Tune
#: noticing the end, the session closing), counted by the budget (measured on a shared
#: 2-core machine: 0.1-0.3 s from the last trial's end to the release).
WRAP_UP_S = 1.0


class _Session:
    """One invocation of ``run`` on a run dir: builds the search core, wires the Ray
    adapters around it and runs the Tuner.

    Past the project's ~250-line rule for a class, on purpose: it is the composition
    root of one session, one short method per part it wires (core, progress, Tuner,
    callback, close, summary), all over the same session facts (config, run dir,
    accountant, output); no decision is made here.
    """

    def __init__(self, config, run_path: Path, url: str, price, ledger,
                 out: Callable[[str], None], backend, signals: Signals | None = None,
                 gpu: Any = None, started_s: float | None = None,
                 checkpoints: Any = None, prior: list | None = None):
        from hpsearch.driver.checkpoints import RunCheckpoints
        from hpsearch.money.budget import Accountant
        from hpsearch.money.nodes import Fleet

        self.config = config
        self.gpu = gpu
        self.run_path = run_path
        self.url = url
        self.price = price
        self.out = out
        self.backend = backend
        self.accountant = Accountant(price, config.budget, ledger, config.max_epochs,
                                     backend.clock, demand=trial_demand(config),
                                     fleet=Fleet.HELD, tail_s=WRAP_UP_S)
        #: When the run started (the backend's clock): its nodes are billed from here.
        self.started_s = backend.clock() if started_s is None else started_s
        #: What earlier sessions spent (before this one rented anything).
        self.spent_before = 0.0
        self.signals = signals or Signals()
        self.end = SessionEnd(self.accountant, backend.clock, run_path, url, self.signals,
                              out)
        self.checkpoints = checkpoints or RunCheckpoints(config, run_path)
        self.prior = prior or []
        self.header = SessionHeader(config, price, run_path, url, self.checkpoints,
                                    self.prior, out)

    def run(self, continuing: bool, concurrency: int, progress_interval_s: float) -> RunResult:
        import yaml

        from hpsearch.adapters.optuna.study import StudyRecorder

        config = self.config
        (self.run_path / "space.yaml").write_text(
            yaml.safe_dump(config.to_dict(), sort_keys=False))
        recorder = StudyRecorder(config, self.url, self.prior)
        self.money = StudyMoney(self.accountant, recorder)
        ledger = self.accountant.ledger
        failing = True
        try:
            owner = recorder.study.user_attrs.get(keys.ATTR_LEDGER_ID)
            if owner is not None and owner != ledger.id:
                # Another run dir took the study between the check and now.
                check_owner(config, self.url, recorder.study.user_attrs, set(), ledger,
                            self.run_path)
            recorder.study.set_user_attr(keys.ATTR_LEDGER_ID, ledger.ensure_id())
            recorder.study.set_user_attr(keys.ATTR_RUN_DIR, str(self.run_path))
            self.checkpoints.for_run(config.name, ledger.id)
            for key, value in self.checkpoints.study_attrs().items():
                recorder.study.set_user_attr(key, value)
            recorder.study.set_user_attr(keys.ATTR_PRICE, self.price.to_dict())
            # Intervals a stopped driver left open end at the last moment it was alive.
            ledger.close_all(self.backend.clock(), FAILED, at_last_event=True)
            failed = self._fit(recorder, continuing, concurrency, progress_interval_s)
            result = self._summarise(recorder)
            failing = False
            if failed is not None:
                raise failed
            return result
        finally:
            try:
                self.money.write()
            except Exception:
                if not failing:
                    raise
                # Already failing (a full disk, say): that error is the one to report.
                log.warning("could not record the study's spend", exc_info=True)
            recorder.close()

    def _core(self, recorder, progress: Progress):
        """The search core of this session, rebuilt from the study."""
        import ray

        from hpsearch.core.placement import Placement
        from hpsearch.core.search import SearchCore
        from hpsearch.report.progress import SessionListener

        config = self.config
        placement = Placement(config, self.price, ray.nodes, gpu=self.gpu)
        self.spent_before = self.accountant.spent()
        # This session's nodes: those up now billed from the run's start, later ones
        # from when they join, each at its declared instance and kind.
        self.accountant.watch_nodes(placement.billed_nodes, since_s=self.started_s)
        core = SearchCore(
            study=recorder, accountant=self.accountant,
            policy=pruning_policy(config, recorder, self.accountant),
            max_epochs=config.max_epochs, new_trials=0,
            max_failures=config.search.max_failures,
            max_restarts=config.preemption.max_restarts, placement=placement,
            fail_fast=config.search.fail_fast, trial_log=self._trial_log,
            listener=SessionListener(progress, lambda level, line: log.log(level, "%s", line)),
            clock=self.backend.clock)
        histories = recorder.histories()
        orphans = core.restore(histories)
        known = len(histories)
        core.new_left = max(0, config.search.n_trials - known)
        return core, placement, orphans, known - len(orphans)

    def _trial_log(self, number: int) -> str:
        return display_path(trial_log_path(self.run_path, number))

    def _progress(self, progress_interval_s: float) -> Progress:
        config, price = self.config, self.price
        accountant = self.accountant

        def shown_spent() -> str:
            # What the console shows is first written down (an alive event), so that
            # a driver killed right after never bills less on resume than it showed.
            now = accountant.heartbeat(force=True)
            return fmt_money(accountant.ledger.spent(now), price.currency)

        progress = Progress(config.objective.metric, 0, self.out, time.monotonic,
                            progress_interval_s, spent=shown_spent, trial_log=self._trial_log)
        progress.tally.mode = config.objective.mode
        return progress

    def _fit(self, recorder, continuing: bool, concurrency: int,
             progress_interval_s: float) -> RunFailed | None:
        """Run the session's trials; the error to raise after the summary when none of
        them completed (a run stopped early raises at once)."""
        from hpsearch.adapters.ray.tune import Attempts

        config, out = self.config, self.out
        progress = self._progress(progress_interval_s)
        core, placement, orphans, done_before = self._core(recorder, progress)
        paused = core.trials.in_state(TrialState.PAUSED)
        stopped = list(core.budget_stopped)
        if continuing and (done_before or orphans):
            self.header.continuing(done_before, orphans, stopped, len(paused),
                                   self.spent_before)
        remaining = core.new_left + len(orphans) + len(stopped)
        if remaining == 0 and not paused:
            out(nothing_left_text(done_before, config.search.n_trials))
            self.end.close_ledger()  # its nodes are released now, not at the next session
            return None
        progress.n_trials = remaining
        self.header.announce(concurrency, remaining)
        builder = TunerBuilder(config, self.run_path, self.backend, self.checkpoints,
                               self.money.beat)
        tuner = builder.tuner(core, recorder, placement, Attempts(), progress, concurrency)
        stdout, sys.stdout = sys.stdout, WorkerDeathNotices(sys.stdout)
        try:
            tuner.fit()
        except BaseException as exc:
            self.end.stopped_by(exc, core)
            raise
        finally:
            sys.stdout = stdout
        with SignalsHeld():
            out(progress.status())
        return self.end.close(core, progress)

    def _summarise(self, recorder) -> RunResult:
        study = recorder.study
        # The report is written from this same copy in the study: the two agree.
        money = self.money.write()
        stopped_early = stopped_early_text(study, self.end.stop_reason,
                                           self.end.budget_closed)
        return summary(self.config, self.out, study, money, self.price.currency,
                       self.run_path, self.url, self.end.stop_reason, stopped_early)
