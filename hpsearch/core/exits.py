"""A trial's process is gone: it finishes, waits to resume, or is retried.

Pure module. :class:`Exits` handles each way a process leaves its worker, each within
its own allowance: it ended (the trial finishes, or pauses as its policy decided), it
was preempted (an involuntary pause, not a failure: its own counter,
``preemption.max_restarts``), it failed (retried while ``search.max_failures`` allows),
it was halted (a full disk: no fault of its own) or moved (its node kind is gone).
"""

from __future__ import annotations

import math

from hpsearch import keys
from hpsearch.core.failures import Failure
from hpsearch.core.lifecycle import Event, TrialRecord
from hpsearch.core.notes import TrialNotes
from hpsearch.core.ports import Listener, Policy, StudyPort
from hpsearch.core.session import Session
from hpsearch.errors import RunAborted
from hpsearch.money.budget import Accountant
from hpsearch.money.ledger_entries import DONE, FAILED, PREEMPTED, STOPPED
from hpsearch.pruning.decisions import Decision
from hpsearch.trials import TrialState


class Exits:
    """Moves a trial whose process left its worker to its next state.

    Args:
        session: The session's trials and queues.
        notes: Writes down what became of a trial.
        study: The study of record.
        accountant: The run's money (billing ends).
        policy: The pruning policy.
        listener: Shown what happens.
        max_epochs: Epochs of a full trial.
        max_failures: Retries of a trial whose process failed (``search.max_failures``).
        max_restarts: Restarts of a preempted trial (``preemption.max_restarts``).
    """

    def __init__(self, session: Session, notes: TrialNotes, study: StudyPort,
                 accountant: Accountant, policy: Policy, listener: Listener, *,
                 max_epochs: int, max_failures: int, max_restarts: int):
        self.session = session
        self.notes = notes
        self.study = study
        self.accountant = accountant
        self.policy = policy
        self.listener = listener
        self.max_epochs = max_epochs
        self.max_failures = max_failures
        self.max_restarts = max_restarts

    def ended(self, number: int) -> TrialState:
        """Trial ``number``'s process ended without an error; return its new state."""
        record = self.session.trials.check(number, Event.ENDED)
        self.session.live.discard(number)
        self.accountant.trial_ended(number, STOPPED if record.stop is not None else DONE)
        metric_error = None
        if record.value is None:
            metric_error = "trial ended without reporting an epoch"
            state = TrialState.FAILED
        elif record.exit is not None:
            state = record.exit
            if state is TrialState.FAILED and record.stop is not None:
                metric_error = record.stop.reason
        elif math.isnan(record.value):
            state, metric_error = TrialState.FAILED, "final objective is NaN"
        else:
            state = TrialState.COMPLETE
        if state is TrialState.PAUSED:
            return self.notes.pause(record, Event.ENDED)
        self.notes.finish(record, Event.ENDED, state, error=metric_error)
        if metric_error is not None:
            self.session.failed_for_good(number, metric_error)
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
        record = self.session.trials.check(number, Event.PREEMPTED)
        self.session.live.discard(number)
        if record.preemptions + 1 > self.max_restarts:
            self.accountant.trial_ended(number, PREEMPTED, saved)
            error = f"preempted more than preemption.max_restarts times ({reason})"
            self.notes.finish(record, Event.PREEMPTED, TrialState.FAILED, error=error)
            self.session.failed_for_good(number, error)
            return TrialState.FAILED
        record.preemptions += 1
        if saved:
            record.checkpoint_epoch = record.epoch
        self.accountant.trial_ended(number, PREEMPTED, saved)
        self.study.set_attrs(number, {keys.ATTR_PREEMPTIONS: record.preemptions,
                                      **self.notes.money(number)})
        if record.stop is None:
            self._judge_preempted(record)
        if record.exit is TrialState.PAUSED:
            return self.notes.pause(record, Event.PREEMPTED)
        if record.exit is not None:
            state = record.exit
            self.notes.finish(record, Event.PREEMPTED, state)
            return state
        self.session.trials.move(number, Event.PREEMPTED, TrialState.PREEMPTED)
        self.policy.on_end(number, record.epoch, TrialState.PREEMPTED)
        self.session.queue.append(number)
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
            self.notes.stop(record, self.policy.name,
                            f"preempted after epoch {record.epoch}; {verdict.reason}",
                            verdict.predicted_final, exits[verdict.decision])

    def failed(self, number: int, error: str, setup: bool = False) -> TrialState:
        """Trial ``number``'s process raised or died with ``error``.

        A setup error (the trainable breaks its contract) would fail every trial the same
        way: it aborts the session. Otherwise the trial is retried from its checkpoint
        while ``search.max_failures`` allows, else FAILED.
        """
        session = self.session
        record = session.trials.check(number, Event.FAILED)
        session.live.discard(number)
        if setup:
            if session.abort is None:
                session.abort = RunAborted(error)
        elif record.failures + 1 <= self.max_failures:
            record.failures += 1
            self.accountant.trial_ended(number, FAILED)
            session.trials.move(number, Event.FAILED, TrialState.PENDING)
            self.study.set_attrs(number, {keys.ATTR_FAILURES: record.failures,
                                          **self.notes.money(number)})
            self.policy.on_end(number, record.epoch, TrialState.PENDING)
            session.queue.append(number)
            self.listener.trial_requeued(record, Event.FAILED, error)
            return TrialState.PENDING
        self.accountant.trial_ended(number, FAILED)
        self.notes.finish(record, Event.FAILED, TrialState.FAILED, error=error)
        session.failed_for_good(number, error, setup)
        return TrialState.FAILED

    def halted(self, number: int, where: str) -> TrialState:
        """Trial ``number``'s process stopped through no fault of its own, and so must
        the session (a write failed for lack of space at ``where``): no FAIL and no retry
        used; the trial waits, unfinished, for the next session, which resumes it from
        its checkpoint."""
        session = self.session
        record = session.trials.check(number, Event.FAILED)
        session.live.discard(number)
        self.accountant.trial_ended(number, FAILED)
        session.trials.move(number, Event.FAILED, TrialState.PENDING)
        session.queue.append(number)
        if session.halt_reason is None:
            session.halt_reason = where
        return record.state

    def moved(self, number: int, reason: str, requeue: bool) -> TrialState:
        """Trial ``number`` was taken off a worker queue before it ran (its node kind is
        gone), or its process refused to train on its node (the node cannot reach the
        checkpoint storage): queued again to run elsewhere (``requeue``), or FAILED
        with ``reason``. Neither a failure nor a preemption: no counter, no retry."""
        session = self.session
        record = session.trials.check(number, Event.MOVED)
        session.live.discard(number)
        self.accountant.trial_ended(number, STOPPED)
        if requeue:
            if record.state is not TrialState.PENDING:
                session.trials.move(number, Event.MOVED, TrialState.PENDING)
            session.queue.appendleft(number)
            self.listener.trial_requeued(record, Event.MOVED, reason)
            return TrialState.PENDING
        self.notes.finish(record, Event.MOVED, TrialState.FAILED, error=reason)
        # Not the trainable's failure: counted, but no evidence for fail-fast.
        session.failures.append(Failure(number, reason, None))
        return TrialState.FAILED
