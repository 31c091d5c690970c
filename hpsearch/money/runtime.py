"""Runtime model: how long a trial's remaining epochs will take, from measured times.

Pure module. A trial's time is a start-up (process, imports, data, model) plus one
duration per epoch. Estimates use medians, so one noisy epoch moves nothing, and leave
the first epoch out once later ones exist (it pays for warm-up: caches, lazy imports,
JIT). Until a trial has its own epochs, the run's other trials stand in for it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

#: Epoch durations an estimate looks back over (recent speed, not the whole history).
WINDOW = 5


def epoch_estimate(epoch_times_s: Sequence[float]) -> float | None:
    """Typical seconds per epoch from one trial's epoch durations (oldest first).

    The median of the last ``WINDOW`` epochs after the first; the first alone if it is
    all there is; None for no epochs.
    """
    times = [t for t in epoch_times_s if t >= 0]
    if not times:
        return None
    if len(times) == 1:
        return times[0]
    return statistics.median(times[1:][-WINDOW:])


@dataclass
class TrialTiming:
    """Measured times of one trial."""

    startup_s: float | None = None
    epoch_times_s: list[float] = field(default_factory=list)

    def epoch_s(self) -> float | None:
        return epoch_estimate(self.epoch_times_s)


@dataclass
class RunTiming:
    """Measured times of every trial of a run, and estimates drawn from them."""

    max_epochs: int
    trials: dict[int, TrialTiming] = field(default_factory=dict)

    def record_epoch(self, trial: int, epoch_time_s: float,
                     startup_s: float | None = None) -> None:
        """Add one epoch's duration (and, for a first epoch, the start-up before it)."""
        timing = self.trials.setdefault(trial, TrialTiming())
        timing.epoch_times_s.append(max(0.0, epoch_time_s))
        if startup_s is not None and timing.startup_s is None:
            timing.startup_s = max(0.0, startup_s)

    def restore(self, trial: int, epoch_times_s, startup_s: float | None = None) -> None:
        """Take back a trial's measured times recorded by an earlier session."""
        if not epoch_times_s and startup_s is None:
            return
        timing = self.trials.setdefault(trial, TrialTiming())
        timing.epoch_times_s = [max(0.0, float(t)) for t in epoch_times_s]
        if startup_s is not None:
            timing.startup_s = max(0.0, float(startup_s))

    def epoch_s(self, trial: int | None = None) -> float | None:
        """Seconds per epoch of ``trial`` if it has measured epochs, else the run's median."""
        if trial is not None and trial in self.trials:
            own = self.trials[trial].epoch_s()
            if own is not None:
                return own
        estimates = [e for t in self.trials.values() if (e := t.epoch_s()) is not None]
        return statistics.median(estimates) if estimates else None

    def startup_s(self) -> float:
        values = [t.startup_s for t in self.trials.values() if t.startup_s is not None]
        return statistics.median(values) if values else 0.0

    def remaining_s(self, trial: int, epochs_done: int) -> float | None:
        """Expected seconds until ``trial`` finishes ``max_epochs``; None if unknown."""
        epoch = self.epoch_s(trial)
        if epoch is None:
            return None
        return max(0, self.max_epochs - epochs_done) * epoch

    def new_trial_s(self) -> float | None:
        """Expected seconds of a whole new trial; None before any epoch was measured."""
        epoch = self.epoch_s()
        if epoch is None:
            return None
        return self.startup_s() + self.max_epochs * epoch
