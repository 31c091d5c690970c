"""A simulated backend: replay learning curves on W workers in simulated time.

Pure module, no Ray, no sleeping. Each configuration is a :class:`Curve` (the metric
after each epoch and the cumulative seconds it took). :func:`simulate` runs a search over
an ordered list of configurations with ``workers`` trials at a time: an event queue
orders epoch ends by simulated time, so which trial reports next follows the curves'
own epoch times, exactly as it would on a cluster of that many workers, whatever the
speed of this machine. A :class:`SimScheduler` sees every result and decides CONTINUE,
STOP or PAUSE (a paused trial keeps its progress and may be resumed later); when a
worker frees, a paused trial the scheduler wants resumed goes first, else the next
configuration starts.

The result is the full timeline: the busy intervals of every trial, from which money
(busy worker time x price) up to any moment follows.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from hpsearch.decisions import Decision


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve.

    Attributes:
        values: The metric after epochs 1..E.
        cum_time_s: Cumulative seconds at the end of epochs 1..E (non-decreasing).
        startup_s: Seconds before the first epoch of every (re)start.
    """

    values: Sequence[float]
    cum_time_s: Sequence[float]
    startup_s: float = 0.0

    @property
    def epochs(self) -> int:
        return len(self.values)

    def epoch_s(self, epoch: int) -> float:
        """Duration of ``epoch`` (1-based)."""
        before = self.cum_time_s[epoch - 2] if epoch > 1 else 0.0
        return max(0.0, self.cum_time_s[epoch - 1] - before)


class SimScheduler(Protocol):
    """What the simulator asks; the narrow interface every simulated policy implements."""

    def on_trial_start(self, trial: int, now_s: float) -> None:
        """``trial`` starts (or resumes) on a worker."""

    def on_result(self, trial: int, epoch: int, value: float, epoch_s: float,
                  now_s: float) -> Decision:
        """``trial`` finished ``epoch`` with ``value`` after ``epoch_s`` seconds."""

    def on_trial_end(self, trial: int, epoch: int, completed: bool, now_s: float) -> None:
        """``trial`` left its worker after ``epoch``: completed, stopped or paused."""

    def next_resume(self, now_s: float) -> int | None:
        """A paused trial to resume on a free worker, or None."""


@dataclass
class Segment:
    """One stretch of a trial on a worker: busy from ``start_s`` to ``end_s``."""

    trial: int
    start_s: float
    end_s: float
    first_epoch: int
    last_epoch: int


@dataclass
class SimResult:
    """Everything that happened in a simulated run.

    Attributes:
        segments: Busy stretches, in the order they ended.
        reports: ``(time, trial, epoch, value, decision)`` for every result.
        epochs_done: Epochs each trial completed.
        completed: Trials trained to their last epoch, with the time they finished.
        end_s: When the last worker went idle.
    """

    segments: list[Segment] = field(default_factory=list)
    reports: list[tuple[float, int, int, float, Decision]] = field(default_factory=list)
    epochs_done: dict[int, int] = field(default_factory=dict)
    completed: dict[int, float] = field(default_factory=dict)
    end_s: float = 0.0

    def busy_s(self, until_s: float | None = None) -> float:
        """Worker-seconds busy up to ``until_s`` (work in flight counts up to that moment)."""
        total = 0.0
        for seg in self.segments:
            end = seg.end_s if until_s is None else min(seg.end_s, until_s)
            total += max(0.0, end - seg.start_s)
        return total

    def trial_busy_s(self, trial: int) -> float:
        return sum(s.end_s - s.start_s for s in self.segments if s.trial == trial)


def simulate(curves: Sequence[Curve], order: Sequence[int], workers: int,
             scheduler: SimScheduler) -> SimResult:
    """Run a search over ``order`` (indices into ``curves``) on ``workers`` workers.

    Epoch ends at the same simulated time are taken in the order they were scheduled, so
    a run is deterministic.
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    result = SimResult()
    queue = list(order)[::-1]  # pop() takes the next configuration
    events: list[tuple[float, int, int, int]] = []  # (time, sequence, trial, epoch)
    running: dict[int, tuple[float, int]] = {}  # trial -> (segment start, first epoch)
    sequence = 0
    now = 0.0

    def start(trial: int, at: float) -> None:
        nonlocal sequence
        done = result.epochs_done.get(trial, 0)
        curve = curves[trial]
        scheduler.on_trial_start(trial, at)
        running[trial] = (at, done + 1)
        t = at + curve.startup_s + curve.epoch_s(done + 1)
        heapq.heappush(events, (t, sequence, trial, done + 1))
        sequence += 1

    def fill(at: float) -> None:
        while len(running) < workers:
            trial = scheduler.next_resume(at)
            if trial is None:
                if not queue:
                    return
                trial = queue.pop()
            start(trial, at)

    fill(now)
    while events:
        now, _, trial, epoch = heapq.heappop(events)
        curve = curves[trial]
        value = curve.values[epoch - 1]
        result.epochs_done[trial] = epoch
        decision = scheduler.on_result(trial, epoch, value, curve.epoch_s(epoch), now)
        result.reports.append((now, trial, epoch, value, decision))
        last = epoch >= curve.epochs
        if decision is Decision.CONTINUE and not last:
            heapq.heappush(events, (now + curve.epoch_s(epoch + 1), sequence, trial, epoch + 1))
            sequence += 1
            continue
        seg_start, first = running.pop(trial)
        result.segments.append(Segment(trial, seg_start, now, first, epoch))
        if last:
            result.completed[trial] = now
        scheduler.on_trial_end(trial, epoch, last, now)
        fill(now)
    result.end_s = now
    return result
