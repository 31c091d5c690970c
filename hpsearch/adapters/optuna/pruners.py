"""Optuna's pruners as core policies (:class:`hpsearch.core.ports.Policy`).

``MedianPruner``, ``HyperbandPruner``, ...: the real pruner, asked through its own
interface (``BasePruner.prune(study, trial)``), reading the study of record in a real
run, so a real run and the policy benchmark's simulator drive the very same object
through :class:`hpsearch.core.search.SearchCore`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hpsearch.trials import TrialHistory, TrialState
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict, stopped_at


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

    def on_start(self, number: int, params=None) -> None:
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

    def on_preempted(self, number: int, epoch: int) -> Verdict:
        """CONTINUE: a preempted trial restarts. An Optuna pruner has no pause, and it
        judged this epoch when it was reported (asked again, it would judge the same
        intermediate value, and a reporting in-memory trial cannot report twice)."""
        return CONTINUE

    def on_end(self, number: int, epoch: int, state: TrialState) -> None:
        if self._own is None or state.waiting or number not in self._trials:
            return
        from optuna.trial import TrialState as OptunaState

        trial = self._trials.pop(number)
        if state is TrialState.COMPLETE and number in self._last:
            self._own.tell(trial, self._last[number])
        else:
            self._own.tell(trial, state=OptunaState.PRUNED)

    def pick_resume(self, waiting: Sequence[int], fresh: bool = True) -> int | None:
        return None
