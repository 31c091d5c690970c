"""Unit tests of hpsearch.money.runtime: epoch-time estimates and a run's remaining time.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here.
"""

from __future__ import annotations

import pytest

from hpsearch.money.runtime import WINDOW, RunTiming, TrialTiming, epoch_estimate


@pytest.mark.parametrize(
    "times, expected",
    [
        ([], None),
        ([7.0], 7.0),
        ([10, 1, 1, 1], 1),  # the slow first epoch is left out
        ([10, 2], 2),
        ([30, 4, 6], 5),
        ([10, 1, 1, 50, 1], 1),  # one outlier moves nothing
        ([10, 2, 2, 2, 2, 2, 9, 9, 9], 9),  # recent speed: the last WINDOW epochs
        ([100, 1, 2, 3, 4, 5, 6, 7], 5),  # median of [3, 4, 5, 6, 7]
        ([-1.0], None),  # negative durations are not measurements
    ],
)
def test_epoch_estimate(times, expected):
    assert epoch_estimate(times) == expected


def test_window_is_five():
    assert WINDOW == 5
    # Exactly the last five epochs after the first count: a window of 6 would give 50.5
    # here, one of 4 would give 50.5 in the second case.
    assert epoch_estimate([0, 1, 1, 1, 100, 100, 100]) == 100
    assert epoch_estimate([0, 1, 1, 1, 100, 100, 1, 1]) == 1


def test_trial_timing():
    timing = TrialTiming()
    assert timing.epoch_s() is None
    timing.epoch_times_s.extend([10, 2, 2])
    assert timing.epoch_s() == 2


def test_run_timing_before_any_epoch():
    timing = RunTiming(max_epochs=10)
    assert timing.epoch_s() is None
    assert timing.epoch_s(3) is None
    assert timing.remaining_s(3, 0) is None
    assert timing.new_trial_s() is None
    assert timing.startup_s() == 0.0


def test_run_timing_per_trial_and_run_median():
    timing = RunTiming(max_epochs=10)
    for t in (12, 2, 2, 2):
        timing.record_epoch(0, t)
    for t in (20, 6, 6):
        timing.record_epoch(1, t)
    timing.record_epoch(2, 4)
    assert timing.epoch_s(0) == 2
    assert timing.epoch_s(1) == 6
    assert timing.epoch_s(2) == 4  # its only epoch
    # A trial without epochs borrows the run's median of per-trial estimates.
    assert timing.epoch_s(99) == 4
    assert timing.epoch_s() == 4


def test_remaining_s():
    timing = RunTiming(max_epochs=10)
    for t in (12, 3, 3):
        timing.record_epoch(0, t)
    assert timing.remaining_s(0, 3) == pytest.approx(21)
    assert timing.remaining_s(0, 10) == 0
    assert timing.remaining_s(0, 12) == 0  # never negative
    assert timing.remaining_s(5, 0) == pytest.approx(30)  # unmeasured: the run's median


def test_new_trial_includes_median_startup():
    timing = RunTiming(max_epochs=4)
    timing.record_epoch(0, 10, startup_s=5)
    timing.record_epoch(0, 2, startup_s=500)  # only a first epoch's start-up counts
    timing.record_epoch(1, 10, startup_s=7)
    timing.record_epoch(1, 2)
    timing.record_epoch(2, 10, startup_s=30)
    timing.record_epoch(2, 2)
    assert timing.trials[0].startup_s == 5
    assert timing.startup_s() == 7
    assert timing.new_trial_s() == pytest.approx(7 + 4 * 2)


def test_new_trial_without_startup():
    timing = RunTiming(max_epochs=3)
    timing.record_epoch(0, 5)
    assert timing.new_trial_s() == pytest.approx(15)


def test_record_epoch_clamps_negative_times():
    timing = RunTiming(max_epochs=3)
    timing.record_epoch(0, -4, startup_s=-1)
    assert timing.trials[0].epoch_times_s == [0.0]
    assert timing.trials[0].startup_s == 0.0
