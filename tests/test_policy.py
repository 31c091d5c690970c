"""Unit tests of hpsearch.pruning.cost_aware: the cost-aware pruning rule on hand-built curves.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here.
"""

from __future__ import annotations

import math

import pytest

from hpsearch.pruning import cost_aware, predictor
from hpsearch.pruning.decisions import Decision

#: A trial the ranks cut: paused while the policy is unsure (no finished trial to predict
#: from), stopped once its interval ends short of the incumbent.
CUT = (Decision.PAUSE, Decision.STOP)
from hpsearch.pruning.cost_aware import (Board, CostAwarePolicy, cost_factor, early_sharpness,
                             keep_fraction)


def board(curves: dict[int, list[float]], mode: str = "max",
          stopped: dict[int, int] | None = None, finished=()) -> Board:
    """A board from ``{trial: [value after epoch 1, after epoch 2, ...]}``."""
    b = Board(mode=mode)
    for trial, curve in curves.items():
        for epoch, value in enumerate(curve, start=1):
            b.add(trial, epoch, value)
    for trial, epoch in (stopped or {}).items():
        b.stop(trial, epoch)
    for trial in finished:
        b.finish(trial)
    return b


def flat(value: float, epochs: int) -> list[float]:
    return [value] * epochs


def field_of(values: list[float], epochs: int, start: int = 0) -> dict[int, list[float]]:
    """Trials ``start, start+1, ...`` with flat curves at ``values``."""
    return {start + i: flat(v, epochs) for i, v in enumerate(values)}


#: Ten flat trials at epoch 5, trial i at 0.9 - 0.05 i (trial 0 leads, trial 9 last).
TEN = [0.9 - 0.05 * i for i in range(10)]


# ---------------------------------------------------------------------------------------
# Constants, keep_fraction and cost_factor


def test_the_tuned_constants_are_pinned():
    """Tuned on LCBench (see the design notes): changing one is a deliberate act."""
    assert cost_aware.ABSOLUTE_SCHEDULE == ((2, 0.70), (5, 0.40), (10, 0.20), (20, 0.04))
    assert cost_aware.RELATIVE_SCHEDULE == tuple((e / 52, s) for e, s in cost_aware.ABSOLUTE_SCHEDULE)
    assert cost_aware.IMPROVEMENT_BONUS == 4.0
    assert cost_aware.SLOPE_EPOCHS == 3
    assert cost_aware.MIN_PEERS == 4
    assert cost_aware.MIN_FINISHED == 2
    assert cost_aware.GUARD_OPTIMISM == 3.0
    assert cost_aware.GUARD_FROM == 2
    assert cost_aware.COST_FULL_FROM == 10
    assert cost_aware.COST_FACTOR_RANGE == (1 / 3, 3.0)
    assert cost_aware.FINISH_SHARE == 0.1
    assert cost_aware.REFERENCE_EPOCHS == 52
    assert cost_aware.EARLY_SHARPNESS == 1.3
    assert cost_aware.SHARPNESS_FADE == (8, 16)
    assert cost_aware.BONUS_CAP == 0.5
    assert predictor.INTERVAL == (0.1, 0.9)
    assert predictor.MIN_NEIGHBOURS == 3
    assert predictor.HP_WEIGHT == 1.0




@pytest.mark.parametrize("epoch, share, power", [(2, 0.70, 1.3), (5, 0.40, 1.3),
                                                  (10, 0.20, 1.225), (20, 0.04, 1.0)])
def test_keep_fraction_schedule_at_52_epochs(epoch, share, power):
    # The schedule's share raised to the early sharpness (1.3 to epoch 8, 1 from 16).
    assert keep_fraction(epoch, 52) == pytest.approx(share ** power, rel=1e-9)


@pytest.mark.parametrize("epoch, power", [(1, 1.3), (2, 1.3), (8, 1.3), (10, 1.225),
                                          (12, 1.15), (16, 1.0), (30, 1.0)])
def test_early_sharpness_fades_to_one(epoch, power):
    assert early_sharpness(epoch) == pytest.approx(power)


