"""Ray Tune's ASHA as a core policy (:class:`hpsearch.core.ports.Policy`).

The real ``ASHAScheduler``, driven through its own interface (``on_trial_add``,
``on_trial_result``, ``on_trial_complete``), so a real run and the policy benchmark's
simulator drive the very same object through :class:`hpsearch.core.search.SearchCore`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

from hpsearch.trials import TrialHistory, TrialState
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict, stopped_at

#: The metric name the wrapped scheduler sees (it only compares values).
_METRIC = "objective"
_EPOCH = "epoch"


class AshaPolicy:
    """Ray Tune's ``ASHAScheduler`` (asynchronous successive halving).

    One ASHA trial per study trial number: a trial restarted after a preemption or
    failure keeps its bracket and its rung records.

    Args:
        mode: ``max`` or ``min``.
        max_epochs: ASHA's ``max_t``.
        grace_period: Epochs before the first rung.
        reduction_factor: Keep 1/reduction_factor at each rung.
        name: Its name in stop records.
        metric: The objective's name, for stop records.
    """

    def __init__(self, mode: str, max_epochs: int, grace_period: int = 1,
                 reduction_factor: float = 3, name: str = "asha", metric: str = "objective"):
        from ray.tune.schedulers import ASHAScheduler, TrialScheduler

        self.name = name
        self.metric = metric
        self._stop = TrialScheduler.STOP
        self.max_epochs = max_epochs
        self.asha = ASHAScheduler(time_attr=_EPOCH, metric=_METRIC, mode=mode,
                                  max_t=max_epochs, grace_period=grace_period,
                                  reduction_factor=reduction_factor)
        self.trials: dict[int, SimpleNamespace] = {}

    def _trial(self, number: int) -> SimpleNamespace:
        if number not in self.trials:
            self.trials[number] = SimpleNamespace(trial_id=f"hps-{number}")
            self.asha.on_trial_add(None, self.trials[number])
        return self.trials[number]

    def restore(self, histories: Sequence[TrialHistory]) -> None:
        """Replay earlier sessions' curves through ASHA's rungs, in trial order."""
        for history in sorted(histories, key=lambda h: h.number):
            trial = self._trial(history.number)
            for epoch, value in sorted(history.values.items()):
                self.asha.on_trial_result(None, trial, {_EPOCH: epoch, _METRIC: value})
            if history.state.finished:
                self.asha.on_trial_complete(None, trial, {_EPOCH: history.last_epoch})

    def on_start(self, number: int, params=None) -> None:
        self._trial(number)

    def on_result(self, number: int, epoch: int, value: float) -> Verdict:
        action = self.asha.on_trial_result(None, self._trial(number),
                                           {_EPOCH: epoch, _METRIC: value})
        if action != self._stop:
            return CONTINUE
        return Verdict(Decision.STOP, stopped_at(epoch, self.max_epochs, self.metric, value))

    def on_preempted(self, number: int, epoch: int) -> Verdict:
        """CONTINUE: a preempted trial restarts, as Tune restarts a failed ASHA trial
        without asking the scheduler. ASHA has no pause, and it already placed this
        epoch in its rungs (a second result at the same epoch would be recorded twice)."""
        return CONTINUE

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        if not state.waiting:
            self.asha.on_trial_complete(None, self._trial(number), {_EPOCH: epoch})

    def pick_resume(self, waiting: Sequence[int], fresh: bool = True) -> int | None:
        return None
