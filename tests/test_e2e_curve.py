"""End to end with the curve sampler (``search.sampler: curve``): the digits example on
both objectives with ``cost_aware``, and a run started from an earlier one
(``search.prior``) (real Ray, SQLite, Lightning on CPU). A driver SIGKILLed mid-search
whose ``resume`` proposes the configurations the uninterrupted search proposed is
``tests/test_e2e_restart.py``."""

from __future__ import annotations

import copy
import json

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch
from hpsearch import keys
from hpsearch.spec import raw_yaml

pytestmark = pytest.mark.slow

DIGITS = {
    "name": "digits-curve",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc", "mode": "max"},
    "max_epochs": 4,
    "space": {
        "lr": {"type": "float", "low": 1.0e-4, "high": 0.1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 128, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.4, "step": 0.1},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "search": {"sampler": "curve", "n_trials": 5, "concurrency": 2, "seed": 0},
    "pruning": {"policy": "cost_aware"},
}


def digits(**changes) -> dict:
    return raw_yaml.apply_overrides(copy.deepcopy(DIGITS), changes)


def study_of(result) -> optuna.Study:
    return optuna.load_study(study_name=result.study.study_name, storage=result.storage_url)


@pytest.mark.parametrize("metric, mode", [("val_acc", "max"), ("val_loss", "min")])
def test_the_digits_example_runs_with_the_curve_sampler_and_then_from_its_prior(
        ray_cluster, in_tmp, metric, mode):
    lines: list[str] = []
    first = hpsearch.run(digits(**{"objective.metric": metric, "objective.mode": mode}),
                         emit=lines.append)
    assert any("sampler: curve" in line for line in lines), lines[:3]
    trials = study_of(first).get_trials()
    assert len(trials) == 5 and all(t.state.is_finished() for t in trials)
    assert any(t.state is TrialState.COMPLETE for t in trials)
    # The model fitted and kept what it fitted on; the configurations differ.
    assert any(keys.SYSTEM_CURVE_FIT in t.system_attrs for t in trials)
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 5
    assert first.best_trial is not None and (
        first.best_trial.value > 0.8 if mode == "max" else first.best_trial.value < 0.8)

    # A second search of the same space starts from the first one's curves.
    lines.clear()
    second = hpsearch.run(digits(**{"name": "digits-curve-2", "objective.metric": metric,
                                    "objective.mode": mode, "search.n_trials": 2,
                                    "search.prior": [str(first.run_dir)]}),
                          emit=lines.append)
    assert any("(prior: 1 earlier study, 5 trial(s))" in line for line in lines), lines[:3]
    assert len(study_of(second).get_trials()) == 2