def test_early_cut_is_sharper_and_the_mid_run_cut_unchanged():
    # Early on, fewer trials are kept than the bare schedule says; from epoch 16 on (where
    # the eventual best is often a close second) exactly the schedule's share.
    assert keep_fraction(3, 52) < cost_aware._interpolate(cost_aware.ABSOLUTE_SCHEDULE, 3)
    assert keep_fraction(5, 52) == pytest.approx(0.40 ** 1.3)
    for epoch in range(16, 47):
        assert keep_fraction(epoch, 52) == pytest.approx(
            cost_aware._interpolate(cost_aware.ABSOLUTE_SCHEDULE, epoch)), epoch


def test_early_sharpness_follows_progress_on_long_runs():
    # Epoch 20 of 200 is, by progress, epoch 5.2 of 52: sharpened like it.
    assert keep_fraction(20, 200) == pytest.approx(
        cost_aware._interpolate(cost_aware.RELATIVE_SCHEDULE, 0.1) ** 1.3)
    # Epoch 80 of 200 is 20.8 of 52: the schedule's last share, unsharpened.
    assert keep_fraction(80, 200) == pytest.approx(0.04)


@pytest.mark.parametrize("max_epochs", [3, 10, 52, 200])
def test_keep_fraction_is_monotone_non_increasing(max_epochs):
    shares = [keep_fraction(e, max_epochs) for e in range(1, max_epochs + 1)]
    assert all(a >= b for a, b in zip(shares, shares[1:])), shares
    assert all(0 < s <= 1 for s in shares)


def test_keep_fraction_flat_beyond_the_schedule():
    assert keep_fraction(1, 52) == pytest.approx(0.70 ** 1.3)
    assert keep_fraction(40, 52) == pytest.approx(0.04)


def test_keep_fraction_between_points_is_log_linear():
    # Past the early sharpening: halfway from epoch 16 to 20 -> the geometric mean.
    assert keep_fraction(18, 52) == pytest.approx(
        math.sqrt(keep_fraction(16, 52) * keep_fraction(20, 52)))
    assert keep_fraction(16, 52) == pytest.approx(0.20 * 0.2 ** 0.6)


def test_relative_schedule_keeps_long_runs_generous():
    assert keep_fraction(20, 200) == pytest.approx(0.4 ** 1.3, abs=0.02)
    assert keep_fraction(20, 200) > 5 * keep_fraction(20, 52)
    assert keep_fraction(100, 200) == pytest.approx(0.04)


@pytest.mark.parametrize("epoch", [2, 5, 7, 10, 15, 20])
def test_aggressiveness_is_an_exponent(epoch):
    base = keep_fraction(epoch, 52)
    assert keep_fraction(epoch, 52, aggressiveness=2) == pytest.approx(base ** 2)
    assert keep_fraction(epoch, 52, aggressiveness=0.5) == pytest.approx(math.sqrt(base))


@pytest.mark.parametrize(
    "ratio, factor",
    [(None, 1.0), (0, 1.0), (1.0, 1.0), (4.0, 0.5), (0.25, 2.0), (100.0, 1 / 3),
     (0.001, 3.0), (9.0, 1 / 3), (1 / 9, 3.0)],
)
def test_cost_factor(ratio, factor):
    assert cost_factor(ratio) == pytest.approx(factor)


# ---------------------------------------------------------------------------------------
# When the policy decides nothing


def test_bottom_trial_among_ten_at_epoch_5_is_stopped():
    b = board(field_of(TEN, 5))
    verdict = CostAwarePolicy("max", max_epochs=52).decide(b, 9, 5)
    assert verdict.decision in CUT
    assert "rank 10/10" in verdict.reason
    assert "epoch 5/52" in verdict.reason
    assert "top 4" in verdict.reason
    assert verdict.predicted_final == pytest.approx(TEN[9])  # no finished trial: as is


def test_no_decision_at_epoch_1():
    b = board(field_of(TEN, 1))
    assert CostAwarePolicy("max", max_epochs=52).decide(b, 9, 1).decision is Decision.CONTINUE


def test_no_decision_at_or_after_the_last_epoch():
    b = board(field_of(TEN, 5))
    assert CostAwarePolicy("max", max_epochs=5).decide(b, 9, 5).decision is Decision.CONTINUE
    assert CostAwarePolicy("max", max_epochs=4).decide(b, 9, 5).decision is Decision.CONTINUE
    assert CostAwarePolicy("max", max_epochs=6).decide(b, 9, 5).decision in CUT


