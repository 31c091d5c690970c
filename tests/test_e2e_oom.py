"""The OOM ladder end to end: a model that runs out of memory above a batch size."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch.errors import RunFailed

from .test_e2e import load_study, spec

pytestmark = pytest.mark.slow


def oom_trial(name: str, batch: int, limit: int, **changes) -> dict:
    return spec(**{
        "name": name, "trainable": "tests.trainables:oom_above", "max_epochs": 3,
        "space": {"lr": {"type": "categorical", "choices": [0.01]},
                  "batch_size": {"type": "categorical", "choices": [batch]},
                  "limit": {"type": "categorical", "choices": [limit]}},
        "search.n_trials": 1, "search.concurrency": 1, **changes})


def test_out_of_memory_halves_the_batch_until_it_fits(ray_cluster, in_tmp):
    lines: list[str] = []
    result = hpsearch.run(oom_trial("fits", batch=128, limit=40), emit=lines.append)
    (trial,) = load_study(result).get_trials()
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["oom_steps"] == ["halve_batch: batch size 128 -> 64",
                                            "halve_batch: batch size 64 -> 32"]
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    assert "preemptions" not in trial.user_attrs and "failures" not in trial.user_attrs


def test_past_the_ladder_the_trial_fails_with_the_reason(ray_cluster, in_tmp):
    with pytest.raises(RunFailed, match="no trial completed: 1 failed; trial 0: "
                       "TrialOutOfMemory: trial 0: CUDA out of memory after the whole"):
        hpsearch.run(oom_trial("too-big", batch=64, limit=4, **{"oom.min_batch_size": 16}),
                     emit=None)
    study = optuna.load_study(study_name="too-big",
                              storage=f"sqlite:///{in_tmp / 'runs/too-big/optuna.db'}")
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL
    error = trial.user_attrs["error"]
    assert "CUDA out of memory after the whole OOM ladder" in error
    assert "halve_batch: batch size 64 -> 32" in error
    assert "mixed_precision" in error and "grad_checkpointing: skipped" in error
