"""A Tune callback that feeds :class:`hpsearch.progress.Progress` from the controller."""

from __future__ import annotations

import logging

from ray.tune import Callback
from ray.tune.experiment import Trial

from hpsearch import keys
from hpsearch.progress import Progress

log = logging.getLogger(__name__)


class ProgressCallback(Callback):
    """Emits throttled status lines; the study callback reports finished trials to it.

    It also says, from a restarted trial's first result, which checkpoints the trial
    set aside (corrupt, or not loadable as data) and where it resumed instead.
    """

    def __init__(self, progress: Progress):
        self.progress = progress

    def on_step_end(self, iteration, trials, **info) -> None:
        self.progress.tick(sum(1 for t in trials if t.status == Trial.RUNNING))

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        rejected = result.get(keys.CHECKPOINTS_REJECTED)
        if not rejected:
            return
        number = trial.config.get(keys.TRIAL_NUMBER)
        start = int(result.get(keys.START_EPOCH, 0) or 0)
        for name, reason in rejected:
            log.warning("trial %s: checkpoint %s is corrupt (%s); resumed from epoch %d",
                        number, name, reason, start)
        self.progress.checkpoint_fallback(number, rejected, start)