def test_no_decision_below_min_epochs():
    b = board(field_of(TEN, 5))
    late = CostAwarePolicy("max", max_epochs=52, min_epochs=6)
    assert late.decide(b, 9, 5).decision is Decision.CONTINUE
    on_time = CostAwarePolicy("max", max_epochs=52, min_epochs=5)
    assert on_time.decide(b, 9, 5).decision in CUT


def test_no_decision_with_fewer_than_min_peers():
    # Flat trials at epoch 5, the candidate last: with MIN_PEERS of them it is cut.
    few = board(field_of(TEN[:cost_aware.MIN_PEERS - 1], 5))
    last = cost_aware.MIN_PEERS - 2
    assert CostAwarePolicy("max", 52).decide(few, last, 5).decision is Decision.CONTINUE
    enough = board(field_of(TEN[:cost_aware.MIN_PEERS], 5))
    verdict = CostAwarePolicy("max", 52).decide(enough, cost_aware.MIN_PEERS - 1, 5)
    assert verdict.decision in CUT
    assert f"rank {cost_aware.MIN_PEERS}/{cost_aware.MIN_PEERS}" in verdict.reason


def test_no_decision_for_a_trial_not_on_the_board_at_that_epoch():
    b = board(field_of(TEN, 5))
    b.add(99, 1, 0.0)
    assert CostAwarePolicy("max", 52).decide(b, 99, 5).decision is Decision.CONTINUE


def test_trials_not_yet_at_the_epoch_do_not_count():
    k = cost_aware.MIN_PEERS - 1  # running at epoch 5: one too few to judge
    curves = field_of(TEN[:k], 5)
    curves.update(field_of([0.95] * 6, 3, start=10))  # ahead in value, behind in epochs
    pol = CostAwarePolicy("max", 52)
    assert pol.decide(board(curves), k - 1, 5).decision is Decision.CONTINUE
    # The same six at epoch 5 are peers: then the candidate ranks last and is cut.
    curves.update(field_of([0.95] * 6, 5, start=10))
    assert pol.decide(board(curves), k - 1, 5).decision in CUT


# ---------------------------------------------------------------------------------------
# The leader, the stopped and the cost adjustment


def test_leader_is_kept_even_when_very_expensive():
    b = board(field_of(TEN, 10))
    pol = CostAwarePolicy("max", max_epochs=52, aggressiveness=3)
    verdict = pol.decide(b, 0, 10, cost_rate=1000.0, peer_cost_rates=[1.0] * 9)
    assert verdict.decision is Decision.CONTINUE
    # ... while the runner-up at the same price is not.
    assert pol.decide(b, 1, 10, cost_rate=1000.0,
                      peer_cost_rates=[1.0] * 9).decision in CUT


def test_ties_share_the_better_rank():
    b = board(field_of([0.9, 0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1], 5))
    assert CostAwarePolicy("max", 52).decide(b, 4, 5).decision is Decision.CONTINUE


def test_trials_stopped_earlier_count_as_behind():
    running = field_of([0.9, 0.85, 0.8, 0.7, 0.6], 5)
    pol = CostAwarePolicy("max", max_epochs=52)
    # Among five running peers at epoch 5 the 4th is cut (the top 2 are kept).
    verdict = pol.decide(board(running), 3, 5)
    assert verdict.decision in CUT and "rank 4/5" in verdict.reason
    # Five peers that were stopped at epoch 3 count as behind it: rank 4 of 10 is kept.
    early = field_of([0.95, 0.95, 0.95, 0.95, 0.95], 3, start=10)
    stopped = {t: 3 for t in early}
    assert pol.decide(board({**running, **early}, stopped=stopped), 3, 5).decision \
        is Decision.CONTINUE
    # The same peers still running behind in epochs do not count.
    assert pol.decide(board({**running, **early}), 3, 5).decision in CUT


def test_a_trial_stopped_at_this_epoch_is_ranked_by_its_value():
    running = field_of([0.9, 0.85, 0.8, 0.7, 0.6], 5)
    at_five = field_of([0.95] * 5, 5, start=10)
    stopped = {t: 5 for t in at_five}  # stopped after epoch 5: they are ahead here
    verdict = CostAwarePolicy("max", 52).decide(board({**running, **at_five},
                                                      stopped=stopped), 3, 5)
    assert verdict.decision in CUT
    assert "rank 9/10" in verdict.reason


