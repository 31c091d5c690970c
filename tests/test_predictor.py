"""The cost-aware policy's predictor of final values (hpsearch.pruning.predictor): its
calibration on synthetic curves with known finals, its use of hyperparameters, and its
invariance to the metric's units and direction. Pure: no Ray, torch or Optuna."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpsearch.pruning.cost_aware import Board
from hpsearch.pruning.predictor import FinalPredictor, HyperparameterRanks

EPOCHS = 30


def synthetic_curves(n: int, seed: int) -> tuple[list[list[float]], list[dict]]:
    """Saturating curves with noise: ceiling and rate depend on two hyperparameters
    (a log learning rate and a width), so the configuration says something about the
    end the early epochs do not."""
    rng = np.random.default_rng(seed)
    curves, params = [], []
    for _ in range(n):
        lr = 10 ** rng.uniform(-4, -1)
        width = int(rng.integers(16, 512))
        ceiling = 0.6 + 0.3 * (1 - abs(math.log10(lr) + 2.5) / 1.5) + 0.0002 * width
        rate = 0.05 + 2.0 * lr ** 0.5
        noise = rng.normal(0, 0.01, EPOCHS)
        curves.append([ceiling * (1 - math.exp(-rate * (e + 1))) + noise[e]
                       for e in range(EPOCHS)])
        params.append({"lr": lr, "width": width})
    return curves, params


def board_of(curves, params, trained: int, observed_epoch: int, sign: float = 1.0,
             mode: str = "max") -> tuple[Board, FinalPredictor]:
    """The first ``trained`` curves finished; the rest seen up to ``observed_epoch``."""
    board, predictor = Board(mode=mode), FinalPredictor()
    for t, (curve, p) in enumerate(zip(curves, params)):
        predictor.hyperparameters.add(t, p)
        last = EPOCHS if t < trained else observed_epoch
        for e in range(1, last + 1):
            board.add(t, e, sign * curve[e - 1])
        if t < trained:
            board.finish(t)
    return board, predictor


@pytest.mark.parametrize("epoch", [3, 8, 15])
def test_the_80_percent_interval_holds_true_finals_and_says_something(epoch):
    # At least 80% of the true finals inside (less would be over-confident; more is the
    # widening for the survivor bias of real runs, which unbiased examples do not have),
    # and narrower than the spread of the finals themselves (not trivially wide).
    inside, widths, finals = 0, [], []
    for seed in range(3):
        curves, params = synthetic_curves(160, seed)
        board, predictor = board_of(curves, params, trained=60, observed_epoch=epoch)
        for t in range(60, 160):
            forecast = predictor.forecast(board, t, epoch)
            inside += forecast.low <= curves[t][-1] <= forecast.high
            widths.append(forecast.high - forecast.low)
            finals.append(curves[t][-1])
    assert inside / len(finals) >= 0.8
    assert np.median(widths) < 0.75 * (np.quantile(finals, 0.9) - np.quantile(finals, 0.1))


def test_intervals_narrow_as_the_curve_shows_more():
    curves, params = synthetic_curves(160, 0)
    widths = []
    for epoch in (2, 10, 25):
        board, predictor = board_of(curves, params, trained=60, observed_epoch=epoch)
        widths.append(np.median([predictor.forecast(board, t, epoch).high
                                 - predictor.forecast(board, t, epoch).low
                                 for t in range(60, 160)]))
    assert widths[0] > widths[1] > widths[2]


def test_hyperparameters_tell_apart_curves_that_look_alike_so_far():
    # Finished trials: with lr 0.1 they gained 0.3 after epoch 3, with lr 0.001 nothing;
    # all stood at 0.5 at epoch 3. Two running trials stand at 0.5 too.
    board, predictor = Board(), FinalPredictor()
    for t in range(12):
        lr = 0.1 if t % 2 else 0.001
        predictor.hyperparameters.add(t, {"lr": lr * (1 + 0.01 * t), "opt": "sgd"})
        for e in range(1, EPOCHS + 1):
            board.add(t, e, 0.5 if e <= 3 else 0.5 + (0.3 if t % 2 else 0.0))
        board.finish(t)
    for t, lr in ((100, 0.1), (101, 0.001)):
        predictor.hyperparameters.add(t, {"lr": lr, "opt": "sgd"})
        for e in range(1, 4):
            board.add(t, e, 0.5)
    fast = predictor.forecast(board, 100, 3)
    slow = predictor.forecast(board, 101, 3)
    assert fast.point == pytest.approx(0.8) and slow.point == pytest.approx(0.5)


def test_forecasts_move_with_the_metric_scaled_or_negated():
    curves, params = synthetic_curves(80, 1)
    base_board, base = board_of(curves, params, trained=30, observed_epoch=6)
    for sign, mode in ((100.0, "max"), (-1.0, "min"), (-100.0, "min")):
        board, predictor = board_of(curves, params, trained=30, observed_epoch=6,
                                    sign=sign, mode=mode)
        scale = abs(sign)
        for t in range(30, 80):
            a, b = base.forecast(base_board, t, 6), predictor.forecast(board, t, 6)
            # Scores are sign-adjusted on the board: the same forecast in score units,
            # times the scale.
            assert b.point == pytest.approx(scale * a.point, rel=1e-9, abs=1e-9)
            assert b.low == pytest.approx(scale * a.low, rel=1e-9, abs=1e-9)
            assert b.high == pytest.approx(scale * a.high, rel=1e-9, abs=1e-9)


def test_too_few_finished_trials_give_no_forecast():
    curves, params = synthetic_curves(10, 2)
    board, predictor = board_of(curves, params, trained=1, observed_epoch=4)
    assert predictor.forecast(board, 5, 4) is None
    assert predictor.forecast(board, 5, 40) is None  # no score at that epoch


def test_hyperparameters_are_compared_on_their_log_range_and_categories_by_equality():
    ranks = HyperparameterRanks()
    for t, (lr, opt) in enumerate(((1e-4, "sgd"), (1e-3, "sgd"), (1e-2, "adam"),
                                   (1e-1, "adam"))):
        ranks.add(t, {"lr": lr, "opt": opt})
    # lr at 0, 1/3, 2/3, 1 of its log range; opt equal or not.
    assert ranks.distance(0, 1) == pytest.approx(((1 / 3) ** 2 + 0) / 2)
    assert ranks.distance(0, 3) == pytest.approx((1 + 1) / 2)
    assert ranks.distance(0, 99) == 0.0  # a trial without parameters
