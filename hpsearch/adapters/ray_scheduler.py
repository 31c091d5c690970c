"""The Ray Tune scheduler adapter: every pruning decision passes through here.

:class:`RecordingScheduler` wraps the scheduler that decides (FIFO for no pruning, Ray's
``ASHAScheduler``, or :class:`OptunaPrunerScheduler` around an Optuna pruner). For every
result it first reports the epoch to the study, then asks the inner scheduler, and when
that says STOP before the last epoch it records why, so the study marks the trial
PRUNED. A trial stopped by a scheduler looks like a normal completion to every later Ray
hook: this record is the only place that knows the difference.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from hpsearch import keys
from hpsearch.adapters.study import StudyRecorder
from hpsearch.config import Config
from hpsearch.decisions import Decision, StopRecord

#: The one place Decision meets Ray's strings.
TO_RAY = {
    Decision.CONTINUE: TrialScheduler.CONTINUE,
    Decision.STOP: TrialScheduler.STOP,
    Decision.PAUSE: TrialScheduler.PAUSE,
}
FROM_RAY = {v: k for k, v in TO_RAY.items()}


class OptunaPrunerScheduler(FIFOScheduler):
    """Asks an Optuna pruner (``BasePruner.prune(study, trial)``) after each epoch."""

    def __init__(self, recorder: StudyRecorder, pruner: Any):
        super().__init__()
        self.recorder = recorder
        self.pruner = pruner

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        if self.recorder.number(trial.trial_id) is None:
            return TrialScheduler.CONTINUE
        frozen = self.recorder.frozen(trial.trial_id)
        if self.pruner.prune(self.recorder.study, frozen):
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE


class RecordingScheduler(FIFOScheduler):
    """Reports each epoch to the study, delegates the decision, records every stop.

    Args:
        inner: The scheduler that decides.
        policy: Its name in stop records (``asha``, ``median``, ``none``).
        recorder: The run's study recorder.
        max_epochs: A STOP at this epoch is the natural end, not a prune.
    """

    def __init__(self, inner: TrialScheduler, policy: str, recorder: StudyRecorder,
                 max_epochs: int):
        super().__init__()
        self.inner = inner
        self.policy = policy
        self.recorder = recorder
        self.max_epochs = max_epochs

    def set_search_properties(self, metric, mode, **spec) -> bool:
        super().set_search_properties(metric, mode, **spec)
        return self.inner.set_search_properties(metric, mode, **spec)

    def on_trial_add(self, tune_controller, trial) -> None:
        self.inner.on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self.inner.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        self.recorder.report(trial.trial_id, result)
        action = self.inner.on_trial_result(tune_controller, trial, result)
        epoch = int(result.get(keys.EPOCH, 0))
        if FROM_RAY.get(action) is Decision.STOP and epoch < self.max_epochs:
            metric = self.recorder.config.objective.metric
            self.recorder.mark_stopped(
                trial.trial_id,
                StopRecord(
                    policy=self.policy,
                    epoch=epoch,
                    reason=f"stopped at epoch {epoch}/{self.max_epochs} with "
                    f"{metric}={result.get(metric)!r}",
                ),
            )
        return action

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        self.inner.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.inner.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller):
        return self.inner.choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        return f"hpsearch {self.policy}: {self.inner.debug_string()}"


def build_scheduler(config: Config, recorder: StudyRecorder) -> RecordingScheduler:
    """The scheduler for ``config.pruning.policy``, wrapped so every stop is recorded."""
    pruning = config.pruning
    if pruning.policy == "asha":
        inner: TrialScheduler = ASHAScheduler(
            time_attr=keys.EPOCH,
            max_t=config.max_epochs,
            grace_period=pruning.min_epochs,
            reduction_factor=pruning.reduction_factor,
        )
    elif pruning.policy == "median":
        import optuna

        inner = OptunaPrunerScheduler(
            recorder,
            optuna.pruners.MedianPruner(
                n_startup_trials=pruning.startup_trials,
                n_warmup_steps=pruning.min_epochs,
            ),
        )
    else:
        inner = FIFOScheduler()
    return RecordingScheduler(inner, pruning.policy, recorder, config.max_epochs)