#: Twenty flat trials at epoch 10 (trial i at 0.9 - 0.01 i): the schedule keeps the top 3.
TWENTY = [0.9 - 0.01 * i for i in range(20)]


@pytest.mark.parametrize(
    "trial, cost_rate, expected",
    [
        # 20 trials at epoch 10 (where the cost adjustment is in full) keep the top 3
        # (0.2 ** 1.225 = 14%); 4x as expensive keeps the top 2; 4x as cheap the top 6.
        (2, None, Decision.CONTINUE),
        (3, None, Decision.STOP),
        (2, 4.0, Decision.STOP),
        (2, 0.25, Decision.CONTINUE),
        (5, None, Decision.STOP),
        (5, 4.0, Decision.STOP),
        (5, 0.25, Decision.CONTINUE),
        (6, 0.25, Decision.STOP),
        (8, 0.25, Decision.STOP),
    ],
)
def test_cost_adjusts_how_high_a_trial_must_rank(trial, cost_rate, expected):
    b = board(field_of(TWENTY, cost_aware.COST_FULL_FROM))
    peers = [1.0] * 19
    verdict = CostAwarePolicy("max", 52).decide(b, trial, cost_aware.COST_FULL_FROM,
                                                cost_rate=cost_rate, peer_cost_rates=peers)
    assert (verdict.decision in CUT) == (expected is Decision.STOP)
    if expected is Decision.STOP and cost_rate == 4.0:
        assert "x0.50" in verdict.reason and "4.00x the median" in verdict.reason


def test_cost_has_no_effect_at_epoch_2():
    # Epoch-2 values are noise: money must not decide on them. 20 trials at epoch 2 keep
    # the top 13 (0.7 ** 1.3 = 63%), however expensive or cheap the trial is.
    b = board(field_of(TWENTY, 2))
    pol = CostAwarePolicy("max", 52)
    peers = [1.0] * 19
    for ratio in (None, 9.0, 100.0):
        assert pol.decide(b, 12, 2, cost_rate=ratio, peer_cost_rates=peers).decision \
            is Decision.CONTINUE, ratio
    for ratio in (None, 1 / 9, 0.01):
        verdict = pol.decide(b, 13, 2, cost_rate=ratio, peer_cost_rates=peers)
        assert verdict.decision in CUT, ratio
        assert "top 13" in verdict.reason
    verdict = pol.decide(b, 19, 2, cost_rate=9.0, peer_cost_rates=peers)
    assert "x1.00: its epochs cost 9.00x the median" in verdict.reason


@pytest.mark.parametrize("epoch", [cost_aware.COST_FULL_FROM, cost_aware.COST_FULL_FROM + 1, 20, 40])
def test_cost_has_full_effect_from_cost_full_from(epoch):
    b = board(field_of(TWENTY, epoch))
    pol = CostAwarePolicy("max", 52)
    for ratio, factor in ((4.0, "x0.50"), (9.0, "x0.33"), (100.0, "x0.33")):
        verdict = pol.decide(b, 19, epoch, cost_rate=ratio, peer_cost_rates=[1.0] * 19)
        assert verdict.decision in CUT
        assert factor in verdict.reason, verdict.reason


def test_cost_effect_grows_between_epoch_2_and_cost_full_from():
    b = board(field_of(TWENTY, cost_aware.COST_FULL_FROM))
    pol = CostAwarePolicy("max", 52)
    factors = []
    for epoch in range(3, cost_aware.COST_FULL_FROM):
        verdict = pol.decide(b, 19, epoch, cost_rate=4.0, peer_cost_rates=[1.0] * 19)
        assert verdict.decision in CUT
        factors.append(float(verdict.reason.split(" x")[1].split(":")[0]))
    assert all(0.5 < f < 1.0 for f in factors), factors
    assert factors == sorted(factors, reverse=True), factors


def test_unknown_peer_costs_leave_the_share_alone():
    b = board(field_of(TEN, 5))
    pol = CostAwarePolicy("max", 52)
    for peers in (None, [], [0.0, -1.0]):
        assert pol.decide(b, 2, 5, cost_rate=4.0, peer_cost_rates=peers).decision \
            is Decision.CONTINUE


