"""Ray Tune side of the study: a Searcher that asks Optuna, and the Tune callbacks that
tell Optuna how each trial ended.

The scheduler adapter (:mod:`hpsearch.adapters.ray_scheduler`) reports every epoch
before it decides, so that Optuna pruners see the value they judge; these classes only
start and end trials.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any

from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from hpsearch import keys
from hpsearch.adapters.study import StudyRecorder
from hpsearch.budget import Accountant, Admission
from hpsearch.errors import TrialSetupError
from hpsearch.faults import disk_full_cause
from hpsearch.ledger import DONE, FAILED, PREEMPTED, STOPPED

log = logging.getLogger(__name__)


class StudySearcher(Searcher):
    """Starts trials: restarts first (trials preempted, failed within their retries, or
    left running by a stopped driver: the same Optuna trial resumes from its
    checkpoint), then new configurations asked from the Optuna study, once the
    accountant admits a new trial under the budget.

    Args:
        recorder: The study recorder.
        accountant: The run's money.
        metric, mode: The objective.
        new_trials: New configurations this session may ask for.
        restarts: Trial numbers to restart first.
    """

    def __init__(self, recorder: StudyRecorder, accountant: Accountant, metric: str,
                 mode: str, new_trials: int, restarts: list[int] | None = None,
                 placement=None):
        super().__init__(metric=metric, mode=mode)
        self.recorder = recorder
        self.accountant = accountant
        self.new_left = new_trials
        self.restarts: deque[int] = deque(restarts or [])
        self.placement = placement
        self.closed_reason: str | None = None
        self.failed: list[tuple[int, str]] = []

    def restart(self, number: int) -> None:
        """Queue trial ``number`` to start again (from its newest checkpoint)."""
        self.restarts.append(number)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        verdict = self.accountant.admission()
        if verdict.admission is Admission.CLOSED:
            if self.closed_reason is None:
                self.closed_reason = verdict.reason
                log.info("no more trials: %s", verdict.reason)
            return Searcher.FINISHED if not self.recorder.unfinished() else None
        if not self.restarts and self.new_left == 0:
            return None if self.recorder.unfinished() else Searcher.FINISHED
        if not self.restarts and verdict.admission is not Admission.ADMIT:
            return None  # money may free up when running trials finish
        placed: dict[str, Any] = {}
        if self.placement is not None and self.placement.active:
            spot, reason = self.placement.choose()
            if reason is not None:
                return self._cannot_place(reason)
            if spot is None:
                return None  # waiting for a spot node
            placed[keys.SPOT_NODE] = spot
        if self.restarts:
            number, params, seed = self.recorder.resume(trial_id, self.restarts.popleft())
        else:
            number, params, seed = self.recorder.ask(trial_id)
            self.new_left -= 1
        self.accountant.trial_admitted(number)
        return {**params, keys.TRIAL_NUMBER: number, keys.TRIAL_SEED: seed, **placed}

    def _cannot_place(self, reason: str) -> str | None:
        """No node of the required kind: waiting restarts fail, no new trial starts."""
        while self.restarts:
            number = self.restarts.popleft()
            self.recorder.fail_waiting(number, reason)
            self.failed.append((number, reason))
        self.new_left = 0
        if self.closed_reason is None:
            self.closed_reason = reason
            log.warning("no more trials: %s", reason)
        return None if self.recorder.unfinished() else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        # Final states are told by StudyCallback, which also sees the error text.
        pass


def _load_error(trial: Any) -> tuple[BaseException | None, str]:
    """The trial's pickled error and text trace, read where the controller wrote them.

    The controller writes both next to the trial's *local* results before it calls
    the callbacks; ``Trial.get_pickled_error`` reads the synced copy, not there yet.
    """
    import cloudpickle

    error, text = None, ""
    path = trial.pickled_error_file
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                error = cloudpickle.load(f)
        except Exception:  # an exception that cannot be unpickled here
            error = None
    path = trial.error_file
    if path and os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    return error, text


#: Phrases of Ray's errors when a trial's node went away (a spot node taken back).
NODE_LOST = ("node has died", "node was terminated", "nodediederror", "node died")


def error_summary(trial: Any) -> tuple[str, bool, bool]:
    """Why a Ray trial failed: one line, whether it was a setup error, and whether its
    node went away (then it is a preemption, not a failure of the trial)."""
    error, text = _load_error(trial)
    if error is not None:
        cause = getattr(error, "cause", None) or error
        setup = isinstance(cause, TrialSetupError)
        full = f"{type(cause).__name__}: {cause}\n{error}".lower()
        lines = str(cause).strip().splitlines()
        line = lines[-1] if lines else ""
        line = line if setup else f"{type(cause).__name__}: {line.strip()}".rstrip(": ")
        return line, setup, any(p in full for p in NODE_LOST)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    node_lost = any(p in text.lower() for p in NODE_LOST)
    return (lines[-1].strip() if lines else "unknown error"), False, node_lost


class StudyCallback(Callback):
    """Bills each trial in the ledger, tells the study how it ended, and restarts trials
    that were preempted (up to ``preemption.max_restarts``) or failed (up to
    ``search.max_failures``): a preemption is not a failure and uses no retry.

    A :class:`~hpsearch.errors.TrialSetupError` (the trainable's contract broken, the
    objective never logged) would fail every trial the same way: it aborts the run.
    """

    def __init__(self, recorder: StudyRecorder, accountant: Accountant, searcher,
                 max_failures: int, max_restarts: int, store_for=None,
                 preemptions=None, placement=None, on_end=None, on_restart=None):
        self.recorder = recorder
        self.accountant = accountant
        self.searcher = searcher
        self.max_failures = max_failures
        self.max_restarts = max_restarts
        self.store_for = store_for
        self.preemptions = preemptions
        self.placement = placement
        self.on_end = on_end
        self.on_restart = on_restart
        self.abort_reason: str | None = None
        #: Where a trial's write failed for lack of space (the run stops, trials resumable).
        self.disk_full: str | None = None

    def _money(self, number: int | None) -> dict[str, Any]:
        if number is None:
            return {}
        money = self.accountant.ledger.trial_money(number)
        return {} if money is None else money.attrs()

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            self.accountant.trial_started(number)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        last = trial.last_result or {}
        verdict = self.placement.take_verdict(trial.trial_id) if self.placement else None
        if number is not None and verdict is not None:
            # Stopped by the node watchdog before it ever ran.
            action, reason = verdict
            self.accountant.trial_ended(number, STOPPED)
            if action == "replace":
                self.recorder.detach(trial.trial_id)
                self.searcher.restart(number)
                if self.on_restart:
                    self.on_restart(number, "moved", reason, last)
                return
            state = self.recorder.fail(trial.trial_id, reason, self._money(number))
            if state is not None and self.on_end:
                self.on_end(number, state, last, reason)
            return
        if number is not None and last.get(keys.PREEMPTED):
            # A notice: the trial checkpointed its last epoch and stopped: nothing trained
            # after that checkpoint, so nothing is lost.
            if self._restart(trial, number, PREEMPTED, str(last[keys.PREEMPTED]), saved=True):
                return
        if number is not None:
            stopped = self.recorder.stop_of(trial.trial_id) is not None
            self.accountant.trial_ended(number, STOPPED if stopped else DONE)
        state = self.recorder.complete(trial.trial_id, last, self._money(number))
        if state is not None and self.on_end:
            self.on_end(number, state, last, None)

    def _preempted_because(self, trial: Any, number: int, node_lost: bool) -> str | None:
        if self.preemptions is not None:
            reason = self.preemptions.was_killed(trial.trial_id)
            if reason:
                return reason
        if self.store_for is not None:
            note = self.store_for(number).preempted(trial.trial_id)
            if note:
                return f"{note.get('reason', 'preempted')} at epoch {note.get('epoch')}"
        if node_lost:
            return "its node went away"
        return None

    def _restart(self, trial: Any, number: int, outcome: str, reason: str,
                 saved: bool = False) -> bool:
        """Restart ``number`` if its allowance lets it; return whether it was."""
        key, limit = ((keys.ATTR_PREEMPTIONS, self.max_restarts) if outcome == PREEMPTED
                      else (keys.ATTR_FAILURES, self.max_failures))
        count = int(self.recorder.attr(number, key, 0)) + 1
        if count > limit:
            return False
        self.accountant.trial_ended(number, outcome, saved)
        self.recorder.detach(trial.trial_id, {key: count, **self._money(number)})
        self.searcher.restart(number)
        if self.on_restart:
            self.on_restart(number, outcome, reason, trial.last_result or {})
        return True

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        error, trace = _load_error(trial)
        full = disk_full_cause(error, trace)
        if number is not None and full is not None:
            # A full disk is not the trial's fault: no FAIL, no retry used; it stays
            # RUNNING in the study and the next run resumes it from its checkpoint.
            self.accountant.trial_ended(number, FAILED)
            self.recorder.detach(trial.trial_id)
            if self.disk_full is None:
                self.disk_full = full.path or (str(self.store_for(number).folder)
                                               if self.store_for else "the run dir")
            return
        text, setup, node_lost = error_summary(trial)
        if number is not None and not setup:
            preempted = self._preempted_because(trial, number, node_lost)
            if preempted and self._restart(trial, number, PREEMPTED, preempted):
                return
            if not preempted and self._restart(trial, number, FAILED, text):
                return
            if preempted:
                text = f"preempted more than preemption.max_restarts times ({preempted})"
        if number is not None:
            self.accountant.trial_ended(number, FAILED)
        state = self.recorder.fail(trial.trial_id, text, self._money(number))
        if setup and self.abort_reason is None:
            self.abort_reason = text
        if state is not None and self.on_end:
            self.on_end(number, state, trial.last_result, text)


class AbortStopper(Stopper):
    """Stops the whole experiment once the callback has found a fatal setup error."""

    def __init__(self, callback: StudyCallback):
        self.callback = callback

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.callback.abort_reason is not None or self.callback.disk_full is not None
