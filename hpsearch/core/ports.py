"""What the search core needs from the world, as narrow protocols, and plain records.

Pure module. The core (:mod:`hpsearch.core.search`) talks to the study of record, to
the pruning policy and to whoever shows progress only through these protocols; the
composition root passes the real implementations (the Optuna study in
:mod:`hpsearch.adapters.optuna.study`, the policies of :mod:`hpsearch.pruning`), the
simulator passes in-memory ones (:class:`MemoryStudy`), and tests pass their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from hpsearch import keys
from hpsearch.core.lifecycle import Event, TrialRecord
from hpsearch.pruning.decisions import Verdict
from hpsearch.trials import TrialHistory, TrialState


@dataclass(frozen=True)
class EpochReport:
    """One result of a running trial: the epoch it finished and how long it took.

    Attributes:
        number: The trial.
        epoch: Epochs completed (1-based).
        value: The objective after ``epoch``.
        epoch_s: Seconds the epoch took (its checkpoint included, if one was written).
        trial_time_s: Seconds since this process started, or None if unknown.
        start_epoch: Epochs already done when this process started (a resume).
        checkpoint_epoch: The newest epoch saved in a checkpoint; None = this epoch.
        node: The node the process runs on, or None.
        history: ``(epoch, value)`` pairs restored from a checkpoint with the first
            result of a resumed process (epochs a stopped driver may not have recorded).
        result: The backend's whole result, for the study to record what it keeps
            beside the objective (GPU use, OOM rungs, ...).
    """

    number: int
    epoch: int
    value: float
    epoch_s: float
    trial_time_s: float | None = None
    start_epoch: int = 0
    checkpoint_epoch: int | None = None
    node: str | None = None
    history: tuple[tuple[int, float], ...] = ()
    result: Mapping[str, Any] = field(default_factory=dict)

    @property
    def checkpointed(self) -> bool:
        """Whether this epoch's work is in a checkpoint (it can no longer be lost)."""
        return self.checkpoint_epoch is None or self.checkpoint_epoch >= self.epoch

    @property
    def startup_s(self) -> float | None:
        """Seconds the process spent before its first epoch, if this is that epoch."""
        if self.trial_time_s is None or self.start_epoch != self.epoch - 1:
            return None
        return max(0.0, self.trial_time_s - self.epoch_s)


class StudyPort(Protocol):
    """The study of record: where trials are created and every fact about them kept."""

    def ask(self) -> tuple[int, dict[str, Any], int]:
        """A new trial: ``(number, params, seed)``."""

    def resume(self, number: int) -> tuple[dict[str, Any], int]:
        """The ``(params, seed)`` of an existing unfinished trial about to run again."""

    def record_epoch(self, report: EpochReport) -> None:
        """Keep the objective of a new epoch (and what else the report carries)."""

    def set_attrs(self, number: int, attrs: Mapping[str, Any]) -> None:
        """Set facts about a trial (its money, why it stopped, its counters)."""

    def finish(self, number: int, state: TrialState, value: float | None,
               attrs: Mapping[str, Any]) -> None:
        """Tell the final state (COMPLETE, PRUNED, FAILED, BUDGET_STOPPED) with ``attrs``."""

    def histories(self) -> list[TrialHistory]:
        """Every trial of the study so far (for a continued run)."""


class Policy(Protocol):
    """A pruning policy as the core drives it: one decision per new epoch.

    Implementations: :mod:`hpsearch.pruning` (none, cost-aware), and the adapters around
    Ray's ASHA and Optuna's pruners. Policies keep their own view of the curves;
    :meth:`restore` rebuilds it from the study when a run continues.
    """

    name: str

    def restore(self, histories: Sequence[TrialHistory]) -> None:
        """Rebuild what the policy knows from earlier sessions' trials."""

    def on_start(self, number: int, params: Mapping[str, Any] | None = None) -> None:
        """A trial starts (or starts again) on a worker, with its sampled ``params``
        (None where the backend does not know them)."""

    def on_result(self, number: int, epoch: int, value: float) -> Verdict:
        """Decide about a trial that finished ``epoch`` with ``value``."""

    def on_preempted(self, number: int, epoch: int) -> Verdict:
        """Decide about a trial whose process or node was taken back after ``epoch``
        (its newest reported epoch, at least 1), as if it had reported that epoch again
        now: a preemption is an involuntary pause, and the trial restarts only if it is
        still worth it.

        CONTINUE: it restarts before anything else, as a preempted trial always did.
        PAUSE: it waits with the paused trials (its checkpoint kept) and resumes only
        when :meth:`pick_resume` picks it. STOP: it is PRUNED now. The core then tells
        :meth:`on_end` (PREEMPTED, PAUSED or PRUNED) as for any other end. Not asked for
        a trial preempted before its first epoch, after its last one, or once the policy
        or the budget has already stopped or paused it: those keep what they had.
        """

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        """A trial left its worker after ``epoch``, in ``state``."""

    def pick_resume(self, waiting: Sequence[int], fresh: bool = True) -> int | None:
        """A paused trial (of ``waiting``) to resume on a free worker now, or None.

        ``fresh``: a new trial could start instead (False once the search has handed out
        its last new configuration: a paused trial then competes only with idleness).
        """