def test_early_cut_stops_what_the_bare_schedule_kept():
    # Ten flat trials at epoch 3: the bare schedule (58%) kept the top 6; sharpened
    # (0.58 ** 1.3 = 49%) the top 5, so the 6th goes.
    b = board(field_of(TEN, 3))
    pol = CostAwarePolicy("max", 52)
    assert pol.decide(b, 4, 3).decision is Decision.CONTINUE
    verdict = pol.decide(b, 5, 3)
    assert verdict.decision in CUT
    assert "rank 6/10" in verdict.reason and "top 5" in verdict.reason


def test_mid_run_cut_keeps_a_close_second():
    # Fifty flat trials at epoch 20: the top 2 (4%) are kept, as before the sharpening.
    fifty = [0.9 - 0.001 * i for i in range(50)]
    b = board(field_of(fifty, 20))
    pol = CostAwarePolicy("max", 52)
    assert pol.decide(b, 1, 20).decision is Decision.CONTINUE
    assert pol.decide(b, 2, 20).decision in CUT


def test_aggressiveness_cuts_deeper():
    b = board(field_of(TEN, 5))
    assert CostAwarePolicy("max", 52).decide(b, 3, 5).decision is Decision.CONTINUE
    assert CostAwarePolicy("max", 52, aggressiveness=2).decide(b, 3, 5).decision \
        in CUT  # 0.4^2 x 10 -> top 2


# ---------------------------------------------------------------------------------------
# The improvement bonus


def test_improving_trial_outranks_a_slightly_higher_flat_one():
    curves = field_of([0.9, 0.9, 0.9], 5)
    # +0.01 per epoch over the last SLOPE_EPOCHS (the jump from epoch 1 is outside it).
    curves[3] = [0.50, 0.77, 0.78, 0.79, 0.80]
    curves[4] = flat(0.82, 5)
    curves.update(field_of([0.5] * 5, 5, start=5))
    b = board(curves)
    assert cost_aware.SLOPE_EPOCHS == 3  # the curve above is built for this window
    assert b.ranked_score(3, 5) == pytest.approx(0.80 + cost_aware.IMPROVEMENT_BONUS * 0.01)
    assert b.ranked_score(3, 5) > 0.82
    assert b.ranked_score(4, 5) == pytest.approx(0.82)
    pol = CostAwarePolicy("max", 52)
    assert pol.decide(b, 3, 5).decision is Decision.CONTINUE  # rank 4 of 10
    verdict = pol.decide(b, 4, 5)
    assert verdict.decision in CUT and "rank 5/10" in verdict.reason


def test_slope_is_the_mean_gain_over_the_last_slope_epochs():
    curve = [0.1, 0.3, 0.4, 0.6, 0.7, 0.75]
    b = board({0: curve})
    assert b.slope(0, 1) == 0.0  # nothing before epoch 1
    assert b.slope(0, 2) == pytest.approx(0.2)  # one epoch back
    assert b.slope(0, 3) == pytest.approx((0.4 - 0.1) / 2)  # two back
    assert b.slope(0, 4) == pytest.approx((0.6 - 0.1) / 3)
    # Never further back than SLOPE_EPOCHS (3): epoch 6 looks back to epoch 3.
    n = cost_aware.SLOPE_EPOCHS
    assert b.slope(0, 6) == pytest.approx((curve[5] - curve[5 - n]) / n)
    assert b.slope(0, 6) == pytest.approx((0.75 - 0.4) / 3)


def test_slope_is_zero_when_falling_or_unknown():
    b = board({0: [0.5, 0.9, 0.8, 0.4], 1: [0.2, 0.3]})
    assert b.slope(0, 4) == 0.0  # 0.9 -> 0.4: falling
    assert b.slope(0, 3) == pytest.approx((0.8 - 0.5) / 2)  # up over the window
    assert b.slope(1, 3) == 0.0  # no value at epoch 3
    assert b.slope(9, 2) == 0.0  # unknown trial
    gap = Board()
    gap.add(0, 4, 0.9)  # epoch 1 (three back) missing
    gap.add(0, 3, 0.1)
    assert gap.slope(0, 4) == 0.0


