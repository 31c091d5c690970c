"""An attempt Ray Tune ends without telling anyone is requeued, and its concurrency
slot freed (fast: the real CoreSearcher behind Tune's real ConcurrencyLimiter, on the
core of an in-memory study; Tune's trials are stand-ins with its status strings).

Tune marks an attempt ERROR silently when the process it was to reuse is still busy
with the previous trial (``reset_config`` timed out): without this the run would wait
for ever for a next trial (it did, once, in a pruned DDP run on a loaded machine).
"""

from __future__ import annotations

from types import SimpleNamespace

from ray.tune.experiment import Trial
from ray.tune.search import ConcurrencyLimiter

from hpsearch import keys
from hpsearch.adapters.ray.tune import Attempts, CoreCallback, CoreSearcher

from .test_core import S, make


def wired(n=2, concurrency=1, **kwargs):
    core, study, clock, listener = make(n=n, **kwargs)
    attempts = Attempts()
    limiter = ConcurrencyLimiter(
        CoreSearcher(core, attempts, "objective", "max", lambda number, attrs: None),
        max_concurrent=concurrency)
    callback = CoreCallback(core, attempts, forget=limiter.on_trial_complete)
    return core, listener, limiter, callback


def tune_trial(trial_id, status, tmp_path, error=None):
    """What the callback reads of a Tune trial: its id, status and error file."""
    error_file = None
    if error is not None:
        error_file = tmp_path / f"{trial_id}.txt"
        error_file.write_text(f"Traceback (most recent call last):\n{error}\n")
    return SimpleNamespace(trial_id=trial_id, status=status, last_result={},
                           pickled_error_file=None,
                           error_file=None if error_file is None else str(error_file))


REUSE = ("ray.tune.error._AbortTrialExecution: Trainable runner reuse requires "
         "reset_config() to be implemented and return True.")


def test_an_attempt_tune_dropped_untold_is_requeued_and_its_slot_freed(tmp_path):
    core, listener, limiter, callback = wired()
    first = limiter.suggest("t1")
    assert first[keys.TRIAL_NUMBER] == 0
    dropped = tune_trial("t1", Trial.ERROR, tmp_path, error=REUSE)
    # Tune tells no one: the slot is still taken and the core still counts trial 0 live,
    # which is the state in which Tune blocks for a next trial that never comes.
    assert limiter.suggest("t2") is None
    assert core.live == {0}

    callback.on_step_end(iteration=1, trials=[dropped])

    assert core.live == set() and core.record(0).state is S.PENDING
    again = limiter.suggest("t3")
    assert again[keys.TRIAL_NUMBER] == 0  # the same trial, before any new one
    assert again["i"] == first["i"]
    (requeued,) = [line for line in listener.lines if line[0] == "requeued"]
    assert requeued[:3] == ("requeued", 0, "moved")
    assert "Ray Tune ended attempt t1 before it ran" in requeued[3]
    assert "reset_config() to be implemented and return True" in requeued[3]
    assert core.record(0).failures == 0  # neither a failure nor a retry used


def test_errors_tune_reported_and_live_attempts_are_left_alone(tmp_path):
    core, listener, limiter, callback = wired(n=3, concurrency=2, max_failures=1)
    limiter.suggest("t1")
    limiter.suggest("t2")
    core.started(0)
    core.started(1)
    failed = tune_trial("t1", Trial.ERROR, tmp_path, error="RuntimeError: boom")
    limiter.on_trial_complete("t1", error=True)  # as Tune does for an error it reports
    callback.on_trial_error(iteration=1, trials=[failed], trial=failed)
    assert core.record(0).state is S.PENDING and core.record(0).failures == 1  # a retry
    running = tune_trial("t2", Trial.RUNNING, tmp_path)

    callback.on_step_end(iteration=2, trials=[failed, running])

    assert not [line for line in listener.lines if line[:3] == ("requeued", 0, "moved")]
    assert core.record(1).state is S.RUNNING and core.live == {1}
    assert limiter.live_trials == {"t2"}  # t1's slot was freed by Tune, t2's is kept
