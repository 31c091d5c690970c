"""Simulated preemption on Ray: really kill trial processes, seeded.

:class:`PreemptionCallback` (a Tune callback) asks
:class:`hpsearch.recovery.preemption.SimulatedPreemptions` when each running attempt is to be
preempted and then kills its process: SIGTERM (a notice: the trial may finish its epoch
within ``preemption.grace_s``, checkpoint and go) or SIGKILL (the process vanishes; the
work since the last checkpoint is lost). It remembers whom it killed so the study
callback books a preemption, not a failure.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

from ray.tune import Callback

from hpsearch import keys
from hpsearch.recovery.preemption import SimulatedPreemptions

log = logging.getLogger(__name__)


class PreemptionCallback(Callback):
    """Kills trial processes at the simulated preemption times.

    Args:
        simulated: The seeded schedule.
        number_of: Maps a Ray trial id to its study trial number (None if unknown).
        kill_signal: ``term`` or ``kill``.
    """

    def __init__(self, simulated: SimulatedPreemptions, number_of, kill_signal: str):
        self.simulated = simulated
        self.number_of = number_of
        self.signal = signal.SIGTERM if kill_signal == "term" else signal.SIGKILL
        self.attempts: dict[int, int] = {}
        self.due: dict[str, float] = {}
        self.killed: dict[str, str] = {}

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        number = self.number_of(trial.trial_id)
        if number is None:
            return
        self.attempts[number] = self.attempts.get(number, 0) + 1
        after = self.simulated.draw_after_s(number, self.attempts[number])
        if after is not None:
            self.due[trial.trial_id] = time.monotonic() + after

    def on_step_end(self, iteration, trials, **info) -> None:
        now = time.monotonic()
        for trial in trials:
            due = self.due.get(trial.trial_id)
            if due is not None and now >= due and trial.status == "RUNNING":
                self._kill(trial, "simulated preemption (rate)")

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        number = self.number_of(trial.trial_id)
        epoch = int(result.get(keys.EPOCH, 0))
        if number is not None and self.simulated.scripted(number, epoch):
            self._kill(trial, f"simulated preemption after epoch {epoch}")

    def _kill(self, trial: Any, reason: str) -> None:
        self.due.pop(trial.trial_id, None)
        pid = (trial.last_result or {}).get("pid")
        if not pid:
            return  # not reporting yet: it will be drawn again on its next attempt
        self.killed[trial.trial_id] = reason
        try:
            os.kill(int(pid), self.signal)
            log.info("%s: killed pid %s of trial %s (%s)", reason, pid,
                     self.number_of(trial.trial_id), self.signal.name)
        except ProcessLookupError:
            self.killed.pop(trial.trial_id, None)

    def __getstate__(self) -> dict:
        return {}  # Tune pickles its callbacks; hpsearch never restores from them

    def was_killed(self, trial_id: str) -> str | None:
        """The reason if this callback preempted the attempt (asked once)."""
        return self.killed.pop(trial_id, None)