def test_slope_in_min_mode_is_a_falling_loss():
    b = board({0: [1.0, 0.9, 0.7, 0.4]}, mode="min")
    assert b.slope(0, 4) == pytest.approx(0.2)
    rising = board({0: [0.4, 0.5]}, mode="min")
    assert rising.slope(0, 2) == 0.0


def test_no_bonus_for_getting_worse():
    b = board({0: [0.9, 0.5]})
    assert b.ranked_score(0, 2) == pytest.approx(0.5)
    assert b.ranked_score(0, 1) == pytest.approx(0.9)
    assert b.ranked_score(0, 3) is None


# ---------------------------------------------------------------------------------------
# Minimisation


def test_min_mode_stops_the_highest_loss_and_predicts_in_metric_units():
    losses = [0.1 + 0.05 * i for i in range(10)]  # trial 0 best (lowest)
    b = board(field_of(losses, 5), mode="min")
    pol = CostAwarePolicy("min", 52)
    verdict = pol.decide(b, 9, 5)
    assert verdict.decision in CUT
    assert "rank 10/10" in verdict.reason
    assert verdict.predicted_final == pytest.approx(losses[9])  # positive, as logged
    assert pol.decide(b, 0, 5).decision is Decision.CONTINUE


def test_min_mode_improvement_is_a_falling_loss():
    # Scores at epoch 2: -2.0, -0.8, -0.6, -0.5: IQR 0.525; the slope 0.2 x 4 epochs
    # (0.8) is capped at half of it.
    b = board({0: [1.0, 0.8], 1: [0.5, 0.5], 2: [0.6, 0.6], 3: [2.0, 2.0]}, mode="min")
    assert b.slope(0, 2) == pytest.approx(0.2)
    assert b.spread(2) == pytest.approx(0.525)
    assert b.ranked_score(0, 2) == pytest.approx(-0.8 + cost_aware.BONUS_CAP * 0.525)


def test_bonus_is_capped_by_the_spread_at_the_epoch():
    # Slope 0.01 x 4 = 0.04 is under half the IQR: uncapped; with a field ten times
    # tighter the same slope is capped.
    wide = board({0: [0.77, 0.78, 0.79, 0.80], 1: flat(0.9, 4), 2: flat(0.5, 4),
                  3: flat(0.6, 4), 4: flat(0.85, 4)})
    assert wide.bonus(0, 4) == pytest.approx(cost_aware.IMPROVEMENT_BONUS * 0.01)
    tight = board({0: [0.77, 0.78, 0.79, 0.80], 1: flat(0.801, 4), 2: flat(0.799, 4),
                   3: flat(0.8005, 4), 4: flat(0.7995, 4)})
    assert tight.bonus(0, 4) == pytest.approx(cost_aware.BONUS_CAP * tight.spread(4))
    assert tight.bonus(0, 4) < 0.01


def test_spread_is_the_iqr_or_the_range():
    b = board({i: [v] for i, v in enumerate([1.0, 2.0, 3.0, 4.0, 5.0])})
    assert b.spread(1) == pytest.approx(2.0)
    ties = board({0: [1.0], 1: [1.0], 2: [1.0], 3: [1.0], 4: [3.0]})
    assert ties.spread(1) == pytest.approx(2.0)  # IQR 0: the range
    assert board({0: [1.0]}).spread(1) == 0.0


def test_min_mode_prediction_adds_typical_remaining_gain():
    # Finished trials fell by 0.2 in loss after epoch 5 (0.5 -> 0.3, 0.6 -> 0.4).
    curves = {100: [0.9, 0.7, 0.6, 0.55, 0.5, 0.4, 0.3],
              101: [1.0, 0.8, 0.7, 0.65, 0.6, 0.5, 0.4]}
    losses = [0.5 + 0.05 * i for i in range(10)]
    curves.update(field_of(losses, 5))
    b = board(curves, mode="min", finished=(100, 101))
    assert b.incumbent() == pytest.approx(-0.3)
    verdict = CostAwarePolicy("min", max_epochs=7).decide(b, 9, 5)
    assert verdict.decision in CUT
    assert verdict.predicted_final == pytest.approx(losses[9] - 0.2)


