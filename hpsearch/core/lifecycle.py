"""Every trial's life: its states, the events that move it, and the legal transitions.

Pure module (no Ray, torch, Lightning or Optuna). :class:`Lifecycle` holds one
:class:`TrialRecord` per trial number and is the only code that changes a trial's state
(a :class:`hpsearch.trials.TrialState`, kept below the policies that read it);
:class:`hpsearch.core.search.SearchCore` decides *which* transition to take and calls
:meth:`Lifecycle.move`, which refuses any transition the table does not allow, so an
impossible event (a result from a finished trial, a start of a running one) is a clear
:class:`LifecycleError`, never a silent corruption.

States::

    PENDING ----STARTED----> RUNNING --ENDED--> COMPLETE | PRUNED | PAUSED
      ^  \\                    | |  |             | BUDGET_STOPPED | FAILED
      |   FAILED (no retry)    | |  +--PREEMPTED--> PREEMPTED (or FAILED: out of restarts)
      |      -> FAILED         | |                  | PAUSED | PRUNED | BUDGET_STOPPED
      |                        | +--FAILED------> PENDING (a retry) or FAILED
      +--RESUMED-- PAUSED | PREEMPTED | BUDGET_STOPPED (a later session, more money)
    PAUSED | PREEMPTED | PENDING --CLOSED--> PRUNED | BUDGET_STOPPED | FAILED (session end)
    PENDING | RUNNING --MOVED--> PENDING (placed elsewhere) or FAILED

A preemption is not a failure: it has its own counter and uses no failure retry. It is
an involuntary pause: a preempted trial the policy still wants waits (PREEMPTED) to
restart first, from its latest checkpoint; one it would rather pause is PAUSED like a
trial it paused itself, one it rejects is PRUNED; a trial the policy or the budget had
already stopped when it was taken ends as they said (PAUSED, PRUNED, BUDGET_STOPPED).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hpsearch.pruning.decisions import StopRecord
from hpsearch.errors import HpsearchError
from hpsearch.trials import TrialState


class Event(enum.Enum):
    """What can happen to a trial."""

    ADMITTED = "admitted"  #: a new trial was asked for (it has no state yet)
    RESUMED = "resumed"  #: a waiting trial is queued to start again
    STARTED = "started"  #: a process took it on a node
    REPORTED = "reported"  #: it finished an epoch
    ENDED = "ended"  #: its process ended without an error
    PREEMPTED = "preempted"  #: its process or node was taken back
    FAILED = "failed"  #: its process raised or died
    #: taken off a worker queue before it ran (its node kind is gone), or refused to
    #: train on its node (the node cannot reach the checkpoint storage)
    MOVED = "moved"
    CLOSED = "closed"  #: the session ended while it waited
    RESTORED = "restored"  #: rebuilt from the study at a session's start


_S = TrialState
#: (state before, event) -> the states it may move to. ``None`` is "no such trial yet".
TRANSITIONS: dict[tuple[TrialState | None, Event], frozenset[TrialState]] = {
    (None, Event.ADMITTED): frozenset({_S.PENDING}),
    (_S.PAUSED, Event.RESUMED): frozenset({_S.PENDING}),
    (_S.PREEMPTED, Event.RESUMED): frozenset({_S.PENDING}),
    (_S.BUDGET_STOPPED, Event.RESUMED): frozenset({_S.PENDING}),
    (_S.PENDING, Event.STARTED): frozenset({_S.RUNNING}),
    (_S.RUNNING, Event.REPORTED): frozenset({_S.RUNNING}),
    (_S.RUNNING, Event.ENDED): frozenset({_S.COMPLETE, _S.PRUNED, _S.PAUSED,
                                          _S.BUDGET_STOPPED, _S.FAILED}),
    (_S.RUNNING, Event.PREEMPTED): frozenset({_S.PREEMPTED, _S.PAUSED, _S.PRUNED,
                                              _S.BUDGET_STOPPED, _S.FAILED}),
    (_S.RUNNING, Event.FAILED): frozenset({_S.PENDING, _S.FAILED}),
    # A trial that failed before it ran (refused at its start), or whose node kind
    # vanished while it waited for one.
    (_S.PENDING, Event.FAILED): frozenset({_S.PENDING, _S.FAILED}),
    (_S.PENDING, Event.MOVED): frozenset({_S.PENDING, _S.FAILED}),
    # A trial that refused to train on the node it started on (that node cannot reach
    # the checkpoint storage): placed elsewhere, having trained nothing.
    (_S.RUNNING, Event.MOVED): frozenset({_S.PENDING, _S.FAILED}),
    (_S.PENDING, Event.CLOSED): frozenset({_S.BUDGET_STOPPED, _S.FAILED}),
    (_S.PAUSED, Event.CLOSED): frozenset({_S.PRUNED}),
    (_S.PREEMPTED, Event.CLOSED): frozenset({_S.BUDGET_STOPPED, _S.FAILED}),
    **{(None, Event.RESTORED): frozenset(TrialState)},
}


class LifecycleError(HpsearchError):
    """An event that cannot happen to a trial in its state (a bug, or a corrupt record).

    Args:
        number: The trial.
        state: Its state, or None if it does not exist.
        event: What was asked.
        to: The state the caller wanted, if any.
    """

    def __init__(self, number: int, state: TrialState | None, event: Event,
                 to: TrialState | None = None):
        self.number, self.state, self.event, self.to = number, state, event, to
        where = "does not exist" if state is None else f"is {_name(state)}"
        target = f" to {_name(to)}" if to is not None else ""
        super().__init__(f"trial {number} {where}: it cannot be {_name(event)}{target}")


def _name(value: object) -> str:
    return str(getattr(value, "value", value))


@dataclass
class TrialRecord:
    """What the core knows about one trial (the study holds the same facts durably).

    Attributes:
        number: The Optuna trial number.
        state: Its state.
        epoch: Epochs it has reported (the newest reported epoch).
        value: The objective at ``epoch``.
        checkpoint_epoch: The newest epoch saved in a checkpoint.
        attempts: Processes started for it, this session and earlier ones.
        preemptions: Times it was preempted (counts against ``preemption.max_restarts``).
        failures: Times its process failed and was retried (``search.max_failures``).
        paused_at: The epochs after which it was paused (by its policy, or judged not
            worth a restart after a preemption), oldest first.
        resumes: Times it was picked to train on after a pause.
        stop: Why a policy or the budget stopped or paused it; None while it may go on.
        exit: The state it takes when its process ends (set with ``stop``).
        node: The node of its current or latest attempt.
        spot: Whether that node is a spot node (None when nodes declare no kind).
        error: Why it failed, once it has.
        history: Its objective after each epoch.
        params: Its sampled parameters (what the policy's predictor compares).
    """

    number: int
    state: TrialState
    epoch: int = 0
    value: float | None = None
    checkpoint_epoch: int = 0
    attempts: int = 0
    preemptions: int = 0
    failures: int = 0
    paused_at: list[int] = field(default_factory=list)
    resumes: int = 0
    stop: StopRecord | None = None
    exit: TrialState | None = None
    node: str | None = None
    spot: bool | None = None
    error: str | None = None
    history: dict[int, float] = field(default_factory=dict)
    params: dict = field(default_factory=dict)


class Lifecycle:
    """The state of every trial of a search, changed only through :meth:`move`."""

    def __init__(self) -> None:
        self.trials: dict[int, TrialRecord] = {}

    def get(self, number: int) -> TrialRecord | None:
        return self.trials.get(number)

    def state(self, number: int) -> TrialState | None:
        record = self.trials.get(number)
        return None if record is None else record.state

    def move(self, number: int, event: Event, to: TrialState) -> TrialRecord:
        """Apply ``event`` to trial ``number``, moving it to ``to``.

        Raises:
            LifecycleError: The transition table does not allow it.
        """
        record = self.trials.get(number)
        before = None if record is None else record.state
        allowed = TRANSITIONS.get((before, event), frozenset())
        if to not in allowed:
            raise LifecycleError(number, before, event, to)
        if record is None:
            record = self.trials[number] = TrialRecord(number, to)
        record.state = to
        return record

    def check(self, number: int, event: Event) -> TrialRecord:
        """The record of ``number`` if ``event`` may happen to it now, else raise."""
        record = self.trials.get(number)
        if record is None or not TRANSITIONS.get((record.state, event)):
            raise LifecycleError(number, None if record is None else record.state, event)
        return record

    def in_state(self, *states: TrialState) -> list[int]:
        """Trial numbers in any of ``states``, in number order."""
        return sorted(n for n, r in self.trials.items() if r.state in states)

    def count(self, *states: TrialState) -> int:
        return sum(1 for r in self.trials.values() if r.state in states)
