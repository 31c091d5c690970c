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


@dataclass(frozen=True)
class Preemptions:
    """Spot instances in the simulation: each running attempt is preempted at seeded
    Poisson times; the work since its last checkpoint is lost, the restart pays
    ``restart_s`` before its first epoch, and every epoch pays ``checkpoint_s``.

    Attributes:
        rate_per_hour: Preemptions per hour of a running trial.
        restart_s: Seconds a restarted trial is busy before it trains again.
        checkpoint_s: Seconds each epoch's checkpoint adds.
        seed: Seeds every attempt's draw.
    """

    rate_per_hour: float
    restart_s: float = 60.0
    checkpoint_s: float = 0.0
    seed: int = 0

    def after_s(self, trial: int, attempt: int) -> float:
        if self.rate_per_hour <= 0:
            return float("inf")
        import random

        return random.Random(f"{self.seed}:{trial}:{attempt}").expovariate(
            self.rate_per_hour / 3600.0)


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
        preempted: ``(time, trial, seconds of work lost, restart seconds that follow)``.
        checkpoint_s: Worker-seconds spent writing checkpoints.
    """

    segments: list[Segment] = field(default_factory=list)
    reports: list[tuple[float, int, int, float, Decision]] = field(default_factory=list)
    epochs_done: dict[int, int] = field(default_factory=dict)
    completed: dict[int, float] = field(default_factory=dict)
    end_s: float = 0.0
    preempted: list[tuple[float, int, float, float]] = field(default_factory=list)
    checkpoint_s: float = 0.0

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
             scheduler: SimScheduler, preemptions: Preemptions | None = None) -> SimResult:
    """Run a search over ``order`` (indices into ``curves``) on ``workers`` workers.

    Epoch ends at the same simulated time are taken in the order they were scheduled, so
    a run is deterministic. With ``preemptions``, a preempted trial restarts (before any
    new configuration) from its last completed epoch; schedulers that define
    ``on_trial_preempted(trial, now_s)`` hear of it.
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    result = SimResult()
    queue = list(order)[::-1]  # pop() takes the next configuration
    restarts: list[int] = []
    # (time, sequence, trial, epoch or 0 for a preemption, attempt)
    events: list[tuple[float, int, int, int, int]] = []
    running: dict[int, tuple[float, int, int]] = {}  # trial -> (start, first epoch, attempt)
    attempts: dict[int, int] = {}
    checkpointed_at: dict[int, float] = {}
    ckpt_s = preemptions.checkpoint_s if preemptions else 0.0
    sequence = 0
    now = 0.0

    def push(t: float, trial: int, epoch: int, attempt: int) -> None:
        nonlocal sequence
        heapq.heappush(events, (t, sequence, trial, epoch, attempt))
        sequence += 1

    def start(trial: int, at: float, restart: bool) -> None:
        done = result.epochs_done.get(trial, 0)
        curve = curves[trial]
        attempt = attempts[trial] = attempts.get(trial, 0) + 1
        scheduler.on_trial_start(trial, at)
        running[trial] = (at, done + 1, attempt)
        checkpointed_at[trial] = at
        setup = curve.startup_s + (preemptions.restart_s if restart else 0.0)
        push(at + setup + curve.epoch_s(done + 1) + ckpt_s, trial, done + 1, attempt)
        if preemptions is not None:
            push(at + preemptions.after_s(trial, attempt), trial, 0, attempt)

    def fill(at: float) -> None:
        while len(running) < workers:
            if restarts:
                start(restarts.pop(0), at, restart=True)
                continue
            trial = scheduler.next_resume(at)
            if trial is None:
                if not queue:
                    return
                trial = queue.pop()
            start(trial, at, restart=False)

    fill(now)
    while events:
        now, _, trial, epoch, attempt = heapq.heappop(events)
        if trial not in running or running[trial][2] != attempt:
            continue  # an event of an attempt that has ended
        seg_start, first, _ = running[trial]
        if epoch == 0:  # preempted
            running.pop(trial)
            done = result.epochs_done.get(trial, 0)
            result.segments.append(Segment(trial, seg_start, now, first, done))
            result.preempted.append((now, trial, now - checkpointed_at[trial],
                                     preemptions.restart_s))
            notify = getattr(scheduler, "on_trial_preempted", None)
            if notify is not None:
                notify(trial, now)
            restarts.append(trial)
            fill(now)
            continue
        curve = curves[trial]
        value = curve.values[epoch - 1]
        result.epochs_done[trial] = epoch
        result.checkpoint_s += ckpt_s
        checkpointed_at[trial] = now
        decision = scheduler.on_result(trial, epoch, value, curve.epoch_s(epoch) + ckpt_s, now)
        result.reports.append((now, trial, epoch, value, decision))
        last = epoch >= curve.epochs
        if decision is Decision.CONTINUE and not last:
            push(now + curve.epoch_s(epoch + 1) + ckpt_s, trial, epoch + 1, attempt)
            continue
        running.pop(trial)
        result.segments.append(Segment(trial, seg_start, now, first, epoch))
        if last:
            result.completed[trial] = now
        scheduler.on_trial_end(trial, epoch, last, now)
        fill(now)
    result.end_s = now
    return result