# ---------------------------------------------------------------------------------------
# The incumbent guard


def _guarded_board(candidate: list[float]) -> Board:
    """A finished trial at 0.95 and one at 0.81; finished curves gain <= 0.02 after
    epoch 3; the candidate is trial 7."""
    curves = {
        1: [0.50, 0.80, 0.93, 0.94, 0.94, 0.94, 0.945, 0.95, 0.95, 0.95],
        2: [0.40, 0.70, 0.80, 0.80, 0.80, 0.80, 0.81, 0.81, 0.81, 0.81],
        7: candidate,
    }
    return board(curves, finished=(1, 2))


def test_guard_stops_a_flat_trial_that_cannot_reach_the_incumbent():
    b = _guarded_board([0.60, 0.60, 0.60])
    assert b.incumbent() == pytest.approx(0.95)
    verdict = CostAwarePolicy("max", max_epochs=10).decide(b, 7, 3)
    assert verdict.decision is Decision.STOP
    assert "cannot reach" in verdict.reason
    assert "0.95" in verdict.reason
    # Expected final: now + the median gain of finished trials from epoch 3 (0.02, 0.01).
    assert verdict.predicted_final == pytest.approx(0.615)


def test_guard_spares_a_trial_rising_fast_enough():
    # Slope 0.04/epoch x 7 epochs left x GUARD_OPTIMISM (3) = 0.84: 0.60 -> 1.44 >= 0.95.
    b = _guarded_board([0.52, 0.56, 0.60])
    assert 0.60 + cost_aware.GUARD_OPTIMISM * 0.04 * 7 >= 0.95
    assert CostAwarePolicy("max", 10).decide(b, 7, 3).decision is Decision.CONTINUE


def test_guard_stops_a_trial_rising_too_slowly():
    # Slope 0.01 x 7 x 3 = 0.21: at best 0.81 < 0.95.
    b = _guarded_board([0.58, 0.59, 0.60])
    assert 0.60 + cost_aware.GUARD_OPTIMISM * 0.01 * 7 < 0.95
    verdict = CostAwarePolicy("max", 10).decide(b, 7, 3)
    assert verdict.decision is Decision.STOP and "cannot reach" in verdict.reason


def test_guard_spares_a_trial_within_the_typical_gain():
    b = _guarded_board([0.90, 0.93, 0.935])
    assert CostAwarePolicy("max", 10).decide(b, 7, 3).decision is Decision.CONTINUE


@pytest.mark.parametrize(
    "candidate, expected",
    [
        # Peaked at 0.94, dipped to 0.84 and not rising: from the peak, the largest
        # finished recovery after epoch 4 (0.01) x 3 reaches 0.97 >= 0.95.
        ([0.90, 0.94, 0.85, 0.84], Decision.CONTINUE),
        # The same now, a lower peak: 0.91 + 0.03 < 0.95.
        ([0.90, 0.91, 0.85, 0.84], Decision.STOP),
        # Never higher than now: 0.84 + 0.03 < 0.95.
        ([0.84, 0.84, 0.84, 0.84], Decision.STOP),
    ],
)
def test_guard_starts_from_the_peak_so_far(candidate, expected):
    b = _guarded_board(candidate)
    verdict = CostAwarePolicy("max", 10).decide(b, 7, 4)
    assert verdict.decision is expected
    if expected is Decision.STOP:
        assert "cannot reach" in verdict.reason


def test_guard_peak_ignores_values_after_the_epoch():
    b = _guarded_board([0.84, 0.84, 0.84, 0.84, 0.99])
    verdict = CostAwarePolicy("max", 10).decide(b, 7, 4)
    assert verdict.decision is Decision.STOP and "cannot reach" in verdict.reason


def _recovery_board(finished_curve: list[float]) -> Board:
    """``finished_curve`` (trial 1) and a slow finished curve (trial 2), both done; the
    candidate (trial 7) is flat at 0.70 after 3 of 6 epochs."""
    curves = {1: finished_curve, 2: [0.40, 0.70, 0.80, 0.80, 0.80, 0.81],
              7: [0.70, 0.70, 0.70]}
    return board(curves, finished=(1, 2))


