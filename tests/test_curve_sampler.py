"""The curve sampler as a plain Optuna sampler (hpsearch.adapters.optuna.curve_sampler):
a toy objective with and without intermediate values, a paused trial read as behind, a
prior read from earlier studies, and the fit a continued study rebuilds. Fast: Optuna
in memory, no Ray or torch."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from hpsearch import keys
from hpsearch.adapters.optuna.curve_sampler import (CurveSampler, EarlierStudy,
                                                    prior_from_studies, study_curves)
from hpsearch.trials import TrialState as LState
from hpsearch.model.encoding import Dimension
from hpsearch.model.planner import Planner

optuna.logging.set_verbosity(optuna.logging.WARNING)

EPOCHS = 8


def toy(trial: optuna.Trial, report: bool = True, sign: float = 1.0) -> float:
    """A learning curve whose ceiling peaks at lr = 1e-2 and width = 0.3 (an MLP-like
    toy), times ``sign`` (-1: a loss): reported each epoch when ``report``."""
    lr = trial.suggest_float("lr", 1e-4, 1.0, log=True)
    width = trial.suggest_float("width", 0.0, 1.0)
    ceiling = 1.0 - 0.15 * (math.log10(lr) + 2) ** 2 - (width - 0.3) ** 2
    value = 0.0
    for epoch in range(1, EPOCHS + 1):
        value = sign * ceiling * (1 - math.exp(-0.5 * epoch))
        if report:
            trial.report(value, epoch)
    return value


def best_of(sampler, n: int, report: bool = True, direction: str = "maximize") -> float:
    study = optuna.create_study(direction=direction, sampler=sampler)
    sign = 1.0 if direction == "maximize" else -1.0
    study.optimize(lambda t: toy(t, report, sign), n_trials=n)
    return sign * study.best_value


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.parametrize("report", [True, False])
def test_it_finds_the_toy_optimum_sooner_than_random_search(report):
    curve = [best_of(CurveSampler(seed=s, max_epochs=EPOCHS if report else None), 20, report)
             for s in range(3)]
    random = [best_of(optuna.samplers.RandomSampler(seed=s), 20, report) for s in range(3)]
    ceiling = 1.0 * (1 - math.exp(-0.5 * EPOCHS))
    assert np.median(curve) > ceiling - 0.02
    assert np.median(curve) >= np.median(random)


def test_a_minimised_objective_is_searched_the_same_way():
    # The same curves as a loss (negated): the same proposals, trial by trial.
    runs = []
    for direction, sign in (("maximize", 1.0), ("minimize", -1.0)):
        study = optuna.create_study(direction=direction,
                                    sampler=CurveSampler(seed=2, max_epochs=EPOCHS))
        study.optimize(lambda t: toy(t, True, sign), n_trials=12)
        runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]


def test_it_proposes_inside_the_space_and_says_what_it_fitted():
    study = optuna.create_study(direction="maximize", sampler=CurveSampler(seed=1))
    study.optimize(toy, n_trials=12)
    for t in study.trials:
        assert 1e-4 <= t.params["lr"] <= 1.0 and 0.0 <= t.params["width"] <= 1.0
    fitted = [t for t in study.trials if keys.SYSTEM_CURVE_FIT in t.system_attrs]
    assert fitted  # the model's fits are kept in the study (a continued run reads them)


def test_a_paused_trial_is_behind_the_ones_that_train_on_a_running_one_is_open():
    study = optuna.create_study(direction="maximize")
    for lifecycle in (LState.PAUSED.value, None):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        trial.report(0.5, 1)
        if lifecycle:
            trial.set_user_attr(keys.ATTR_LIFECYCLE, lifecycle)
    planner = Planner([Dimension("x", 0.0, 1.0)], 4)
    paused, running = study_curves(study.get_trials(deepcopy=False), planner, True, 4)
    assert not paused.open and running.open
    assert paused.scores == {1: 0.5}


def test_a_prior_from_earlier_studies_leads_the_first_proposals():
    earlier = []
    for seed in range(3):
        s = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=seed))
        s.optimize(toy, n_trials=40)
        earlier.append(s)
    # With the prior the very first proposal is already a good configuration.
    firsts = []
    for seed in range(4):
        study = optuna.create_study(direction="maximize",
                                    sampler=CurveSampler(seed=seed, max_epochs=EPOCHS,
                                                         prior=earlier))
        study.optimize(toy, n_trials=1)
        firsts.append(study.trials[0].value)
    cold = []
    for seed in range(4):
        study = optuna.create_study(direction="maximize",
                                    sampler=CurveSampler(seed=seed, max_epochs=EPOCHS))
        study.optimize(toy, n_trials=1)
        cold.append(study.trials[0].value)
    assert min(firsts) > np.median(cold)
    assert min(firsts) > 0.9


def test_an_earlier_study_of_another_length_is_put_on_this_ones_epochs():
    s = optuna.create_study(direction="minimize")
    trial = s.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    for epoch in range(1, 21):
        trial.report(1.0 / epoch, epoch)
    s.tell(trial, 0.05)
    planner = Planner([Dimension("x", 0.0, 1.0)], 10)
    (curves,) = prior_from_studies([EarlierStudy.of(s)], planner, 10).studies
    assert max(curves[0].scores) == 10 and curves[0].scores[10] == pytest.approx(-0.05)
