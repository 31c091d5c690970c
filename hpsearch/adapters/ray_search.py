"""Ray Tune side of the study: a Searcher that asks Optuna, and the Tune callbacks that
tell Optuna how each trial ended.

The scheduler adapter (:mod:`hpsearch.adapters.ray_scheduler`) reports every epoch
before it decides, so that Optuna pruners see the value they judge; these classes only
start and end trials.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from hpsearch import keys
from hpsearch.adapters.study import StudyRecorder
from hpsearch.budget import Accountant, Admission
from hpsearch.errors import TrialSetupError
from hpsearch.ledger import DONE, FAILED, STOPPED

log = logging.getLogger(__name__)


class StudySearcher(Searcher):
    """Proposes each new trial's params by asking the Optuna study (its sampler), once
    the accountant admits a new trial under the budget."""

    def __init__(self, recorder: StudyRecorder, accountant: Accountant, metric: str,
                 mode: str):
        super().__init__(metric=metric, mode=mode)
        self.recorder = recorder
        self.accountant = accountant
        self.closed_reason: str | None = None

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        verdict = self.accountant.admission()
        if verdict.admission is Admission.CLOSED:
            if self.closed_reason is None:
                self.closed_reason = verdict.reason
                log.info("no more trials: %s", verdict.reason)
            return Searcher.FINISHED
        if verdict.admission is Admission.WAIT:
            return None
        number, params, seed = self.recorder.ask(trial_id)
        self.accountant.trial_admitted(number)
        return {**params, keys.TRIAL_NUMBER: number, keys.TRIAL_SEED: seed}

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


def error_summary(trial: Any) -> tuple[str, bool]:
    """One line saying why a Ray trial failed, and whether it was a setup error."""
    error, text = _load_error(trial)
    if error is not None:
        cause = getattr(error, "cause", None) or error
        setup = isinstance(cause, TrialSetupError)
        lines = str(cause).strip().splitlines()
        line = lines[-1] if lines else ""
        return (line if setup else f"{type(cause).__name__}: {line}".rstrip(": ")), setup
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1].strip() if lines else "unknown error"), False


class StudyCallback(Callback):
    """Bills each trial in the ledger and tells the study how it ended.

    A :class:`~hpsearch.errors.TrialSetupError` (the trainable's contract broken, the
    objective never logged) would fail every trial the same way: it aborts the run.
    """

    def __init__(self, recorder: StudyRecorder, accountant: Accountant, on_end=None):
        self.recorder = recorder
        self.accountant = accountant
        self.on_end = on_end
        self.abort_reason: str | None = None

    def _money(self, number: int | None) -> dict[str, Any]:
        if number is None:
            return {}
        money = self.accountant.ledger.trial_money(number)
        return {} if money is None else money.attrs()

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            self.accountant.trial_started(number)

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        # The process died; Ray restarts the trial from its checkpoint (a new interval).
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            self.accountant.trial_ended(number, FAILED)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            stopped = self.recorder.stop_of(trial.trial_id) is not None
            self.accountant.trial_ended(number, STOPPED if stopped else DONE)
        state = self.recorder.complete(trial.trial_id, trial.last_result, self._money(number))
        if state is not None and self.on_end:
            self.on_end(number, state, trial.last_result, None)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        number = self.recorder.number(trial.trial_id)
        if number is not None:
            self.accountant.trial_ended(number, FAILED)
        text, setup = error_summary(trial)
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
        return self.callback.abort_reason is not None
