"""One search session's state: its trials, where each waits, and why the session stops.

Pure module. :class:`Session` is the state the search core's parts share (starting
trials, judging their epochs, handling their ends, closing): each part changes it only
through the lifecycle (:class:`~hpsearch.core.lifecycle.Lifecycle`) and the few queues
and reasons kept here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from hpsearch.core.failures import FailFast, Failure, Verdict
from hpsearch.core.lifecycle import Lifecycle
from hpsearch.errors import HpsearchError, RunFailed


@dataclass
class Session:
    """What one search session holds.

    Attributes:
        trials: Every trial's state (the only code that changes it is the lifecycle).
        new_left: New configurations this session may still start.
        queue: Trials to start again (retried, preempted, resumed) before anything new.
        budget_stopped: Trials the budget stopped in an earlier session: resumed (from
            their checkpoints) before any new trial, once the budget admits one.
        live: Trials handed to a worker and not yet gone.
        closed_reason: Why no new trial starts any more, once none does.
        closed_by_budget: The budget (not a missing node kind) closed the session: more
            money goes on.
        failures: The session's trials that failed for good, in the order they ended.
        abort: Why the session stops at once (RunAborted, RunFailed), once it must.
        halt_reason: Set when the session must stop through no trial's fault (a full
            disk at this path): every unfinished trial stays resumable.
        watch: ``search.fail_fast``: the first trials to end, all failed the same way?
        trial_log: Trial number -> where its log is (named when the session stops).
    """

    new_left: int = 0
    trials: Lifecycle = field(default_factory=Lifecycle)
    queue: deque[int] = field(default_factory=deque)
    budget_stopped: deque[int] = field(default_factory=deque)
    live: set[int] = field(default_factory=set)
    closed_reason: str | None = None
    closed_by_budget: bool = False
    failures: list[Failure] = field(default_factory=list)
    abort: HpsearchError | None = None
    halt_reason: str | None = None
    watch: FailFast = field(default_factory=lambda: FailFast(0))
    trial_log: Callable[[int], str | None] = lambda number: None

    @property
    def abort_reason(self) -> str | None:
        """Why the session stops at once, or None while it goes on."""
        return None if self.abort is None else str(self.abort)

    def close_for(self, reason: str, by_budget: bool = False) -> None:
        """No new trial starts any more, for ``reason`` (the first reason stays)."""
        if self.closed_reason is None:
            self.closed_reason = reason
            self.closed_by_budget = by_budget

    def failed_for_good(self, number: int, error: str, setup: bool = False) -> None:
        """Count trial ``number``'s failure for good (``error``, its log named); stop the
        session if its first trials all failed the same way (``search.fail_fast``)."""
        failure = Failure(number, error, self.trial_log(number))
        self.failures.append(failure)
        if self.abort is None and not setup and self.watch.failed(failure) is Verdict.STOP:
            self.abort = RunFailed(self.watch.message())
