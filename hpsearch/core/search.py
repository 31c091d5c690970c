"""The search core: one owner for every trial's life, driven alike by Ray and the simulator.

Pure module. A backend (the Ray Tune adapter, :mod:`hpsearch.simulate`) translates what
happens to its trials into calls of :class:`SearchCore`, and its answers (enums) into
actions:

* :meth:`SearchCore.next_start` -- what a free worker runs next: a retried, preempted
  or resumed trial first, then a new configuration from the study, if the budget admits
  one and a node of the right kind is alive (:class:`Start`);
* :meth:`SearchCore.started` -- a process took the trial: billing starts;
* :meth:`SearchCore.reported` -- an epoch ended: the study records it, the ledger bills
  it, the budget and then the pruning policy decide (:class:`~hpsearch.pruning.decisions.Decision`);
* :meth:`SearchCore.ended`, :meth:`SearchCore.preempted`, :meth:`SearchCore.failed`,
  :meth:`SearchCore.moved` -- the process is gone: the trial finishes, waits to resume,
  or is retried, each within its own allowance (a preemption is not a failure; it is an
  involuntary pause: the trial restarts first only if the policy still wants it);
* :meth:`SearchCore.close` -- the session ends: trials left waiting are settled.

Every transition goes through :class:`~hpsearch.core.lifecycle.Lifecycle`; the study is
told every fact (:class:`~hpsearch.core.ports.StudyPort`); money is the ledger's, through
the :class:`~hpsearch.money.budget.Accountant`. A continued run rebuilds all of it from the
study (:meth:`SearchCore.restore`).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from hpsearch import keys
from hpsearch.money.budget import Accountant, Admission
from hpsearch.core.lifecycle import Event, Lifecycle, TrialRecord
from hpsearch.core.ports import EpochReport, Listener, Policy, Quiet, StudyPort
from hpsearch.trials import TrialHistory, TrialState
from hpsearch.pruning.decisions import Decision, StopRecord
from hpsearch.errors import HpsearchError, RunAborted, RunFailed
from hpsearch.core.failures import FailFast, Failure, Verdict
from hpsearch.money.ledger_entries import DONE, FAILED, PREEMPTED, STOPPED


class StartKind(enum.Enum):
    """What a free worker is told to do."""

    NEW = "new"  #: start a new configuration
    RESUME = "resume"  #: start an existing trial again, from its newest checkpoint
    WAIT = "wait"  #: nothing now; ask again later (money or a node may free up)
    FINISHED = "finished"  #: nothing more this session


@dataclass(frozen=True)
class Start:
    """The answer of :meth:`SearchCore.next_start`.

    Attributes:
        kind: What to do.
        number: The trial to start (NEW and RESUME).
        params: Its parameters.
        seed: Its seed.
        spot: The node kind to place it on (True spot, False on-demand, None anywhere).
        reason: Why nothing starts (WAIT, FINISHED), when there is one.
    """

    kind: StartKind
    number: int | None = None
    params: dict[str, Any] | None = None
    seed: int | None = None
    spot: bool | None = None
    reason: str = ""


WAIT = Start(StartKind.WAIT)


#: Who stopped a trial when the budget did (the policy name in its stop record).
BUDGET = "budget"
#: Who stopped a trial whose objective turned NaN (it ends FAILED, with the reason).
DIVERGED = "diverged"


class SearchCore:
    """Owns the trials of one search session (see the module docstring).

    Longer than the project's ~250-line rule for a class, on purpose: it is the one
    owner of every trial's life, and its public methods are the lifecycle's events (each
    short); splitting it would spread one state machine, and the invariants between its
    queue, its live set and the lifecycle table, over several objects.

    Args:
        study: The study of record.
        accountant: The run's money (ledger, runtime model, budget).
        policy: The pruning policy.
        max_epochs: Epochs of a full trial.
        new_trials: New configurations this session may start.
        max_failures: Retries of a trial whose process failed (``search.max_failures``).
        max_restarts: Restarts of a preempted trial (``preemption.max_restarts``).
        placement: Chooses spot or on-demand nodes and prices each node (None: trials
            run anywhere at the run's price).
        fail_fast: ``search.fail_fast``: stop the session once its first this-many
            trials to end all failed with the same error (0: never).
        trial_log: Trial number -> where its log is (named when the session stops).
        listener: Shown what happens (progress lines).
        clock: Seconds; the accountant's clock (wall time in a real run).
    """

    def __init__(self, *, study: StudyPort, accountant: Accountant, policy: Policy,
                 max_epochs: int, new_trials: int, max_failures: int = 0,
                 max_restarts: int = 100, placement: Any = None, fail_fast: int = 0,
                 trial_log: Callable[[int], str | None] | None = None,
                 listener: Listener | None = None,
                 clock: Callable[[], float] | None = None):
        self.study = study
        self.accountant = accountant
        self.policy = policy
        self.max_epochs = max_epochs
        self.new_left = new_trials
        self.max_failures = max_failures
        self.max_restarts = max_restarts
        self.placement = placement
        self.listener = listener or Quiet()
        self.clock = clock or accountant.clock
        self.trials = Lifecycle()
        self.queue: deque[int] = deque()  # trials to start again before anything new
        #: Trials the budget stopped in an earlier session: resumed (from their
        #: checkpoints) before any new trial, once the budget admits one.
        self.budget_stopped: deque[int] = deque()
        self.live: set[int] = set()  # trials handed to a worker and not yet gone
        self.closed_reason: str | None = None
        #: The budget (not a missing node kind) closed the session: more money goes on.
        self.closed_by_budget = False
        self.trial_log = trial_log or (lambda number: None)
        self.watch = FailFast(fail_fast)
        #: The session's trials that failed for good, in the order they ended.
        self.failures: list[Failure] = []
        #: Why the session stops at once (RunAborted, RunFailed), once it must.
        self.abort: HpsearchError | None = None
        #: Set when the session must stop through no trial's fault (a full disk at this
        #: path): every unfinished trial stays resumable.
        self.halt_reason: str | None = None

    @property
    def abort_reason(self) -> str | None:
        """Why the session stops at once, or None while it goes on."""
        return None if self.abort is None else str(self.abort)

    # -- a continued run --------------------------------------------------------------

    def restore(self, histories: list[TrialHistory]) -> list[int]:
        """Rebuild from the study's trials; return the unfinished ones, queued to resume.

        Finished trials keep their state; a trial the study still has RUNNING (left by a
        stopped driver) resumes from its checkpoint before any new trial, a paused one
        stays paused. The policy and the runtime model relearn every curve.
        """
        resumed = []
        for history in histories:
            record = self.trials.move(history.number, Event.RESTORED, history.state)
            record.history = dict(history.values)
            record.params = dict(history.params)
            record.epoch = history.last_epoch
            record.value = history.values.get(record.epoch)
            record.checkpoint_epoch = record.epoch
            record.preemptions, record.failures = history.preemptions, history.failures
            record.paused_at, record.resumes = list(history.paused_at), history.resumes
            if record.state in (TrialState.RUNNING, TrialState.PENDING):
                record.state = TrialState.PENDING
                self.queue.append(history.number)
                resumed.append(history.number)
            elif record.state is TrialState.BUDGET_STOPPED:
                self.budget_stopped.append(history.number)
            self.accountant.restore_timing(history.number, history.epoch_times_s,
                                           history.startup_s)
        self.policy.restore(histories)
        return resumed

    # -- starting trials --------------------------------------------------------------

    def next_start(self) -> Start:
        """What a free worker runs now (see :class:`StartKind`)."""
        if self.abort is not None or self.halt_reason is not None:
            return self._idle(self.abort_reason or self.halt_reason)
        stop = self.accountant.run_stop_reason()
        verdict = None if stop is not None or self.queue else self.accountant.admission()
        if stop is not None or (verdict is not None
                                and verdict.admission is Admission.CLOSED):
            reason = stop if stop is not None else verdict.reason
            if self.closed_reason is None:
                self.closed_reason = reason
                self.closed_by_budget = True
            return self._idle(reason)
        number = self._next_number(verdict is None or verdict.admission is Admission.ADMIT)
        if number is None:
            return self._idle()
        spot = None
        if self.placement is not None and self.placement.active:
            spot, reason = self.placement.choose()
            if reason is not None:
                self._cannot_place(reason)
                return self._idle(reason)
            if spot is None:
                return WAIT  # waiting for a spot node
        return self._hand_out(number, spot)

    def _next_number(self, admitted: bool) -> int | None:
        """The trial to start (-1 for a new one), or None. Queued restarts go first and
        do not wait for admission (their money was committed when they first started);
        only the budget's hard stop (spent >= ``max_cost``) holds them back."""
        if self.queue:
            return self.queue[0]
        if not admitted:
            return None
        for number in self.budget_stopped:
            # More money now: a trial the budget stopped goes on before anything new,
            # unless its own cap still holds it.
            if self.accountant.trial_stop_reason(number, self.trials.get(number).epoch) is None:
                return number
        waiting = self.trials.in_state(TrialState.PAUSED)
        if waiting:
            pick = self.policy.pick_resume(waiting, fresh=self.new_left > 0)
            if pick is not None:
                return pick
        return -1 if self.new_left > 0 else None

    def _hand_out(self, number: int, spot: bool | None) -> Start:
        if number == -1:
            number, params, seed = self.study.ask()
            self.new_left -= 1
            record = self.trials.move(number, Event.ADMITTED, TrialState.PENDING)
            kind = StartKind.NEW
        else:
            if self.queue and self.queue[0] == number:
                self.queue.popleft()
            record = self.trials.get(number)
            was = None if record is None else record.state
            if was is not None and was is not TrialState.PENDING:
                self.trials.move(number, Event.RESUMED, TrialState.PENDING)
            if number in self.budget_stopped:
                self.budget_stopped.remove(number)
            resumed = {}
            if was is TrialState.PAUSED:
                record.resumes += 1
                resumed = {keys.ATTR_RESUMES: record.resumes}
                self.listener.trial_requeued(record, Event.RESUMED,
                                             f"picked by {self.policy.name}")
            if was in (TrialState.PAUSED, TrialState.BUDGET_STOPPED):
                # It runs again: a driver killed from now on must resume it, not keep it
                # paused; the reason it waited no longer holds.
                self.study.set_attrs(number, {keys.ATTR_LIFECYCLE: TrialState.RUNNING.value,
                                              keys.ATTR_STOP_REASON: None, **resumed})
            params, seed = self.study.resume(number)
            kind = StartKind.RESUME
        record = self.trials.get(number)
        record.spot = spot
        record.params = dict(params or {})
        record.stop = record.exit = None
        self.live.add(number)
        self.accountant.trial_admitted(number)
        return Start(kind, number, params, seed, spot)

    def _idle(self, reason: str = "") -> Start:
        kind = StartKind.WAIT if self.live else StartKind.FINISHED
        return Start(kind, reason=reason)

    def _cannot_place(self, reason: str) -> None:
        """No node of the required kind: queued trials fail, no new trial starts."""
        while self.queue:
            waiting = self.queue.popleft()
            record = self.trials.get(waiting)
            if record.state is not TrialState.PENDING:
                # A preempted trial waiting to restart: it was about to start again.
                self.trials.move(waiting, Event.RESUMED, TrialState.PENDING)
            self._finish(record, Event.FAILED, TrialState.FAILED, error=reason)
            self.failures.append(Failure(waiting, reason, None))
        self.new_left = 0
        if self.closed_reason is None:
            self.closed_reason = reason

    def started(self, number: int, node: str | None = None) -> None:
        """A process took trial ``number`` (on ``node``): billing starts."""
        record = self.trials.move(number, Event.STARTED, TrialState.RUNNING)
        record.attempts += 1
        if node is not None:
            record.node = node
        self.accountant.trial_started(number, node)
        self.policy.on_start(number, record.params)

    # -- a running trial --------------------------------------------------------------

    def reported(self, report: EpochReport) -> Decision:
        """An epoch ended: record it, bill it, then let the budget and the policy decide.

        A resumed process re-sends epochs its checkpoint already holds: they are neither
        recorded nor decided again.
        """
        number, epoch = report.number, report.epoch
        record = self.trials.move(number, Event.REPORTED, TrialState.RUNNING)
        restored: dict[int, float] = {}
        for past, value in report.history:
            # Epochs a stopped driver never recorded, restored from the checkpoint.
            if past not in record.history and past < epoch:
                self.study.record_epoch(EpochReport(number, past, value, 0.0))
                record.history[past] = restored[past] = value
        if restored:
            # The policy learns them as it learns an earlier session's epochs (a curve
            # with a hole judges the trial's slope wrongly), without deciding on them.
            self.policy.restore([TrialHistory(number, TrialState.RUNNING, restored)])
        new = epoch not in record.history
        if new:
            self.study.record_epoch(report)
            record.history[epoch] = report.value
        if epoch >= record.epoch:
            record.epoch, record.value = epoch, record.history[epoch]
        record.checkpoint_epoch = (epoch if report.checkpointed
                                   else max(record.checkpoint_epoch, report.checkpoint_epoch))
        self._bill(record, report)
        if record.stop is not None:
            return Decision.PAUSE if record.exit is TrialState.PAUSED else Decision.STOP
        last = epoch >= self.max_epochs
        if new and not last and math.isnan(report.value):
            # A diverged trial: NaN weights stay NaN, so its last value would be NaN too
            # and it would end FAILED then (see ended()). End it now, FAILED, instead of
            # paying for the rest of its epochs.
            self._stop(record, DIVERGED, f"the objective is NaN after epoch {epoch}/"
                       f"{self.max_epochs}: the trial diverged (a NaN objective does not "
                       "recover)", None, TrialState.FAILED)
            return Decision.STOP
        reason = None if last else (self.accountant.run_stop_reason()
                                    or self.accountant.trial_stop_reason(number, epoch))
        if reason is not None:
            self._stop(record, BUDGET, reason, None, TrialState.BUDGET_STOPPED)
            return Decision.STOP
        if not new:
            return Decision.CONTINUE
        # The policy sees the last epoch too (its curves end there), but the trial's
        # natural end is no prune.
        verdict = self.policy.on_result(number, epoch, report.value)
        if last:
            return Decision.CONTINUE
        if verdict.decision is Decision.STOP:
            self._stop(record, self.policy.name, verdict.reason, verdict.predicted_final,
                       TrialState.PRUNED)
        elif verdict.decision is Decision.PAUSE:
            self._stop(record, self.policy.name, verdict.reason, verdict.predicted_final,
                       TrialState.PAUSED)
        return verdict.decision

    def _bill(self, record: TrialRecord, report: EpochReport) -> None:
        """Bill the epoch at its node's price and mirror the trial's money into the study."""
        if report.node:
            record.node = report.node
            self.accountant.trial_placed(record.number, report.node)
        self.accountant.trial_reported(record.number, report.epoch, report.epoch_s,
                                       report.startup_s, report.checkpointed)
        # The one estimate of what is left (its share of its node, the runtime model's
        # seconds): the budget's admission uses the same numbers.
        remaining = self.accountant.timing.remaining_s(record.number, report.epoch)
        self.study.set_attrs(record.number, {
            **self._money(record.number), keys.ATTR_REMAINING_S: remaining,
            keys.ATTR_COST_TO_FINISH: self.accountant.cost_to_finish(record.number,
                                                                    report.epoch)})

    def _stop(self, record: TrialRecord, policy: str, reason: str,
              predicted: float | None, exit_state: TrialState) -> None:
        saved = self.accountant.cost_to_finish(record.number, record.epoch)
        record.stop = StopRecord(policy, record.epoch, reason, predicted, saved)
        record.exit = exit_state
        attrs: dict[str, Any] = {keys.ATTR_STOP_REASON: f"{policy}: {reason}"}
        if predicted is not None:
            attrs[keys.ATTR_PREDICTED_FINAL] = predicted
        if saved is not None:
            attrs[keys.ATTR_SAVED_COST] = saved
        self.study.set_attrs(record.number, attrs)

    # -- a process is gone ------------------------------------------------------------

    def ended(self, number: int) -> TrialState:
        """Trial ``number``'s process ended without an error; return its new state."""
        record = self.trials.check(number, Event.ENDED)
        self.live.discard(number)
        self.accountant.trial_ended(number, STOPPED if record.stop is not None else DONE)
        metric_error = None
        if record.value is None:
            state, metric_error = TrialState.FAILED, "trial ended without reporting an epoch"
        elif record.exit is not None:
            state = record.exit
            if state is TrialState.FAILED and record.stop is not None:
                metric_error = record.stop.reason
        elif math.isnan(record.value):
            state, metric_error = TrialState.FAILED, "final objective is NaN"
        else:
            state = TrialState.COMPLETE
        if state is TrialState.PAUSED:
            return self._pause(record, Event.ENDED)
        self._finish(record, Event.ENDED, state, error=metric_error)
        if metric_error is not None:
            self._fail_fast(Failure(number, metric_error, self.trial_log(number)), False)
        return state

    def preempted(self, number: int, reason: str, saved: bool = False) -> TrialState:
        """Trial ``number``'s process or node was taken back.

        A preemption is an involuntary pause: the policy judges the trial again, as if it
        had reported its newest epoch now (:meth:`~hpsearch.core.ports.Policy.on_preempted`).
        Still worth it, it restarts before anything else; otherwise it joins the paused
        trials (resumed only when the policy picks it, PRUNED at the session's end if
        never) or is PRUNED now, with a stop reason that names the preemption. A trial
        preempted before its first epoch or after its last always restarts; one the
        policy or the budget had already stopped or paused ends as they decided. The
        work since its checkpoint is billed as lost in every case; the preemption counts
        against ``preemption.max_restarts`` whatever follows (it is no failure).

        Args:
            number: The trial.
            reason: What took it (a notice, SIGTERM, a lost node, a simulated kill).
            saved: It checkpointed everything it trained before it went (a notice).

        Returns:
            PREEMPTED (it waits to restart from its checkpoint, first in the queue),
            PAUSED, PRUNED, BUDGET_STOPPED (the budget had stopped it), or FAILED (more
            preemptions than ``preemption.max_restarts``).
        """
        record = self.trials.check(number, Event.PREEMPTED)
        self.live.discard(number)
        if record.preemptions + 1 > self.max_restarts:
            self.accountant.trial_ended(number, PREEMPTED, saved)
            error = f"preempted more than preemption.max_restarts times ({reason})"
            self._finish(record, Event.PREEMPTED, TrialState.FAILED, error=error)
            self._fail_fast(Failure(number, error, self.trial_log(number)), False)
            return TrialState.FAILED
        record.preemptions += 1
        if saved:
            record.checkpoint_epoch = record.epoch
        self.accountant.trial_ended(number, PREEMPTED, saved)
        self.study.set_attrs(number, {keys.ATTR_PREEMPTIONS: record.preemptions,
                                      **self._money(number)})
        if record.stop is None:
            self._judge_preempted(record)
        if record.exit is TrialState.PAUSED:
            return self._pause(record, Event.PREEMPTED)
        if record.exit is not None:
            state = record.exit
            self._finish(record, Event.PREEMPTED, state)
            return state
        self.trials.move(number, Event.PREEMPTED, TrialState.PREEMPTED)
        self.policy.on_end(number, record.epoch, TrialState.PREEMPTED)
        self.queue.append(number)
        self.listener.trial_requeued(record, Event.PREEMPTED, reason)
        return TrialState.PREEMPTED

    def _judge_preempted(self, record: TrialRecord) -> None:
        """Ask the policy whether preempted ``record`` is still worth a restart; a PAUSE
        or STOP is recorded as the policy's stop (its reason naming the preemption)."""
        if record.epoch < 1 or record.epoch >= self.max_epochs:
            # Nothing to judge yet, or nothing left to prune (its natural end).
            return
        verdict = self.policy.on_preempted(record.number, record.epoch)
        exits = {Decision.PAUSE: TrialState.PAUSED, Decision.STOP: TrialState.PRUNED}
        if verdict.decision in exits:
            self._stop(record, self.policy.name,
                       f"preempted after epoch {record.epoch}; {verdict.reason}",
                       verdict.predicted_final, exits[verdict.decision])

    def _pause(self, record: TrialRecord, event: Event) -> TrialState:
        """Move ``record`` (gone from its worker after ``event``) to PAUSED: it stays
        unfinished in the study (it may resume), marked as paused, the epoch it paused
        after added to its record of pauses."""
        number = record.number
        self.trials.move(number, event, TrialState.PAUSED)
        record.paused_at.append(record.epoch)
        self.study.set_attrs(number, {**self._money(number), keys.ATTR_EPOCHS: record.epoch,
                                      keys.ATTR_LIFECYCLE: TrialState.PAUSED.value,
                                      keys.ATTR_PAUSED_AT: list(record.paused_at)})
        self.policy.on_end(number, record.epoch, TrialState.PAUSED)
        self.listener.trial_finished(record)
        return TrialState.PAUSED

    def failed(self, number: int, error: str, setup: bool = False) -> TrialState:
        """Trial ``number``'s process raised or died with ``error``.

        A setup error (the trainable breaks its contract) would fail every trial the same
        way: it aborts the session. Otherwise the trial is retried from its checkpoint
        while ``search.max_failures`` allows, else FAILED.
        """
        record = self.trials.check(number, Event.FAILED)
        self.live.discard(number)
        if setup:
            if self.abort is None:
                self.abort = RunAborted(error)
        elif record.failures + 1 <= self.max_failures:
            record.failures += 1
            self.accountant.trial_ended(number, FAILED)
            self.trials.move(number, Event.FAILED, TrialState.PENDING)
            self.study.set_attrs(number, {keys.ATTR_FAILURES: record.failures,
                                          **self._money(number)})
            self.policy.on_end(number, record.epoch, TrialState.PENDING)
            self.queue.append(number)
            self.listener.trial_requeued(record, Event.FAILED, error)
            return TrialState.PENDING
        self.accountant.trial_ended(number, FAILED)
        self._finish(record, Event.FAILED, TrialState.FAILED, error=error)
        self._fail_fast(Failure(number, error, self.trial_log(number)), setup)
        return TrialState.FAILED

    def _fail_fast(self, failure: Failure, setup: bool) -> None:
        """Count a trial's failure for good; stop the session if its first trials all
        failed the same way (``search.fail_fast``)."""
        self.failures.append(failure)
        if self.abort is None and not setup and self.watch.failed(failure) is Verdict.STOP:
            self.abort = RunFailed(self.watch.message())

    def halted(self, number: int, where: str) -> TrialState:
        """Trial ``number``'s process stopped through no fault of its own, and so must
        the session (a write failed for lack of space at ``where``): no FAIL and no retry
        used; the trial waits, unfinished, for the next session, which resumes it from
        its checkpoint."""
        record = self.trials.check(number, Event.FAILED)
        self.live.discard(number)
        self.accountant.trial_ended(number, FAILED)
        self.trials.move(number, Event.FAILED, TrialState.PENDING)
        self.queue.append(number)
        if self.halt_reason is None:
            self.halt_reason = where
        return record.state

    def moved(self, number: int, reason: str, requeue: bool) -> TrialState:
        """Trial ``number`` was taken off a worker queue before it ran (its node kind is
        gone), or its process refused to train on its node (the node cannot reach the
        checkpoint storage): queued again to run elsewhere (``requeue``), or FAILED
        with ``reason``. Neither a failure nor a preemption: no counter, no retry."""
        record = self.trials.check(number, Event.MOVED)
        self.live.discard(number)
        self.accountant.trial_ended(number, STOPPED)
        if requeue:
            if record.state is not TrialState.PENDING:
                self.trials.move(number, Event.MOVED, TrialState.PENDING)
            self.queue.appendleft(number)
            self.listener.trial_requeued(record, Event.MOVED, reason)
            return TrialState.PENDING
        self._finish(record, Event.MOVED, TrialState.FAILED, error=reason)
        # Not the trainable's failure: counted, but no evidence for fail-fast.
        self.failures.append(Failure(number, reason, None))
        return TrialState.FAILED

    def _finish(self, record: TrialRecord, event: Event, state: TrialState,
                error: str | None = None, quiet: bool = False) -> None:
        """Move ``record`` to a finished ``state`` and tell the study and the listener
        (its billing already ended)."""
        self.trials.move(record.number, event, state)
        record.error = error
        attrs = {**self._money(record.number), keys.ATTR_EPOCHS: record.epoch,
                 keys.ATTR_LIFECYCLE: state.value}
        if error is not None:
            attrs[keys.ATTR_ERROR] = error[:2000]
        value = record.value if state is TrialState.COMPLETE else None
        self.study.finish(record.number, state, value, attrs)
        if state is not TrialState.FAILED:
            self.watch.succeeded()  # the trainable works for some configurations
        self.policy.on_end(record.number, record.epoch, state)
        if not quiet:
            self.listener.trial_finished(record)

    def _money(self, number: int) -> dict[str, Any]:
        money = self.accountant.ledger.trial_money(number, self.clock())
        return {} if money is None else money.attrs()

    # -- the session ends -------------------------------------------------------------

    def close(self, interrupted: bool = False) -> list[int]:
        """End the session; return the trials that stay unfinished for the next one.

        A session that ran out of work (or money) settles what waits: paused trials
        nobody resumed are PRUNED with their reason, trials queued to start again when
        the budget closed are BUDGET_STOPPED (like those the budget stopped while they
        ran, they stay unfinished in the study: a later session with more money resumes
        them first, from their checkpoints). An ``interrupted`` session (Ctrl-C, a
        signal, a full disk) settles nothing: every unfinished trial resumes with the
        next session, paused ones stay paused.
        """
        if interrupted:
            return sorted(self.live | set(self.queue))
        if self.abort is not None:
            # Stopped at once: what was still running ends FAILED, without a line of its
            # own (the run's error says why) and without counting as evidence.
            for number in sorted(self.live):
                self.live.discard(number)
                self.accountant.trial_ended(number, FAILED)
                self._finish(self.trials.get(number), Event.FAILED, TrialState.FAILED,
                             error="run aborted", quiet=True)
        reason = self.closed_reason or "the session ended"
        for number in self.trials.in_state(TrialState.PAUSED):
            record = self.trials.get(number)
            self._finish(record, Event.CLOSED, TrialState.PRUNED)
        while self.queue:
            record = self.trials.get(self.queue.popleft())
            if record.state.waiting and record.number not in self.live:
                if record.stop is None:
                    record.stop = StopRecord(BUDGET, record.epoch, reason)
                    self.study.set_attrs(record.number, {
                        keys.ATTR_STOP_REASON: f"{BUDGET}: {reason}"})
                self._finish(record, Event.CLOSED, TrialState.BUDGET_STOPPED)
        return sorted(self.live)

    # -- what the session shows -------------------------------------------------------

    def record(self, number: int) -> TrialRecord | None:
        return self.trials.get(number)

    def counts(self) -> dict[TrialState, int]:
        """Trials per state."""
        out: dict[TrialState, int] = {}
        for record in self.trials.trials.values():
            out[record.state] = out.get(record.state, 0) + 1
        return out

    @property
    def stop_reason(self) -> str | None:
        """Why the session stopped before its trials were all run, or None."""
        return self.accountant.run_stop_reason() or self.closed_reason
