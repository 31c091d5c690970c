"""The model of curves (hpsearch.model): encodings, standings, the forest's calibration
on synthetic curves with known finals, proposals near a known optimum, start-vs-resume
on hand-made boards, and a fit that a continued run rebuilds. Pure: no Ray, torch or
Optuna."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpsearch.model.encoding import MISSING, Dimension, encode, local_candidates
from hpsearch.model.freeze_thaw import CurveModel, FitState, Prior, grid, trial_rows
from hpsearch.model.planner import Planner
from hpsearch.model.standing import TrialCurve, standing_of, standings

EPOCHS = 30


# -- encoding ---------------------------------------------------------------------------

def test_dimensions_place_values_on_their_range_and_back():
    lr = Dimension("lr", 1e-4, 1e-1, log=True)
    assert lr.encode(1e-4) == 0.0 and lr.encode(1e-1) == 1.0
    assert lr.encode(math.sqrt(1e-4 * 1e-1)) == pytest.approx(0.5)
    assert lr.decode(0.5) == pytest.approx(math.sqrt(1e-5))
    units = Dimension("units", 16, 512, log=True, integer=True)
    assert isinstance(units.decode(0.3), int) and 16 <= units.decode(0.3) <= 512
    stepped = Dimension("drop", 0.0, 0.5, step=0.1)
    assert stepped.decode(0.37) == pytest.approx(0.2)
    opt = Dimension("opt", choices=("adam", "sgd", "rmsprop"))
    for choice in opt.choices:
        assert opt.decode(opt.encode(choice)) == choice
    # Absent (an inactive conditional param) or unknown: outside every range.
    assert opt.encode("other") == MISSING and lr.encode(None) == MISSING
    assert encode([lr, opt], {"lr": 1e-1}) == (1.0, MISSING)
    with pytest.raises(ValueError, match="lr: a log scale needs low > 0"):
        Dimension("lr", 0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="needs low <= high"):
        Dimension("x", 2.0, 1.0)


def test_local_candidates_stay_in_the_space_near_their_centre():
    dims = [Dimension("a", 0.0, 1.0), Dimension("k", 1, 9, integer=True)]
    out = local_candidates(dims, [{"a": 0.5, "k": 5}], 200, 0.05,
                           np.random.default_rng(0))
    assert len(out) == 200
    assert all(0.0 <= c["a"] <= 1.0 and 1 <= c["k"] <= 9 for c in out)
    assert np.median([abs(c["a"] - 0.5) for c in out]) < 0.06


# -- standings ----------------------------------------------------------------------------

def curves_of(values: dict[int, list[float]], open_: set[int] = frozenset(),
              sign: float = 1.0, scale: float = 1.0) -> list[TrialCurve]:
    return [TrialCurve(n, (0.0,), {e + 1: sign * scale * v for e, v in enumerate(vs)},
                       n in open_) for n, vs in values.items()]


def test_a_standing_counts_trials_that_left_earlier_as_behind_and_running_ones_not():
    values = {0: [1.0, 2.0, 3.0], 1: [0.5, 1.0, 4.0], 2: [0.2], 3: [0.1, 0.3]}
    z = standings(curves_of(values, open_={3}))
    # At epoch 3: trials 0 and 1 there, trial 2 behind (it left after epoch 1); trial 3
    # still trains (open) so it counts for no one at epoch 3.
    from scipy.special import ndtri

    # Trial 1: trial 2 behind, trial 0 below, itself half; trial 0: trial 2 behind.
    assert z[1][3] == pytest.approx(float(ndtri((1 + 1 + 0.5) / 3)))
    assert z[0][3] == pytest.approx(0.0)
    assert 3 not in z[3]
    # Alone at the median: 0.
    assert standings(curves_of({7: [5.0]}))[7][1] == pytest.approx(0.0)


def test_standings_ignore_the_metrics_units_and_direction():
    rng = np.random.default_rng(1)
    values = {n: list(rng.normal(0, 1, int(rng.integers(1, 6)))) for n in range(30)}
    base = standings(curves_of(values))
    # Scores are sign-adjusted (higher is better): a loss is its negation, in any unit.
    as_loss = standings(curves_of({n: [-v for v in vs] for n, vs in values.items()},
                                  sign=-1.0, scale=1000.0))
    for n in base:
        for e in base[n]:
            assert as_loss[n][e] == pytest.approx(base[n][e])


def test_the_standing_a_score_would_have_matches_the_counted_one():
    values = {0: [1.0, 2.0], 1: [0.5, 3.0], 2: [0.2]}
    trials = curves_of(values)
    z = standings(trials)
    assert standing_of(3.0, 2, trials, exclude=1) == pytest.approx(z[1][2])


# -- the model ----------------------------------------------------------------------------

def synthetic(n: int, seed: int, noise: float = 1.0):
    """Saturating curves whose ceiling and rate follow three hyperparameters: the
    configuration says where a curve ends, its first epochs say some of it."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    ceiling = 60 + 30 * X[:, 0] - 40 * (X[:, 1] - 0.5) ** 2
    rate = np.exp(-3 + 3 * X[:, 2])
    epochs = np.arange(1, EPOCHS + 1)
    curves = [20 + (ceiling[i] - 20) * (1 - np.exp(-rate[i] * epochs))
              + rng.normal(0, noise, EPOCHS) for i in range(n)]
    return X, curves


