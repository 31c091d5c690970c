"""The search core: one owner for every trial's life, driven alike by Ray and the simulator.

Pure module. A backend (the Ray Tune adapter, :mod:`hpsearch.simulate`) translates what
happens to its trials into calls of :class:`SearchCore`, and its answers (enums) into
actions:

* :meth:`SearchCore.next_start` -- what a free worker runs next: a retried, preempted
  or resumed trial first, then a new configuration from the study, if the budget admits
  one and a node of the right kind is alive (:class:`~hpsearch.core.starts.Start`;
  :mod:`hpsearch.core.starts`);
* :meth:`SearchCore.started` -- a process took the trial: billing starts;
* :meth:`SearchCore.reported` -- an epoch ended: the study records it, the ledger bills
  it, the budget and then the pruning policy decide
  (:class:`~hpsearch.pruning.decisions.Decision`; :mod:`hpsearch.core.reports`);
* :meth:`SearchCore.ended`, :meth:`SearchCore.preempted`, :meth:`SearchCore.failed`,
  :meth:`SearchCore.halted`, :meth:`SearchCore.moved` -- the process is gone: the trial
  finishes, waits to resume, or is retried, each within its own allowance (a preemption
  is not a failure; it is an involuntary pause: the trial restarts first only if the
  policy still wants it; :mod:`hpsearch.core.exits`);
* :meth:`SearchCore.close` -- the session ends: trials left waiting are settled
  (:mod:`hpsearch.core.closing`).

Every transition goes through :class:`~hpsearch.core.lifecycle.Lifecycle`, in the
session's state (:class:`~hpsearch.core.session.Session`); the study is told every fact
(:class:`~hpsearch.core.ports.StudyPort`, through :class:`~hpsearch.core.notes.TrialNotes`);
money is the ledger's, through the :class:`~hpsearch.money.budget.Accountant`. A continued
run rebuilds all of it from the study (:meth:`SearchCore.restore`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from hpsearch.core.closing import close_session
from hpsearch.core.exits import Exits
from hpsearch.core.failures import FailFast, Failure
from hpsearch.core.lifecycle import Event, Lifecycle, TrialRecord
from hpsearch.core.notes import TrialNotes
from hpsearch.core.ports import EpochReport, Listener, Policy, Quiet, StudyPort
from hpsearch.core.reports import Reports
from hpsearch.core.session import Session
from hpsearch.core.starts import Start, Starts
from hpsearch.errors import HpsearchError
from hpsearch.money.budget import Accountant
from hpsearch.pruning.decisions import Decision
from hpsearch.trials import TrialHistory, TrialState


class SearchCore:
    """Owns the trials of one search session (see the module docstring): the events a
    backend sends, each handed to the part whose job it is, over one shared state.

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
        self.session = Session(new_trials, watch=FailFast(fail_fast),
                               trial_log=trial_log or (lambda number: None))
        listener = listener or Quiet()
        notes = TrialNotes(self.session, study, accountant, policy, listener,
                           clock or accountant.clock)
        self._notes = notes
        self._starts = Starts(self.session, notes, study, accountant, policy, listener,
                              placement)
        self._reports = Reports(self.session, notes, study, accountant, policy, max_epochs)
        self._exits = Exits(self.session, notes, study, accountant, policy, listener,
                            max_epochs=max_epochs, max_failures=max_failures,
                            max_restarts=max_restarts)

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

    # -- the events -------------------------------------------------------------------

    def next_start(self) -> Start:
        """What a free worker runs now (:meth:`hpsearch.core.starts.Starts.next_start`)."""
        return self._starts.next_start()

    def started(self, number: int, node: str | None = None) -> None:
        """A process took trial ``number`` (on ``node``): billing starts."""
        self._starts.started(number, node)

    def reported(self, report: EpochReport) -> Decision:
        """An epoch ended: record it, bill it, then let the budget and the policy decide
        (:meth:`hpsearch.core.reports.Reports.reported`)."""
        return self._reports.reported(report)

    def ended(self, number: int) -> TrialState:
        """Trial ``number``'s process ended without an error; return its new state."""
        return self._exits.ended(number)

    def preempted(self, number: int, reason: str, saved: bool = False) -> TrialState:
        """Trial ``number``'s process or node was taken back (``saved``: it checkpointed
        everything it trained): an involuntary pause, no failure
        (:meth:`hpsearch.core.exits.Exits.preempted`)."""
        return self._exits.preempted(number, reason, saved)

    def failed(self, number: int, error: str, setup: bool = False) -> TrialState:
        """Trial ``number``'s process raised or died with ``error``
        (:meth:`hpsearch.core.exits.Exits.failed`)."""
        return self._exits.failed(number, error, setup)

    def halted(self, number: int, where: str) -> TrialState:
        """Trial ``number``'s process stopped for lack of space at ``where``, and so must
        the session (:meth:`hpsearch.core.exits.Exits.halted`)."""
        return self._exits.halted(number, where)

    def moved(self, number: int, reason: str, requeue: bool) -> TrialState:
        """Trial ``number`` must run elsewhere, or FAILED with ``reason``
        (:meth:`hpsearch.core.exits.Exits.moved`)."""
        return self._exits.moved(number, reason, requeue)

    def close(self, interrupted: bool = False) -> list[int]:
        """End the session; return the trials that stay unfinished for the next one
        (:func:`hpsearch.core.closing.close_session`; ``interrupted``: settle nothing)."""
        return close_session(self.session, self._notes, self.accountant, self.study,
                             interrupted)

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

    @property
    def trials(self) -> Lifecycle:
        return self.session.trials

    @property
    def queue(self) -> deque[int]:
        return self.session.queue

    @property
    def budget_stopped(self) -> deque[int]:
        return self.session.budget_stopped

    @property
    def live(self) -> set[int]:
        return self.session.live

    @property
    def new_left(self) -> int:
        return self.session.new_left

    @new_left.setter
    def new_left(self, value: int) -> None:
        self.session.new_left = value

    @property
    def abort(self) -> HpsearchError | None:
        return self.session.abort

    @abort.setter
    def abort(self, error: HpsearchError | None) -> None:
        self.session.abort = error

    @property
    def abort_reason(self) -> str | None:
        return self.session.abort_reason

    @property
    def halt_reason(self) -> str | None:
        return self.session.halt_reason

    @property
    def closed_reason(self) -> str | None:
        return self.session.closed_reason

    @property
    def closed_by_budget(self) -> bool:
        return self.session.closed_by_budget

    @property
    def failures(self) -> list[Failure]:
        return self.session.failures
