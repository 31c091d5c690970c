"""Ray Tune's HyperBand as a core policy (:class:`hpsearch.core.ports.Policy`).

The real ``HyperBandScheduler``, driven through its own interface (``on_trial_add``,
``on_trial_result``, ``on_trial_complete``, ``choose_trial_to_run``): it PAUSEs a trial
that reached its bracket's rung until the rest of the bracket has, then stops the bad
ones and has the good ones resumed. The core implements its PAUSE by stopping the
attempt (the checkpoint is kept) and asks :meth:`HyperBandPolicy.pick_resume` when a
worker frees up, which asks the scheduler's ``choose_trial_to_run``. The scheduler sees a
small stand-in for Tune's controller and trials (status, ``stop_trial``), so the
benchmark's simulator drives the very same object through
:class:`hpsearch.core.search.SearchCore` a real run would.

As Tune does with ``num_samples`` trials created ahead of their start, the search's
``n_trials`` trials are added to HyperBand's brackets up front (as pending slots);
the k-th configuration the core starts takes the slot HyperBand last asked to run, else
the next free one. Added only as they start, trials that finish before the next one is
added would leave the first bracket never filled: HyperBand would never halve.
"""

from __future__ import annotations

from typing import Sequence

from hpsearch.trials import TrialHistory, TrialState
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict, stopped_at

#: The metric name the wrapped scheduler sees (it only compares values).
_METRIC = "objective"
_EPOCH = "epoch"


class _Trial:
    """What HyperBand reads of a Tune trial: its id, status and whether it is saving."""

    def __init__(self, number: int | None, status: str):
        self.number = number
        self.trial_id = f"slot-{id(self):x}"
        self.status = status
        self.is_saving = False

    def __repr__(self) -> str:
        return self.trial_id


class _Controller:
    """What HyperBand calls on Tune's controller: ``stop_trial`` of a paused trial (as
    Tune's does: the scheduler's ``on_trial_remove``, then TERMINATED)."""

    def __init__(self, policy: "HyperBandPolicy"):
        self.policy = policy

    def stop_trial(self, trial: _Trial) -> None:
        from ray.tune.experiment import Trial

        if trial.status in (Trial.PENDING, Trial.PAUSED):
            self.policy.hyperband.on_trial_remove(self, trial)
        trial.status = Trial.TERMINATED

    def get_trials(self) -> list[_Trial]:
        return list(self.policy.slots)


