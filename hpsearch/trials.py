"""A trial's state and the record of a trial the study keeps: what every layer shares.

Pure leaf module (it imports nothing of hpsearch). The pruning policies read trials in
these terms, the core's state machine (:mod:`hpsearch.core.lifecycle`) moves trials
between these states, and the study adapters translate them to Optuna's; kept below all
of them so a policy needs no import of the core that drives it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


class TrialState(enum.Enum):
    """Where a trial is in its life."""

    PENDING = "pending"  #: admitted; waits for a worker (new, retried or resumed)
    RUNNING = "running"  #: a process trains it
    PAUSED = "paused"  #: the policy paused it; its checkpoint is kept; it may resume
    PREEMPTED = "preempted"  #: its instance was taken back; it waits to resume
    COMPLETE = "complete"  #: trained to its last epoch (or the trainable stopped itself)
    PRUNED = "pruned"  #: a policy stopped it early
    FAILED = "failed"  #: it raised, or was lost more often than allowed
    BUDGET_STOPPED = "budget_stopped"  #: the budget stopped it; more money resumes it

    @property
    def finished(self) -> bool:
        """A state no event of this session leaves (BUDGET_STOPPED too)."""
        return self in FINISHED

    @property
    def waiting(self) -> bool:
        """Not running, not finished: the trial may still start (again)."""
        return self in WAITING


FINISHED = frozenset({TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAILED,
                      TrialState.BUDGET_STOPPED})
WAITING = frozenset({TrialState.PENDING, TrialState.PAUSED, TrialState.PREEMPTED})


@dataclass(frozen=True)
class TrialHistory:
    """A trial as the study remembers it (what a continued run rebuilds from).

    Attributes:
        number: The trial.
        state: Its lifecycle state (RUNNING for a trial a stopped driver left running).
        values: The objective after each epoch recorded.
        epoch_times_s: Measured seconds of its epochs, oldest first.
        startup_s: Seconds before its first epoch, if measured.
        preemptions: Times it was preempted.
        failures: Times it failed and was retried.
        params: Its sampled parameters.
        paused_at: The epochs after which it was paused, oldest first.
        resumes: Times it was picked to train on after a pause.
    """

    number: int
    state: TrialState
    values: Mapping[int, float] = field(default_factory=dict)
    epoch_times_s: Sequence[float] = ()
    startup_s: float | None = None
    preemptions: int = 0
    failures: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    paused_at: Sequence[int] = ()
    resumes: int = 0

    @property
    def last_epoch(self) -> int:
        return max(self.values) if self.values else 0
