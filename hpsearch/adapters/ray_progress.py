"""A Tune callback that feeds :class:`hpsearch.progress.Progress` from the controller."""

from __future__ import annotations

from ray.tune import Callback
from ray.tune.experiment import Trial

from hpsearch.progress import Progress


class ProgressCallback(Callback):
    """Emits throttled status lines; the study callback reports finished trials to it."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def on_step_end(self, iteration, trials, **info) -> None:
        self.progress.tick(sum(1 for t in trials if t.status == Trial.RUNNING))
