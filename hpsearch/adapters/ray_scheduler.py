"""The Ray Tune scheduler adapter: every stop decision passes through here.

:class:`RecordingScheduler` wraps the scheduler that decides (FIFO for no pruning, Ray's
``ASHAScheduler``, :class:`OptunaPrunerScheduler` around an Optuna pruner, or
:class:`CostAwareScheduler` around hpsearch's policy). For every result it first reports
the epoch to the study and the accountant, stops the trial if the budget says so, then
asks the inner scheduler; when a trial is stopped before its last epoch it records who
stopped it, why, the predicted final metric and the money saved, so the study marks the
trial PRUNED. A trial stopped by a scheduler looks like a normal completion to every later Ray
hook: this record is the only place that knows the difference.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from hpsearch import keys
from hpsearch.adapters.study import StudyRecorder
from hpsearch.budget import Accountant
from hpsearch.config import Config
from hpsearch.decisions import Decision, StopRecord
from hpsearch.decisions import Verdict
from hpsearch.policy import CostAwarePolicy, CostAwarePruner

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


class CostAwareScheduler(FIFOScheduler):
    """Asks :class:`hpsearch.policy.CostAwarePruner` after each epoch (the same object
    the simulator drives), translating Ray trial ids to study numbers."""

    def __init__(self, recorder: StudyRecorder, pruner: CostAwarePruner):
        super().__init__()
        self.recorder = recorder
        self.pruner = pruner
        self.verdicts: dict[str, Verdict] = {}

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        number = self.recorder.number(trial.trial_id)
        metric = self.recorder.config.objective.metric
        if number is None or keys.EPOCH not in result or metric not in result:
            return TrialScheduler.CONTINUE
        verdict = self.pruner.on_result(number, int(result[keys.EPOCH]), float(result[metric]))
        if verdict.decision is Decision.STOP:
            self.verdicts[trial.trial_id] = verdict
        return TO_RAY[verdict.decision]

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            from hpsearch.core.lifecycle import TrialState

            epoch = int((result or {}).get(keys.EPOCH, 0))
            self.pruner.on_end(number, epoch, TrialState.COMPLETE
                               if epoch >= self.pruner.policy.max_epochs else TrialState.PRUNED)

    def explain(self, trial_id: str) -> tuple[str, float | None] | None:
        verdict = self.verdicts.get(trial_id)
        return None if verdict is None else (verdict.reason, verdict.predicted_final)


class RecordingScheduler(FIFOScheduler):
    """Reports each epoch to the study and the accountant, enforces the budget,
    delegates the pruning decision, and records every stop.

    Args:
        inner: The scheduler that decides about pruning.
        policy: Its name in stop records (``asha``, ``median``, ``cost_aware``, ``none``).
        recorder: The run's study recorder.
        accountant: The run's money and time.
        max_epochs: A STOP at this epoch is the natural end, not a prune.
    """

    def __init__(self, inner: TrialScheduler, policy: str, recorder: StudyRecorder,
                 accountant: Accountant, max_epochs: int, placement=None):
        super().__init__()
        self.inner = inner
        self.policy = policy
        self.recorder = recorder
        self.accountant = accountant
        self.max_epochs = max_epochs
        self.placement = placement

    def set_search_properties(self, metric, mode, **spec) -> bool:
        super().set_search_properties(metric, mode, **spec)
        return self.inner.set_search_properties(metric, mode, **spec)

    def on_trial_add(self, tune_controller, trial) -> None:
        self.inner.on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self.inner.on_trial_error(tune_controller, trial)

    def _account(self, trial_id: str, result: dict[str, Any]) -> int | None:
        """Feed the accountant and mirror the trial's money into the study."""
        number = self.recorder.number(trial_id)
        if number is None or keys.EPOCH not in result:
            return number
        epoch = int(result[keys.EPOCH])
        epoch_s = float(result.get(keys.EPOCH_TIME_S, 0.0))
        startup = None
        if int(result.get(keys.START_EPOCH, 0)) == epoch - 1 and keys.TRIAL_TIME_S in result:
            startup = float(result[keys.TRIAL_TIME_S]) - epoch_s
        node = result.get(keys.NODE_ID)
        if node and self.placement is not None:
            self.accountant.trial_placed(number, self.placement.price_for_node(node))
        checkpointed = int(result.get(keys.CHECKPOINT_EPOCH, epoch)) == epoch
        self.accountant.trial_reported(number, epoch, epoch_s, startup, checkpointed)
        money = self.accountant.ledger.trial_money(number, self.accountant.clock())
        if money is not None:
            self.recorder.set_attrs(trial_id, money.attrs())
        return number

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        self.recorder.report(trial.trial_id, result)
        number = self._account(trial.trial_id, result)
        epoch = int(result.get(keys.EPOCH, 0))
        if number is not None and epoch < self.max_epochs:
            reason = (self.accountant.run_stop_reason()
                      or self.accountant.trial_stop_reason(number, epoch))
            if reason is not None:
                self._record(trial.trial_id, number, epoch, "budget", reason, None)
                return TrialScheduler.STOP
        action = self.inner.on_trial_result(tune_controller, trial, result)
        if FROM_RAY.get(action) is Decision.STOP and epoch < self.max_epochs:
            explained = getattr(self.inner, "explain", lambda _: None)(trial.trial_id)
            if explained is None:
                metric = self.recorder.config.objective.metric
                explained = (f"stopped at epoch {epoch}/{self.max_epochs} with "
                             f"{metric}={result.get(metric)!r}", None)
            self._record(trial.trial_id, number, epoch, self.policy, *explained)
        return action

    def _record(self, trial_id: str, number: int | None, epoch: int, policy: str,
                reason: str, predicted: float | None) -> None:
        saved = None if number is None else self.accountant.cost_to_finish(number, epoch)
        self.recorder.mark_stopped(trial_id, StopRecord(policy, epoch, reason, predicted, saved))

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        self.inner.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.inner.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller):
        if self.placement is not None and self.placement.active:
            # The watchdog: a trial waiting for a node kind that is gone is stopped here;
            # the study callback restarts it on-demand or fails it, as the verdict says.
            for trial, _, _ in self.placement.watch_pending(tune_controller.get_trials()):
                trial.init_local_path()  # Tune's result grid wants every trial's folder
                tune_controller.stop_trial(trial)
        return self.inner.choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        return f"hpsearch {self.policy}: {self.inner.debug_string()}"


def build_scheduler(config: Config, recorder: StudyRecorder, accountant: Accountant,
                    placement=None) -> RecordingScheduler:
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
    elif pruning.policy == "cost_aware":
        inner = CostAwareScheduler(recorder, CostAwarePruner(CostAwarePolicy(
            mode=config.objective.mode,
            max_epochs=config.max_epochs,
            min_epochs=pruning.min_epochs,
            aggressiveness=pruning.aggressiveness,
        ), accountant))
    else:
        inner = FIFOScheduler()
    return RecordingScheduler(inner, pruning.policy, recorder, accountant, config.max_epochs,
                              placement)