class Listener(Protocol):
    """Who shows what happens (the progress lines); never decides anything."""

    def trial_finished(self, record: TrialRecord) -> None:
        """``record`` reached a finished state (or was paused) this session."""

    def trial_requeued(self, record: TrialRecord, event: Event, reason: str) -> None:
        """``record`` will start again after ``event`` (PREEMPTED, FAILED: a retry, or
        MOVED to another node kind), for ``reason``."""


class Quiet:
    """A :class:`Listener` that shows nothing."""

    def trial_finished(self, record: TrialRecord) -> None:
        pass

    def trial_requeued(self, record: TrialRecord, event: Event, reason: str) -> None:
        pass


class MemoryStudy:
    """A :class:`StudyPort` in memory: configurations handed out in a fixed order.

    For the simulator and tests. Trial numbers are the indices of ``params`` (so a
    benchmark keys its figures by configuration), in the order of ``order``.

    Args:
        params: The configurations.
        order: Indices of ``params`` in the order new trials take them; default all,
            in order.
        seed: The seed of every trial is ``seed`` (the simulator draws nothing).
    """

    def __init__(self, params: Sequence[Mapping[str, Any]],
                 order: Sequence[int] | None = None, seed: int = 0):
        self.params = [dict(p) for p in params]
        self.order = list(range(len(params)) if order is None else order)
        self.next = 0
        self.seed = seed
        self.values: dict[int, dict[int, float]] = {}
        self.attrs: dict[int, dict[str, Any]] = {}
        self.states: dict[int, TrialState] = {}
        self.finals: dict[int, float | None] = {}

    def ask(self) -> tuple[int, dict[str, Any], int]:
        if self.next >= len(self.order):
            raise IndexError("MemoryStudy: no configuration left")
        number = self.order[self.next]
        self.next += 1
        self.states[number] = TrialState.RUNNING
        return number, dict(self.params[number]), self.seed

    def resume(self, number: int) -> tuple[dict[str, Any], int]:
        return dict(self.params[number]), self.seed

    def record_epoch(self, report: EpochReport) -> None:
        self.values.setdefault(report.number, {}).setdefault(report.epoch, report.value)

    def set_attrs(self, number: int, attrs: Mapping[str, Any]) -> None:
        self.attrs.setdefault(number, {}).update(attrs)

    def finish(self, number: int, state: TrialState, value: float | None,
               attrs: Mapping[str, Any]) -> None:
        self.set_attrs(number, attrs)
        self.states[number] = state
        self.finals[number] = value

    def histories(self) -> list[TrialHistory]:
        """Every trial as a continued run sees it: an unfinished one is RUNNING, or
        PAUSED / BUDGET_STOPPED when its ``lifecycle`` attribute says so (as the Optuna
        study of a real run reads it)."""
        histories = []
        for n, told in sorted(self.states.items()):
            attrs = self.attrs.get(n, {})
            histories.append(TrialHistory(
                n, self._state(n, told), dict(self.values.get(n, {})), params=self.params[n],
                paused_at=list(attrs.get(keys.ATTR_PAUSED_AT, [])),
                resumes=int(attrs.get(keys.ATTR_RESUMES, 0))))
        return histories

    def _state(self, number: int, told: TrialState) -> TrialState:
        if told is not TrialState.RUNNING:
            return told
        recorded = self.attrs.get(number, {}).get(keys.ATTR_LIFECYCLE)
        unfinished = {TrialState.PAUSED.value: TrialState.PAUSED,
                      TrialState.BUDGET_STOPPED.value: TrialState.BUDGET_STOPPED}
        return unfinished.get(recorded, TrialState.RUNNING)

    @property
    def left(self) -> int:
        """Configurations not yet handed out."""
        return len(self.order) - self.next
