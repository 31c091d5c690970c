"""The library pruners as core policies: Ray Tune's ASHA and Optuna's pruners.

Each wraps the real implementation, driven through its own interface
(``ASHAScheduler.on_trial_add/on_trial_result/on_trial_complete``;
``BasePruner.prune(study, trial)``), behind :class:`hpsearch.core.ports.Policy`, so a real
run and the policy benchmark's simulator drive the very same object through
:class:`hpsearch.core.search.SearchCore`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

from hpsearch.core.lifecycle import TrialState
from hpsearch.core.ports import TrialHistory
from hpsearch.decisions import CONTINUE, Decision, Verdict

#: The metric name the wrapped schedulers see (they only compare values).
_METRIC = "objective"
_EPOCH = "epoch"


def stopped_at(epoch: int, max_epochs: int, metric: str, value: float) -> str:
    """The stop reason of a library pruner (they give none of their own)."""
    return f"stopped at epoch {epoch}/{max_epochs} with {metric}={value!r}"


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

    def on_start(self, number: int) -> None:
        self._trial(number)

    def on_result(self, number: int, epoch: int, value: float) -> Verdict:
        action = self.asha.on_trial_result(None, self._trial(number),
                                           {_EPOCH: epoch, _METRIC: value})
        if action != self._stop:
            return CONTINUE
        return Verdict(Decision.STOP, stopped_at(epoch, self.max_epochs, self.metric, value))

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        if not state.waiting:
            self.asha.on_trial_complete(None, self._trial(number), {_EPOCH: epoch})

    def pick_resume(self, waiting: Sequence[int]) -> int | None:
        return None


class OptunaPolicy:
    """An Optuna pruner (``MedianPruner``, ``HyperbandPruner``, ...) deciding from a study.

    Args:
        name: Its name in stop records.
        pruner: The Optuna pruner.
        source: ``number -> (optuna.Study, FrozenTrial)`` reading the study of record (a
            real run: the core has recorded the epoch before it asks). None: the policy
            keeps an in-memory Optuna study of the curves it is shown (the simulator,
            whose study of record is not an Optuna one).
        mode: ``max`` or ``min`` (for the in-memory study).
        seed: Names the in-memory study (``HyperbandPruner`` assigns brackets by hashing
            the study name).
        max_epochs: Epochs of a full trial, and ``metric`` the objective's name: for
            stop records.
    """

    def __init__(self, name: str, pruner: Any,
                 source: Callable[[int], tuple[Any, Any]] | None = None,
                 mode: str = "max", seed: int = 0, max_epochs: int = 0,
                 metric: str = "objective"):
        self.name = name
        self.max_epochs, self.metric = max_epochs, metric
        self.pruner = pruner
        self.source = source
        self._own = None
        self._trials: dict[int, Any] = {}
        self._last: dict[int, float] = {}
        if source is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self._own = optuna.create_study(
                study_name=f"{name}-{seed}",
                direction="maximize" if mode == "max" else "minimize", pruner=pruner,
                sampler=optuna.samplers.RandomSampler(seed=seed))

    def restore(self, histories: Sequence[TrialHistory]) -> None:
        # With a source, the pruner reads the study itself: nothing to rebuild.
        if self._own is None:
            return
        for history in sorted(histories, key=lambda h: h.number):
            self.on_start(history.number)
            for epoch, value in sorted(history.values.items()):
                self._trials[history.number].report(value, epoch)
                self._last[history.number] = value
            if history.state.finished:
                self.on_end(history.number, history.last_epoch, history.state)

    def on_start(self, number: int) -> None:
        if self._own is not None and number not in self._trials:
            self._trials[number] = self._own.ask()

    def on_result(self, number: int, epoch: int, value: float) -> Verdict:
        if self._own is not None:
            trial = self._trials[number]
            trial.report(value, epoch)
            self._last[number] = value
            prune = trial.should_prune()
        else:
            study, frozen = self.source(number)
            prune = self.pruner.prune(study, frozen)
        if not prune:
            return CONTINUE
        return Verdict(Decision.STOP, stopped_at(epoch, self.max_epochs, self.metric, value))

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        if self._own is None or state.waiting or number not in self._trials:
            return
        from optuna.trial import TrialState as OptunaState

        trial = self._trials.pop(number)
        if state is TrialState.COMPLETE and number in self._last:
            self._own.tell(trial, self._last[number])
        else:
            self._own.tell(trial, state=OptunaState.PRUNED)

    def pick_resume(self, waiting: Sequence[int]) -> int | None:
        return None
