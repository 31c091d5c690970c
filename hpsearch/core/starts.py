"""Starting trials: what a free worker runs next, and handing it out.

Pure module. :meth:`Starts.next_start` answers a free worker: a retried, preempted or
resumed trial first, then a trial the budget stopped in an earlier session, then a
paused trial the policy picks, then a new configuration from the study; each only if
the budget admits it and a node of the right kind is alive (:class:`Start`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from hpsearch import keys
from hpsearch.core.failures import Failure
from hpsearch.core.lifecycle import Event, TrialRecord
from hpsearch.core.notes import TrialNotes
from hpsearch.core.ports import Listener, Policy, StudyPort
from hpsearch.core.session import Session
from hpsearch.money.budget import Accountant, Admission
from hpsearch.trials import TrialState


class StartKind(enum.Enum):
    """What a free worker is told to do."""

    NEW = "new"  #: start a new configuration
    RESUME = "resume"  #: start an existing trial again, from its newest checkpoint
    WAIT = "wait"  #: nothing now; ask again later (money or a node may free up)
    FINISHED = "finished"  #: nothing more this session


@dataclass(frozen=True)
class Start:
    """The answer of :meth:`Starts.next_start`.

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


class Starts:
    """Decides what a free worker runs and hands it out.

    Args:
        session: The session's trials and queues.
        notes: Writes down what became of a trial.
        study: The study of record (new trials come from it).
        accountant: The run's money (admission).
        policy: The pruning policy (picks a paused trial to resume).
        listener: Shown what happens.
        placement: Chooses spot or on-demand nodes (None: trials run anywhere).
    """

    def __init__(self, session: Session, notes: TrialNotes, study: StudyPort,
                 accountant: Accountant, policy: Policy, listener: Listener,
                 placement: Any = None):
        self.session = session
        self.notes = notes
        self.study = study
        self.accountant = accountant
        self.policy = policy
        self.listener = listener
        self.placement = placement

    def next_start(self) -> Start:
        """What a free worker runs now (see :class:`StartKind`)."""
        session = self.session
        if session.abort is not None or session.halt_reason is not None:
            return self._idle(session.abort_reason or session.halt_reason)
        stop = self.accountant.run_stop_reason()
        verdict = None if stop is not None or session.queue else self.accountant.admission()
        if stop is not None or (verdict is not None
                                and verdict.admission is Admission.CLOSED):
            reason = stop if stop is not None else verdict.reason
            session.close_for(reason, by_budget=True)
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
        session = self.session
        if session.queue:
            return session.queue[0]
        if not admitted:
            return None
        for number in session.budget_stopped:
            # More money now: a trial the budget stopped goes on before anything new,
            # unless its own cap still holds it.
            epoch = session.trials.get(number).epoch
            if self.accountant.trial_stop_reason(number, epoch) is None:
                return number
        waiting = session.trials.in_state(TrialState.PAUSED)
        if waiting:
            pick = self.policy.pick_resume(waiting, fresh=session.new_left > 0)
            if pick is not None:
                return pick
        return -1 if session.new_left > 0 else None

    def _hand_out(self, number: int, spot: bool | None) -> Start:
        if number == -1:
            number, params, seed = self.study.ask()
            self.session.new_left -= 1
            self.session.trials.move(number, Event.ADMITTED, TrialState.PENDING)
            kind = StartKind.NEW
        else:
            params, seed = self._resume(number)
            kind = StartKind.RESUME
        record = self.session.trials.get(number)
        record.spot = spot
        record.params = dict(params or {})
        record.stop = record.exit = None
        self.session.live.add(number)
        self.accountant.trial_admitted(number)
        return Start(kind, number, params, seed, spot)

    def _resume(self, number: int) -> tuple[dict[str, Any], int]:
        """Take waiting trial ``number`` off its queue to run again; its params and seed."""
        session = self.session
        if session.queue and session.queue[0] == number:
            session.queue.popleft()
        record: TrialRecord | None = session.trials.get(number)
        was = None if record is None else record.state
        if was is not None and was is not TrialState.PENDING:
            session.trials.move(number, Event.RESUMED, TrialState.PENDING)
        if number in session.budget_stopped:
            session.budget_stopped.remove(number)
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
        return self.study.resume(number)

    def _idle(self, reason: str = "") -> Start:
        kind = StartKind.WAIT if self.session.live else StartKind.FINISHED
        return Start(kind, reason=reason)

    def _cannot_place(self, reason: str) -> None:
        """No node of the required kind: queued trials fail, no new trial starts."""
        session = self.session
        while session.queue:
            waiting = session.queue.popleft()
            record = session.trials.get(waiting)
            if record.state is not TrialState.PENDING:
                # A preempted trial waiting to restart: it was about to start again.
                session.trials.move(waiting, Event.RESUMED, TrialState.PENDING)
            self.notes.finish(record, Event.FAILED, TrialState.FAILED, error=reason)
            session.failures.append(Failure(waiting, reason, None))
        session.new_left = 0
        session.close_for(reason)

    def started(self, number: int, node: str | None = None) -> None:
        """A process took trial ``number`` (on ``node``): billing starts."""
        record = self.session.trials.move(number, Event.STARTED, TrialState.RUNNING)
        record.attempts += 1
        if node is not None:
            record.node = node
        self.accountant.trial_started(number, node)
        self.policy.on_start(number, record.params)
