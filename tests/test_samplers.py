"""The samplers' view of the study: a paused trial (RUNNING in Optuna, ``lifecycle:
paused``) is read as pruned where it paused."""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import TrialState

from hpsearch import keys
from hpsearch.adapters.optuna.samplers import (
    EndedEarlyAsPruned,
    StudyAsSampled,
    sampler_seed,
    tpe_sampler,
)
from hpsearch.trials import TrialState as LState

BEST_X = 0.8


def paused_study(n: int = 16, lifecycle: str = LState.PAUSED.value) -> optuna.Study:
    """``n`` trials spread over x in [0, 1], each reported for two epochs (best near
    BEST_X) and left RUNNING with ``lifecycle``, as hpsearch leaves a paused trial."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for i in range(n):
        x = (i + 0.5) / n
        study.enqueue_trial({"x": x})
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        for epoch in (1, 2):
            trial.report(epoch * (1.0 - abs(x - BEST_X)), epoch)
        trial.set_user_attr(keys.ATTR_LIFECYCLE, lifecycle)
    return study


def proposals(study: optuna.Study, make, n: int = 20) -> list[float]:
    """``n`` proposals, each from a sampler made as a real run makes it (reseeded per
    ask) and told FAIL at once, so the study's evidence stays the same."""
    xs = []
    for _ in range(n):
        study.sampler = make(sampler_seed(0, len(study.trials)))
        trial = study.ask()
        xs.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)
    return xs


def distance(xs: list[float]) -> float:
    return statistics.median(abs(x - BEST_X) for x in xs)


def test_tpe_learns_from_paused_trials_where_it_sampled_at_random_before():
    plain = proposals(paused_study(), lambda seed: optuna.samplers.TPESampler(
        seed=seed, constant_liar=True))
    ours = proposals(paused_study(), tpe_sampler)
    # Plain TPE: no COMPLETE or PRUNED trial, so its 10 start-up trials are random
    # draws (median distance from 0.8 is 0.25 on [0, 1]); read as pruned, the paused
    # trials put its proposals near the best of their curves.
    assert distance(ours) < 0.05 and distance(plain) > 0.1


def test_a_running_trial_stays_running_and_the_study_is_unchanged():
    study = paused_study(4)
    trial = study.ask()  # training now: no lifecycle attribute yet
    trial.suggest_float("x", 0.0, 1.0)
    running = study.ask()
    running.suggest_float("x", 0.0, 1.0)
    running.set_user_attr(keys.ATTR_LIFECYCLE, LState.RUNNING.value)
    view = StudyAsSampled(study)
    states = [t.state for t in view.get_trials(deepcopy=False)]
    assert states == [TrialState.PRUNED] * 4 + [TrialState.RUNNING] * 2
    assert [t.number for t in view._get_trials(states=(TrialState.PRUNED,))] == [0, 1, 2, 3]
    assert len(view.trials) == 6 and view.direction == study.direction
    assert [t.state for t in study.trials] == [TrialState.RUNNING] * 6


def test_a_budget_stopped_trial_is_read_as_pruned_too():
    view = StudyAsSampled(paused_study(3, LState.BUDGET_STOPPED.value))
    assert [t.state for t in view.trials] == [TrialState.PRUNED] * 3


def test_the_default_sampler_is_tpe_with_constant_liar_behind_the_view():
    sampler = tpe_sampler(5)
    assert isinstance(sampler, EndedEarlyAsPruned)
    assert isinstance(sampler.inner, optuna.samplers.TPESampler)
    assert sampler.inner._constant_liar
    # Seeded: the same seed proposes the same first point.
    first = [proposals(paused_study(2), lambda seed: tpe_sampler(7), 1) for _ in range(2)]
    assert first[0] == first[1]