def study(X, curves, finished: int, partial_upto: int, rng) -> list[TrialCurve]:
    """The first ``finished`` trials trained to the end, the rest of ``partial_upto``
    stopped at a random epoch (closed: paused or pruned)."""
    out = []
    for i in range(partial_upto):
        last = EPOCHS if i < finished else int(rng.integers(1, EPOCHS))
        out.append(TrialCurve(i, tuple(X[i]),
                              {e + 1: float(curves[i][e]) for e in range(last)}))
    return out


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.parametrize("noise", [1.0, 2.5])
def test_the_80_percent_interval_holds_75_to_85_percent_of_true_final_standings(noise):
    # Trials seen for 0 to 14 epochs (0: a configuration never tried), forecast to
    # their end; the truth is where the known final would stand among the study's.
    inside = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        X, curves = synthetic(160, seed, noise)
        trials = study(X, curves, finished=40, partial_upto=100, rng=rng)
        model = CurveModel(EPOCHS, seed=seed)
        model.fit(trials)
        for i in range(100, 160):
            seen = int(rng.integers(0, EPOCHS // 2))
            query = TrialCurve(i, tuple(X[i]),
                               {e + 1: float(curves[i][e]) for e in range(seen)}, True)
            samples = model.latest([*trials, query]).final([(query.x, seen, i)])[0]
            low, high = np.quantile(samples, [0.1, 0.9])
            truth = standing_of(float(curves[i][-1]), EPOCHS, trials)
            inside.append(low <= truth <= high)
    assert 0.75 <= np.mean(inside) <= 0.85, np.mean(inside)


def test_the_forecast_ranks_configurations_it_never_saw():
    rng = np.random.default_rng(3)
    X, curves = synthetic(200, 3)
    trials = study(X, curves, finished=40, partial_upto=120, rng=rng)
    model = CurveModel(EPOCHS, seed=0)
    fitted = model.fit(trials)
    means = fitted.final([(tuple(X[i]), 0, None) for i in range(120, 200)]).mean(axis=1)
    finals = [curves[i][-1] for i in range(120, 200)]
    from scipy.stats import spearmanr

    assert spearmanr(means, finals).correlation > 0.7


def test_rows_of_a_partial_curve_target_only_what_it_reached():
    z = {e: 0.1 * e for e in range(1, 7)}
    X, y = trial_rows((0.5,), z, grid(EPOCHS), EPOCHS)
    targets = {round(row[-1] * EPOCHS) for row in X}
    assert max(targets) == 6  # never its unseen end
    assert all(row[1] * EPOCHS < row[-1] * EPOCHS for row in X if row[1] > 0)
    assert grid(52)[:5] == [1, 2, 3, 4, 5] and grid(52)[-1] == 52


def test_a_continued_run_rebuilds_the_forest_the_study_kept():
    rng = np.random.default_rng(5)
    X, curves = synthetic(80, 5)
    early = study(X, curves, finished=10, partial_upto=40, rng=rng)
    model = CurveModel(EPOCHS, seed=2)
    model.fit(early)
    state = FitState.decode(model.state.encode())
    assert state == model.state
    # Later, more epochs arrived; a new process rebuilds the forest from the state.
    later = study(X, curves, finished=10, partial_upto=40, rng=np.random.default_rng(5))
    later = [TrialCurve(t.number, t.x, {**t.scores, **({t.last_epoch + 1: 50.0}
                                                          if t.last_epoch < EPOCHS else {})})
             for t in later]
    again = CurveModel(EPOCHS, seed=2)
    again.restore(state, later)
    queries = [(tuple(X[i]), 0, None) for i in range(40, 80)]
    assert np.array_equal(model.latest(later).final(queries),
                          again.latest(later).final(queries))
    with pytest.raises(ValueError):
        FitState.decode("not a state")


def test_the_forest_is_refitted_only_as_evidence_grows():
    rng = np.random.default_rng(0)
    X, curves = synthetic(60, 0)
    trials = study(X, curves, finished=5, partial_upto=30, rng=rng)
    model = CurveModel(EPOCHS)
    model.fit(trials)
    model.fit(trials + [TrialCurve(99, (0.5, 0.5, 0.5), {1: 30.0}, True)])
    assert model.fits == 1  # one epoch more is not a fifth more
    model.fit(study(X, curves, finished=10, partial_upto=60, rng=rng))
    assert model.fits == 2


# -- proposals and the choice between starting and resuming ------------------------------

def quadratic(params) -> float:
    """A known optimum at (0.7, 0.2)."""
    return -((params["a"] - 0.7) ** 2 + (params["b"] - 0.2) ** 2)


def search(propose, n: int, rng) -> float:
    dims = [Dimension("a", 0.0, 1.0), Dimension("b", 0.0, 1.0)]
    planner = Planner(dims, 1, seed=int(rng.integers(1000)))
    trials: list[TrialCurve] = []
    best = -math.inf
    for k in range(n):
        proposal = planner.propose(trials, k) if propose and k >= 4 else None
        params = (proposal.params if proposal is not None
                  else {"a": float(rng.random()), "b": float(rng.random())})
        value = quadratic(params)
        best = max(best, value)
        trials.append(TrialCurve(k, planner.encode(params), {1: value}))
    return best


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
def test_proposals_close_in_on_a_known_optimum_faster_than_random_draws():
    with_model = [search(True, 30, np.random.default_rng(s)) for s in range(3)]
    at_random = [search(False, 30, np.random.default_rng(s)) for s in range(3)]
    assert np.median(with_model) > -0.003  # within about 0.05 of (0.7, 0.2)
    assert np.median(with_model) > np.median(at_random)


def board(seen_good_epochs: int):
    """A hand-made study: 30 configurations over ``a`` (good near 1, poor near 0), 10
    finished. Trial 100 (a = 0.95) paused after ``seen_good_epochs`` epochs standing
    second; trial 101 (a = 0.05) paused standing last."""
    dims = [Dimension("a", 0.0, 1.0)]
    trials = []
    for n in range(30):
        a = n / 29
        last = EPOCHS if n % 3 == 0 else 4
        trials.append(TrialCurve(n, (a,), {e: 50 * a + e * a for e in range(1, last + 1)}))
    trials.append(TrialCurve(100, (0.95,), {e: 50 * 0.95 + e * 0.95 + 2.0
                                             for e in range(1, seen_good_epochs + 1)}))
    trials.append(TrialCurve(101, (0.05,), {e: 0.0 for e in range(1, 5)}))
    return dims, trials


def forecasts(planner: Planner, trials, numbers) -> list[float]:
    """The model's mean forecast final standing of each trial of ``numbers`` from where
    its curve stands now."""
    fitted = planner.model.fit(trials)
    by = {t.number: t for t in trials}
    return fitted.final([(by[n].x, by[n].last_epoch, n) for n in numbers]).mean(
        axis=1).tolist()


def test_a_partial_curve_headed_for_the_top_is_forecast_above_a_hopeless_one():
    dims, trials = board(6)
    planner = Planner(dims, EPOCHS, candidates=lambda seed: [{"a": 0.02}, {"a": 0.04}])
    climber, hopeless = forecasts(planner, trials, [100, 101])
    assert climber > 1.0 > hopeless  # near the top of the study's standings, and far below
    # Its local candidates are drawn around the best forecast, the climber among them.
    assert planner.propose(trials, 0) is not None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_start_or_resume_is_ranked_on_one_scale(seed):
    """On hand-made boards: a paused trial climbing to the top is resumed before a new
    configuration where configurations end poorly; a paused trial standing a point behind
    middling peers waits while a new configuration where the best ones end is worth more,
    and is resumed once nothing is new; a hopeless one gets no opinion."""
    dims, trials = board(6)
    poor = Planner(dims, EPOCHS, seed=seed, candidates=lambda s: [{"a": 0.02}, {"a": 0.04}])
    assert poor.choose_resume(trials, [100, 101], True, 0) is None  # nothing fitted yet
    poor.model.fit(trials)
    climb = poor.choose_resume(trials, [101, 100], True, 0)
    assert climb.trial == 100 and climb.improvement > 0
    assert poor.choose_resume(trials, [101], True, 0) is None  # no opinion: the policy's

    trials = [t for t in trials if t.number != 100]
    trials.append(TrialCurve(104, (0.85,), {e: 50 * 0.85 + e * 0.85 - 1 for e in range(1, 5)}))
    good = Planner(dims, EPOCHS, seed=seed, candidates=lambda s: [{"a": 1.0}])
    fitted = good.model.fit(trials)
    new = good.rate(fitted, [{"a": 1.0}])[0]
    start = good.choose_resume(trials, [104, 101], True, 0)
    assert start.trial is None and start.improvement == pytest.approx(new)
    last = good.choose_resume(trials, [104, 101], False, 0)
    assert last.trial == 104 and 0 < last.improvement < new


def test_the_proposal_and_forecasts_are_the_same_in_any_unit_and_direction():
    dims, trials = board(6)
    # Sign-adjusted scores of a loss in other units: -(loss) ordered as the accuracy.
    flipped = [TrialCurve(t.number, t.x, {e: -(-1e-3 * v) for e, v in t.scores.items()})
               for t in trials]
    picks = []
    for data in (trials, flipped):
        planner = Planner(dims, EPOCHS, candidates=lambda seed: [{"a": 0.3}, {"a": 0.6}])
        proposal = planner.propose(data, 0)
        picks.append((proposal.params, forecasts(planner, data, [100, 101])))
    assert picks[0] == picks[1]


def test_a_candidate_next_to_a_trial_that_has_not_reported_is_rated_down():
    dims = [Dimension("a", 0.0, 1.0)]
    # Better towards a = 1, tried only up to 0.8: beyond it the model is unsure.
    trials = [TrialCurve(n, (0.8 * n / 19,), {1: float(n)}) for n in range(20)]
    waiting = TrialCurve(50, (0.99,), {}, open=True)
    planner = Planner(dims, 1, candidates=lambda seed: [{"a": 0.99}, {"a": 0.9}])
    alone = planner.propose(trials, 0)
    assert alone.improvement > 0
    beside = planner.propose([*trials, waiting], 0)
    assert beside.params == {"a": 0.9}


def test_a_prior_leads_the_first_proposals():
    dims = [Dimension("a", 0.0, 1.0)]
    # Earlier studies: the best configurations near a = 0.8.
    earlier = [[TrialCurve(n, (a,), {e: -abs(a - 0.8) + 0.01 * s for e in range(1, 4)})
                for n, a in enumerate(np.linspace(0, 1, 40))] for s in range(3)]
    candidates = [{"a": a} for a in np.linspace(0, 1, 21)]
    planner = Planner(dims, 3, prior=Prior(earlier), candidates=lambda seed: candidates)
    proposal = planner.propose([], 0)
    assert abs(proposal.params["a"] - 0.8) <= 0.1
    # Without one there is nothing to propose from: the caller samples at random.
    assert Planner(dims, 3, candidates=lambda seed: candidates).propose([], 0) is None