class HyperBandPolicy:
    """Ray Tune's ``HyperBandScheduler`` (synchronous HyperBand, with pauses).

    Args:
        mode: ``max`` or ``min``.
        max_epochs: HyperBand's ``max_t``.
        n_trials: Trials of the search (added to the brackets up front).
        reduction_factor: Keep 1/reduction_factor at each halving.
        name: Its name in stop records.
        metric: The objective's name, for stop records.
    """

    def __init__(self, mode: str, max_epochs: int, n_trials: int,
                 reduction_factor: float = 3, name: str = "ray-hyperband",
                 metric: str = "objective"):
        from ray.tune.experiment import Trial
        from ray.tune.schedulers import HyperBandScheduler, TrialScheduler

        self.name = name
        self.metric = metric
        self.max_epochs = max_epochs
        self._status = Trial
        self._actions = TrialScheduler
        self.hyperband = HyperBandScheduler(time_attr=_EPOCH, metric=_METRIC, mode=mode,
                                            max_t=max_epochs,
                                            reduction_factor=reduction_factor)
        self.controller = _Controller(self)
        self.trials: dict[int, _Trial] = {}
        self.slots = [_Trial(None, Trial.PENDING) for _ in range(n_trials)]
        for slot in self.slots:
            self.hyperband.on_trial_add(self.controller, slot)
        self._asked: _Trial | None = None  # the pending slot HyperBand last chose

    def _trial(self, number: int) -> _Trial:
        if number not in self.trials:
            free = [s for s in self.slots if s.number is None]
            if not free:  # more trials than announced: a bracket of its own
                slot = _Trial(None, self._status.PENDING)
                self.hyperband.on_trial_add(self.controller, slot)
            else:
                slot = (self._asked if self._asked is not None and self._asked.number is None
                        else free[0])
            slot.number = number
            self.trials[number] = slot
            self._asked = None
        return self.trials[number]

    def restore(self, histories: Sequence[TrialHistory]) -> None:
        """Replay earlier sessions' curves through HyperBand's brackets, in trial order."""
        for history in sorted(histories, key=lambda h: h.number):
            running = (history.number in self.trials
                       and self.trials[history.number].status == self._status.RUNNING)
            self.on_start(history.number)
            for epoch, value in sorted(history.values.items()):
                self.on_result(history.number, epoch, value)
            trial = self.trials[history.number]
            if running and trial.status == self._status.PAUSED:
                trial.status = self._status.RUNNING  # epochs a running trial restored
            if history.state.finished:
                self.on_end(history.number, history.last_epoch, history.state)
            elif trial.status not in (self._status.TERMINATED, self._status.RUNNING):
                trial.status = (self._status.PAUSED if history.state is TrialState.PAUSED
                                else self._status.PENDING)

    def on_start(self, number: int, params=None) -> None:
        trial = self._trial(number)
        if trial.status != self._status.TERMINATED:
            trial.status = self._status.RUNNING

    def on_result(self, number: int, epoch: int, value: float) -> Verdict:
        trial = self._trial(number)
        if trial.status == self._status.TERMINATED:
            return Verdict(Decision.STOP, stopped_at(epoch, self.max_epochs, self.metric, value))
        action = self.hyperband.on_trial_result(self.controller, trial,
                                                {_EPOCH: epoch, _METRIC: value})
        if action == self._actions.PAUSE:
            trial.status = self._status.PAUSED
            return Verdict(Decision.PAUSE, f"hyperband: paused at epoch {epoch}/"
                           f"{self.max_epochs} until its bracket reaches the rung")
        if action == self._actions.STOP:
            trial.status = self._status.TERMINATED
            return Verdict(Decision.STOP, stopped_at(epoch, self.max_epochs, self.metric, value))
        return CONTINUE

    def on_preempted(self, number: int, epoch: int) -> Verdict:
        """CONTINUE unless HyperBand has terminated the trial since its last result
        (then STOP, as its next result would be told).

        HyperBand pauses only at its bracket's rung, and a trial paused there is paused
        already (the core keeps that decision when the pause's attempt is preempted).
        Between rungs the bracket waits for the trial to reach the next one, so a
        preempted trial restarts at once, as Tune restarts a failed trial. The scheduler
        is not shown the epoch again: it would record it twice in the bracket.
        """
        trial = self._trial(number)
        if trial.status == self._status.TERMINATED:
            return Verdict(Decision.STOP, f"hyperband: its bracket terminated it after "
                           f"epoch {epoch}/{self.max_epochs}")
        return CONTINUE

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        trial = self._trial(number)
        if state.waiting:
            if state is not TrialState.PAUSED and trial.status == self._status.RUNNING:
                trial.status = self._status.PENDING  # preempted or retried: it runs again
            return
        if trial.status != self._status.TERMINATED:
            self.hyperband.on_trial_complete(self.controller, trial, {_EPOCH: epoch})
            trial.status = self._status.TERMINATED

    def pick_resume(self, waiting: Sequence[int], fresh: bool = True) -> int | None:
        """The paused trial HyperBand's ``choose_trial_to_run`` has promoted, if it waits."""
        chosen = self.hyperband.choose_trial_to_run(self.controller)
        if chosen is not None and chosen.number is None:
            self._asked = chosen  # a new configuration: the next one started takes it
        if chosen is None or chosen.number not in waiting:
            return None
        return chosen.number