def test_guard_counts_a_finished_curve_that_dipped_and_recovered():
    # Trial 1 ends only 0.05 above its epoch-3 value but dipped to 0.70 at epoch 4 and
    # recovered 0.25 by the end: a trial at 0.70 at epoch 3 may still reach 0.95.
    b = _recovery_board([0.50, 0.80, 0.90, 0.70, 0.75, 0.95])
    assert b.incumbent() == pytest.approx(0.95)
    assert CostAwarePolicy("max", 6).decide(b, 7, 3).decision is Decision.CONTINUE


def test_guard_stops_when_finished_curves_rose_steadily():
    # Same final and epoch-3 value, no dip: the recovery is 0.05; 0.70 + 0.075 < 0.95.
    b = _recovery_board([0.50, 0.80, 0.90, 0.92, 0.93, 0.95])
    verdict = CostAwarePolicy("max", 6).decide(b, 7, 3)
    assert verdict.decision is Decision.STOP and "cannot reach" in verdict.reason


def test_guard_recovery_counts_only_from_this_epoch_on():
    # A dip at epoch 2, before the candidate's epoch 3, says nothing about its future.
    b = _recovery_board([0.50, 0.20, 0.90, 0.92, 0.93, 0.95])
    assert CostAwarePolicy("max", 6).decide(b, 7, 3).decision is Decision.STOP


def test_no_guard_before_any_trial_finished():
    b = _guarded_board([0.60, 0.60, 0.60])
    b.finished.clear()
    assert CostAwarePolicy("max", 10).decide(b, 7, 3).decision is Decision.CONTINUE


def test_guard_needs_min_finished_curves():
    # One finished curve is too little evidence of how much trials gain late.
    b = _guarded_board([0.60, 0.60, 0.60])
    assert len(b.finished) == cost_aware.MIN_FINISHED
    b.finished.discard(2)
    assert CostAwarePolicy("max", 10).decide(b, 7, 3).decision is Decision.CONTINUE
    b.finish(2)
    assert CostAwarePolicy("max", 10).decide(b, 7, 3).decision is Decision.STOP


def test_guard_in_min_mode():
    curves = {1: [0.9, 0.5, 0.32, 0.31, 0.3], 2: [1.0, 0.7, 0.5, 0.5, 0.49],
              5: [2.0, 2.0, 2.0]}
    b = board(curves, mode="min", finished=(1, 2))
    verdict = CostAwarePolicy("min", max_epochs=5).decide(b, 5, 3)
    assert verdict.decision is Decision.STOP
    assert "cannot reach" in verdict.reason and "0.3" in verdict.reason
    # Loss gains from epoch 3 of the finished curves: 0.02 and 0.01 -> median 0.015.
    assert verdict.predicted_final == pytest.approx(1.985)


# ---------------------------------------------------------------------------------------
# Board bookkeeping


def test_repeated_add_keeps_the_first_value():
    b = Board()
    b.add(0, 1, 0.5)
    b.add(0, 1, 0.9)
    assert b.scores == {0: {1: 0.5}}


def test_nan_and_none_are_ignored():
    b = Board()
    b.add(0, 1, float("nan"))
    b.add(0, 2, None)
    assert b.scores == {}
    b.add(0, 1, 0.3)
    assert b.scores == {0: {1: 0.3}}


def test_min_board_stores_negated_scores():
    b = Board(mode="min")
    b.add(0, 1, 0.25)
    assert b.scores[0][1] == -0.25
    assert b.final(0) == -0.25


def test_final_and_incumbent():
    b = board({0: [0.1, 0.5, 0.4], 1: [0.2, 0.3]}, finished=(0,))
    assert b.final(0) == 0.4  # the last epoch's value, not the best
    assert b.final(1) == 0.3
    assert b.final(2) is None
    assert b.incumbent() == 0.4
    assert Board().incumbent() is None


def test_no_stop_when_finishing_costs_less_than_the_finish_share():
    # The last trial of ten, far behind: stopped while much of its training is left,
    # kept once what is left is at most FINISH_SHARE of a trial (here 2 of 20 epochs).
    pol = CostAwarePolicy("max", 20)
    b = board(field_of(TEN, 18))
    assert pol.decide(b, 9, 17).decision in CUT
    assert pol.decide(b, 9, 18).decision is Decision.CONTINUE
