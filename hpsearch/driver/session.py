"""One session of a run: the search core rebuilt from the study, run through Ray Tune
on the run's Ray, then closed and summarised."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable

from hpsearch import keys
from hpsearch.driver.closing import SessionEnd
from hpsearch.driver.cluster import trial_demand
from hpsearch.driver.header import SessionHeader
from hpsearch.driver.interrupts import Signals
from hpsearch.driver.logs import WorkerDeathNotices
from hpsearch.driver.nothing import nothing_left_text
from hpsearch.driver.outputs import RunResult, stopped_early_text, summary
from hpsearch.driver.ownership import check_owner
from hpsearch.driver.policies import pruning_policy
from hpsearch.driver.rundir import trial_log_path
from hpsearch.driver.studymoney import StudyMoney
from hpsearch.driver.tuner import TunerBuilder
from hpsearch.errors import RunFailed, RunInterrupted
from hpsearch.money.fmt import fmt_money
from hpsearch.money.ledger_entries import FAILED
from hpsearch.report.progress import Progress, display_path
from hpsearch.trials import TrialState

log = logging.getLogger("hpsearch")

#: Seconds the run's nodes are expected to stay rented after its last trial ends (Tune
#: noticing the end, the session closing), counted by the budget (measured on a shared
#: 2-core machine: 0.1-0.3 s from the last trial's end to the release).
WRAP_UP_S = 1.0


class Session:
    """One invocation of ``run`` on a run dir: builds the search core, wires the Ray
    adapters around it and runs the Tuner.

    The session's parts live beside it: its first lines (:mod:`.header`), the Tuner
    (:mod:`.tuner`), the study's copy of the money (:mod:`.studymoney`), its end
    (:mod:`.closing`) and summary (:mod:`.outputs`); no decision is made here.
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
        """Write the resolved config, claim the study for this run dir, run the trials
        and summarise; raises the session's error after the summary (none completed)."""
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
            try:
                failed = self._fit(recorder, continuing, concurrency, progress_interval_s)
            except RunInterrupted:
                self._report_interrupted(recorder)
                raise
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

    def _report_interrupted(self, recorder) -> None:
        """Write the report of an interrupted session (Ctrl-C, SIGTERM) from what the
        study holds now, its money first, as a finished session's. Best effort: a
        failure, or another Ctrl-C meanwhile, leaves it to ``hpsearch report``."""
        from hpsearch.adapters.optuna.results import write_study_report

        try:
            self.money.write()
            write_study_report(recorder.study, self.run_path)
        except (Exception, KeyboardInterrupt):  # noqa: BLE001 - derived; the study is kept
            log.warning("the interrupted session's report was not written "
                        "(python -m hpsearch report writes it)", exc_info=True)

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
        # The progress line's best is the study's, as its money is: earlier sessions' too.
        best = recorder.best()
        if best is not None:
            progress.tally.best_number, progress.tally.best_value = best
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
        # Trials this session settles: new ones, restarted ones, and the paused ones
        # (each ends here, resumed by the policy or pruned), so done reaches remaining.
        remaining = core.new_left + len(orphans) + len(stopped) + len(paused)
        if remaining == 0:
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
        return self.end.close(core, progress)

    def _summarise(self, recorder) -> RunResult:
        study = recorder.study
        # The report is written from this same copy in the study: the two agree.
        money = self.money.write()
        stopped_early = stopped_early_text(study, self.end.stop_reason,
                                           self.end.budget_closed)
        return summary(self.config, self.out, study, money, self.price.currency,
                       self.run_path, self.url, self.end.stop_reason, stopped_early)
