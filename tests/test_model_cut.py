"""benchmarks.model_cut: the rank cut on the curve model's forecast.

Pure and fast: hand-made boards, and the synthetic pool (no benchmark data needed).
"""

from __future__ import annotations

import pytest

from benchmarks import lcbench, model_cut, peers
from benchmarks.model_cut import ModelRankPolicy
from hpsearch.pruning.cost_aware import Board, CostAwarePolicy
from hpsearch.pruning.decisions import Decision
from hpsearch.simulate import simulate


def board_and_policy(curves, params, mode="max", scale=1.0, knob=1.0):
    """A board of ``curves`` (scaled; negated for ``min``) and a ModelRankPolicy that
    knows each trial's ``params``; ``finished`` trials are those of 8 epochs."""
    b = Board(mode=mode)
    policy = ModelRankPolicy(mode, 8, knob)
    sign = 1.0 if mode == "max" else -1.0
    for trial, curve in curves.items():
        policy.predictor.hyperparameters.add(trial, params[trial])
        for epoch, value in enumerate(curve, start=1):
            b.add(trial, epoch, sign * scale * value)
        if len(curve) == 8:
            b.finish(trial)
    return b, policy


#: Ten finished trials whose final rises with ``lr`` (their curves flat), and two at
#: epoch 2 with the same score: trial 10 at a high lr, trial 11 at a low one.
LRS = [10 ** (-4 + 0.3 * i) for i in range(10)]
CURVES = {i: [0.5 + 0.04 * i] * 8 for i in range(10)}
CURVES[10] = [0.6, 0.6]
CURVES[11] = [0.6, 0.6]
PARAMS = {i: {"lr": lr, "width": 64} for i, lr in enumerate(LRS)}
PARAMS[10] = {"lr": LRS[9], "width": 64}
PARAMS[11] = {"lr": LRS[0], "width": 64}


def test_before_two_trials_finish_it_ranks_as_the_shipped_policy():
    curves = {0: [0.5, 0.6, 0.7], 1: [0.4, 0.5, 0.7], 2: [0.6, 0.6, 0.6]}
    b, policy = board_and_policy(curves, {t: {"lr": 0.1 * (t + 1)} for t in curves})
    shipped = CostAwarePolicy("max", 8)
    assert policy.rank_keys(b, 3) == pytest.approx(shipped.rank_keys(b, 3))
    assert policy.rank_key(b, 1, 3) == pytest.approx(shipped.rank_key(b, 1, 3))
    assert policy.rank_key(b, 1, 4) is None


def test_with_finished_trials_it_ranks_on_the_hyperparameters_they_favour():
    """Equal scores at epoch 2: the trial at the lr of the best finished trials is
    forecast ahead of the one at the lr of the worst."""
    b, policy = board_and_policy(CURVES, PARAMS)
    high, low = policy.forecasts(b, [10, 11], 2)
    assert high > low
    keys = dict(zip(b.trials_at[2], policy.rank_keys(b, 2)))
    assert keys[10] == pytest.approx(high) and keys[11] == pytest.approx(low)
    assert policy.rank_key(b, 10, 2) == pytest.approx(high)


@pytest.mark.parametrize("mode,scale", [("max", 100.0), ("min", 1.0), ("min", 0.01)])
def test_its_ranking_does_not_depend_on_the_metrics_units_or_direction(mode, scale):
    b, policy = board_and_policy(CURVES, PARAMS)
    other, other_policy = board_and_policy(CURVES, PARAMS, mode, scale)
    assert other_policy.rank_keys(other, 2) == pytest.approx(policy.rank_keys(b, 2))


def test_peers_makes_it_by_name_and_refuses_a_knob_that_is_not_a_number():
    make = peers.make("cost_aware-model-a1.5", max_epochs=8, n_trials=10, seed=0)
    pruner = make(None)
    assert pruner.name == "cost_aware-model-a1.5"
    assert isinstance(pruner.policy, ModelRankPolicy)
    assert pruner.policy.aggressiveness == 1.5
    with pytest.raises(ValueError, match="cost_aware-model-afast.*needs a number"):
        peers.make("cost_aware-model-afast", max_epochs=8, n_trials=10, seed=0)


