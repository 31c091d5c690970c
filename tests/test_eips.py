"""The benchmark of proposals by expected improvement per predicted second
(benchmarks/eips.py): its epoch-time forecast, the planner's choice between equal gains,
and its command. Pure: no Ray, no torch."""

from __future__ import annotations

import numpy as np

from benchmarks import eips, sampled
from hpsearch.model.encoding import Dimension
from hpsearch.model.planner import Planner
from hpsearch.model.standing import TrialCurve


def test_a_candidates_epoch_time_is_its_neighbours():
    # Fast configurations near a = 0, slow ones (10x) near a = 1.
    known = [((a,), 1.0) for a in np.linspace(0.0, 0.3, 10)] + \
            [((a,), 10.0) for a in np.linspace(0.7, 1.0, 10)]
    fast, middle, slow = eips.predicted_epoch_s(known, np.array([[0.1], [0.5], [0.9]]))
    assert fast < 1.5 and slow > 7.0 and fast < middle < slow
    # Too little measured: every candidate costs the same.
    assert eips.predicted_epoch_s(known[:1], np.array([[0.1], [0.9]])).tolist() == [1.0, 1.0]


def board():
    """Better towards a = 1 and b irrelevant to the metric; b sets the epoch time."""
    trials = [TrialCurve(n, (a, b), {1: a})
              for n, (a, b) in enumerate((a, b) for a in np.linspace(0, 0.8, 10)
                                         for b in (0.0, 1.0))]
    return [Dimension("a", 0.0, 1.0), Dimension("b", 0.0, 1.0)], trials


def test_per_second_the_cheaper_of_two_equal_candidates_is_proposed():
    dims, trials = board()
    slow_on_b = {t.number: (1.0 + 9.0 * t.x[1]) for t in trials}
    candidates = [{"a": 0.9, "b": 1.0}, {"a": 0.9, "b": 0.0}]
    shipped = Planner(dims, 1, candidates=lambda seed: candidates)
    per_second = eips.CostPlanner(dims, 1, candidates=lambda seed: candidates, alpha=1.0,
                                  epoch_s=slow_on_b.get)
    plain = shipped.rate(shipped.model.fit(trials), candidates)
    costed = per_second.rate(per_second.model.fit(trials), candidates)
    # About ten times cheaper, so about ten times the value beside the slow twin.
    assert costed[1] / costed[0] > 5 * plain[1] / plain[0]
    assert per_second.propose(trials, 0).params == {"a": 0.9, "b": 0.0}


def test_the_command_runs_each_power_restores_the_study_and_refuses_a_bad_one(capsys):
    shipped = sampled.SampledStudy
    assert eips.main(["--tasks", "synthetic", "--seeds", "0", "--n", "30",
                      "--alphas", "0", "1"]) == 0
    assert sampled.SampledStudy is shipped
    out = capsys.readouterr().out
    assert "| 0 | 1/1 |" in out and "| 1 | 1/1 |" in out
    assert "seconds per epoch, median over the pools: 90th percentile / 10th " in out
    assert eips.main(["--alphas", "-1"]) == 2
    assert "--alphas: each between 0 and 4 (got -1)" in capsys.readouterr().err