def test_a_simulated_search_with_it_decides_and_finishes():
    pool = lcbench.synthetic_pool(40, 0)
    max_epochs = max(c.epochs for c in pool.curves)
    make = peers.make("cost_aware-model-a1", max_epochs=max_epochs, n_trials=40, seed=0)
    made = []
    result = simulate(pool.curves, list(range(40)), 4,
                      lambda accountant: made.append(make(accountant)) or made[-1],
                      params=pool.configs)
    assert len(result.completed) >= 2
    assert {s.trial for s in result.segments} == set(range(40))
    # It cut some trials short, and on the model (two trials finished before the end).
    assert sum(result.epochs_done.values()) < sum(c.epochs for c in pool.curves)
    assert made[0].policy.model.fits > 0
    assert any(r[4] is not Decision.CONTINUE for r in result.reports)


def test_forecast_quality_on_the_synthetic_pool():
    pool = lcbench.synthetic_pool(60, 1)
    x = model_cut.encoded(pool, None)
    out = model_cut.quality(pool, 1, 10, x)
    for name in ("score", "model"):
        for epoch in model_cut.QUALITY_EPOCHS:
            assert -1.0 <= out[(name, "spearman", epoch)] <= 1.0
            assert 0.0 <= out[(name, "recall", epoch)] <= 1.0
            assert 0.0 <= out[(name, "ahead", epoch)] < 1.0
    # A synthetic curve's final is set by its ``ceiling`` hyperparameter, which the
    # model reads and the score after one epoch barely shows.
    assert out[("model", "spearman", 1)] > out[("score", "spearman", 1)] + 0.3


def test_the_command_refuses_a_bad_finished_count_and_a_prior_of_synthetic_pools(capsys):
    assert model_cut.main(["--tasks", "synthetic", "--finished", "1"]) == 2
    assert "--finished" in capsys.readouterr().err
    assert model_cut.main(["--tasks", "synthetic", "--prior", "loto-full"]) == 2
    assert "--prior loto-full" in capsys.readouterr().err


def test_an_earlier_study_of_another_length_is_put_on_this_ones_epochs():
    pool = lcbench.synthetic_pool(5, 0)
    x = model_cut.encoded(pool, None)
    epochs = pool.curves[0].epochs
    study = model_cut.whole_study(pool, x, 2 * epochs)
    assert [t.number for t in study] == list(range(5))
    assert max(study[0].scores) == 2 * epochs and min(study[0].scores) == 2
    assert study[0].scores[2 * epochs] == pytest.approx(pool.curves[0].values[-1])
    assert study[0].x == x[0]


def test_with_the_samplers_prior_it_reads_it_in_the_planners_encoding():
    """A prior study whose low-lr trials ended best: with only two finished trials of
    its own (flat, equal lr) the run forecasts a low-lr trial ahead of a high-lr one at
    an equal score (without the prior, this board happens to put the high-lr one
    ahead), and places hyperparameters as the planner does."""
    from hpsearch.model.encoding import Dimension
    from hpsearch.model.freeze_thaw import Prior
    from hpsearch.model.planner import Planner
    from hpsearch.model.standing import TrialCurve

    planner = Planner([Dimension("lr", 1e-4, 1.0, log=True)], 8)
    earlier = [TrialCurve(i, planner.encode({"lr": lr}),
                          {e: 0.86 - 0.04 * i for e in range(1, 9)})
               for i, lr in enumerate(LRS)]
    planner.model.prior = Prior([earlier])
    curves = {0: [0.7] * 8, 1: [0.7] * 8, 2: [0.6, 0.6], 3: [0.6, 0.6]}
    params = {0: {"lr": 0.01}, 1: {"lr": 0.01}, 2: {"lr": LRS[9]}, 3: {"lr": LRS[0]}}
    b, _ = board_and_policy(curves, params)
    policy = ModelRankPolicy("max", 8, planner=planner)
    for trial, p in params.items():
        policy.predictor.hyperparameters.add(trial, p)
    assert policy.model.prior is planner.model.prior
    assert policy._x(2) == planner.encode(params[2])
    high, low = policy.forecasts(b, [2, 3], 2)
    assert low > high
    unaided = ModelRankPolicy("max", 8)
    for trial, p in params.items():
        unaided.predictor.hyperparameters.add(trial, p)
    high, low = unaided.forecasts(b, [2, 3], 2)
    assert high > low
    # Without a prior the planner is not used (the predictor's placement is).
    assert ModelRankPolicy("max", 8, planner=Planner(planner.dims, 8)).planner is None
