"""Unit tests of hpsearch.simulate: replaying hand-made curves on W workers in simulated time,
every decision taken by the search core (hpsearch.core.search) as in a real run.

Pure: no Ray, torch, Lightning or Optuna is imported here (benchmarks.peers imports them
only inside the policies that need them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import peers
from hpsearch.trials import TrialState
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.money.ledger_entries import PREEMPTED, DONE
from hpsearch.pruning.none import NoPruning
from hpsearch.simulate import Curve, Preemptions, Segment, SimResult, simulate

REPO = Path(__file__).resolve().parents[1]
C, S, P = Decision.CONTINUE, Decision.STOP, Decision.PAUSE


def curve(epoch_s: list[float], values: list[float] | None = None,
          startup_s: float = 0.0) -> Curve:
    """A curve from per-epoch durations (values default to 1, 2, 3, ...)."""
    cum, t = [], 0.0
    for d in epoch_s:
        t += d
        cum.append(t)
    values = values if values is not None else [float(e) for e in range(1, len(epoch_s) + 1)]
    return Curve(tuple(values), tuple(cum), startup_s)


def cost_aware(max_epochs: int):
    return peers.make("cost_aware", max_epochs=max_epochs, n_trials=0, seed=0)


def timeline(result: SimResult) -> list[tuple[float, int, int]]:
    """(time, trial, epoch) of every report, in report order."""
    return [(t, trial, epoch) for t, trial, epoch, _, _ in result.reports]


class Recorder(NoPruning):
    """Continues everything; records the calls it gets."""

    def __init__(self):
        self.calls: list[tuple] = []

    def on_start(self, trial, params=None):
        self.calls.append(("start", trial))

    def on_end(self, trial, epoch, state):
        self.calls.append(("end", trial, epoch, state))


def starts(result: SimResult) -> list[tuple[int, float]]:
    """(trial, time) of every start, in start order."""
    return [(trial, at) for at, trial in result.starts]


class StopAt(Recorder):
    """Stops the trials of ``at`` (trial -> epoch) after that epoch."""

    def __init__(self, at: dict[int, int]):
        super().__init__()
        self.at = at

    def on_result(self, trial, epoch, value):
        return Verdict(S, "test") if self.at.get(trial) == epoch else CONTINUE


class PauseThenResume(Recorder):
    """Pauses every trial after epoch 2; once the queue is drained (``n`` trials paused)
    resumes ``resume`` in that order."""

    def __init__(self, n: int, resume: list[int]):
        super().__init__()
        self.n, self.resume = n, list(resume)
        self.paused: set[int] = set()
        self.asked = 0

    def on_result(self, trial, epoch, value):
        if epoch == 2 and trial not in self.paused:
            self.paused.add(trial)
            return Verdict(P, "test")
        return CONTINUE

    def pick_resume(self, waiting, fresh=True):
        self.asked += 1
        if len(self.paused) < self.n or not self.resume:
            return None
        return self.resume.pop(0)


# ---------------------------------------------------------------------------------------
# Order of events


def test_one_worker_runs_trials_one_after_another():
    curves = [curve([1, 2]), curve([3]), curve([0.5, 0.5, 0.5])]
    result = simulate(curves, [1, 0, 2], 1, NoPruning())
    assert timeline(result) == [(3, 1, 1), (4, 0, 1), (6, 0, 2),
                                (6.5, 2, 1), (7, 2, 2), (7.5, 2, 3)]
    assert result.segments == [Segment(1, 0, 3, 1, 1), Segment(0, 3, 6, 1, 2),
                               Segment(2, 6, 7.5, 1, 3)]
    assert result.completed == {1: 3, 0: 6, 2: 7.5}
    assert result.epochs_done == {1: 1, 0: 2, 2: 3}
    assert result.end_s == 7.5
    assert result.busy_s() == 7.5


def test_reports_follow_simulated_time_across_workers():
    # Trial 0 (slow) starts first, trial 1 (fast) second: 1 reports first.
    curves = [curve([10, 10]), curve([1, 1, 1])]
    result = simulate(curves, [0, 1], 2, NoPruning())
    assert timeline(result) == [(1, 1, 1), (2, 1, 2), (3, 1, 3), (10, 0, 1), (20, 0, 2)]
    assert result.completed == {1: 3, 0: 20}
    assert result.end_s == 20
    assert result.busy_s() == 23


def test_a_free_worker_takes_the_next_configuration_in_order():
    curves = [curve([10]), curve([1]), curve([1]), curve([1])]
    rec = Recorder()
    result = simulate(curves, [0, 1, 2, 3], 2, rec)
    assert starts(result) == [(0, 0), (1, 0), (2, 1), (3, 2)]
    assert [c[1] for c in rec.calls if c[0] == "start"] == [0, 1, 2, 3]
    assert result.completed == {1: 1, 2: 2, 3: 3, 0: 10}


def test_order_selects_and_orders_configurations():
    curves = [curve([1]) for _ in range(5)]
    rec = Recorder()
    simulate(curves, [4, 2], 1, rec)
    assert [c[1] for c in rec.calls if c[0] == "start"] == [4, 2]


def test_simultaneous_first_epochs_report_in_start_order():
    curves = [curve([2, 2]) for _ in range(3)]
    result = simulate(curves, [2, 0, 1], 3, NoPruning())
    assert timeline(result) == [(2, 2, 1), (2, 0, 1), (2, 1, 1),
                                (4, 2, 2), (4, 0, 2), (4, 1, 2)]


def test_ties_are_deterministic():
    curves = [curve([1, 2, 1, 1]), curve([2, 1, 1, 1]), curve([1, 1, 2, 1]),
              curve([3, 1]), curve([1, 1, 1, 1, 1])]
    runs = [simulate(curves, [0, 1, 2, 3, 4], 3, NoPruning()) for _ in range(3)]
    assert runs[0].reports == runs[1].reports == runs[2].reports
    assert runs[0].segments == runs[1].segments == runs[2].segments
    times = [t for t, *_ in runs[0].reports]
    assert times == sorted(times)
    assert len(set(times)) < len(times)  # there were ties to break


def test_ties_in_time_are_taken_in_the_order_they_were_scheduled():
    # As simulate's docstring says. Trial 0 starts first; both trials' second epochs end
    # at t=3, but trial 1 scheduled its second epoch earlier (at t=1, trial 0 at t=2).
    curves = [curve([2, 1]), curve([1, 2])]
    result = simulate(curves, [0, 1], 2, NoPruning())
    assert timeline(result)[2:] == [(3, 1, 2), (3, 0, 2)]


def test_fewer_than_one_worker_is_an_error():
    with pytest.raises(ValueError, match="workers"):
        simulate([curve([1])], [0], 0, NoPruning())


def test_nothing_to_run():
    result = simulate([curve([1])], [], 2, NoPruning())
    assert result.reports == [] and result.segments == [] and result.end_s == 0
    assert result.busy_s() == 0


# ---------------------------------------------------------------------------------------
# Decisions


def test_stop_frees_the_worker_for_the_next_configuration_at_that_moment():
    curves = [curve([1, 1, 1, 1], [0.1, 0.2, 0.3, 0.4]), curve([5, 5]), curve([2, 2])]
    sched = StopAt({0: 2})
    result = simulate(curves, [0, 1, 2], 2, sched)
    assert result.reports[:2] == [(1, 0, 1, 0.1, C), (2, 0, 2, 0.2, S)]
    assert ("end", 0, 2, TrialState.PRUNED) in sched.calls
    assert (2, 2) in starts(result)  # at the moment trial 0 left
    assert sched.calls.index(("end", 0, 2, TrialState.PRUNED)) < sched.calls.index(("start", 2))
    assert result.epochs_done == {0: 2, 1: 2, 2: 2}
    assert 0 not in result.completed
    assert result.completed == {2: 6, 1: 10}
    assert Segment(0, 0, 2, 1, 2) in result.segments
    assert Segment(2, 2, 6, 1, 2) in result.segments


def test_stop_at_the_last_epoch_still_completes_the_trial():
    result = simulate([curve([1, 1])], [0], 1, StopAt({0: 2}))
    assert result.completed == {0: 2}


def test_pause_keeps_progress_and_resumes_from_the_next_epoch():
    curves = [curve([1, 1, 1, 1], [0.1, 0.2, 0.3, 0.4]), curve([2, 2, 2, 2]),
              curve([1, 1, 1])]
    sched = PauseThenResume(n=3, resume=[1, 0])
    result = simulate(curves, [0, 1, 2], 1, sched)
    assert timeline(result) == [
        (1, 0, 1), (2, 0, 2),  # paused
        (4, 1, 1), (6, 1, 2),  # paused
        (7, 2, 1), (8, 2, 2),  # paused: all three are, resume 1 then 0
        (10, 1, 3), (12, 1, 4),
        (13, 0, 3), (14, 0, 4),
    ]
    assert [r[4] for r in result.reports] == [C, P, C, P, C, P, C, C, C, C]
    assert result.segments == [
        Segment(0, 0, 2, 1, 2), Segment(1, 2, 6, 1, 2), Segment(2, 6, 8, 1, 2),
        Segment(1, 8, 12, 3, 4), Segment(0, 12, 14, 3, 4),
    ]
    assert result.completed == {1: 12, 0: 14}
    assert result.epochs_done == {0: 4, 1: 4, 2: 2}  # trial 2 stays paused
    ends = [c for c in sched.calls if c[0] == "end"]
    paused = TrialState.PAUSED
    assert ends[:3] == [("end", 0, 2, paused), ("end", 1, 2, paused), ("end", 2, 2, paused)]
    # Trial 2 was never resumed: the session's end prunes it.
    assert ends[3:] == [("end", 1, 4, TrialState.COMPLETE), ("end", 0, 4, TrialState.COMPLETE),
                        ("end", 2, 2, TrialState.PRUNED)]
    assert starts(result) == [(0, 0), (1, 2), (2, 6), (1, 8), (0, 12)]
    assert result.core.record(2).state is TrialState.PRUNED
    # A paused trial's resumed epochs are reported with their own values.
    assert result.reports[-2][3] == 0.3 and result.reports[-1][3] == 0.4


def test_a_resumed_trial_goes_before_the_next_configuration():
    class ResumeFirst(Recorder):
        def __init__(self):
            super().__init__()
            self.paused: list[int] = []

        def on_result(self, trial, epoch, value):
            if trial == 0 and epoch == 1 and not self.paused:
                self.paused.append(0)
                return Verdict(P, "test")
            return CONTINUE

        def pick_resume(self, waiting, fresh=True):
            return self.paused.pop() if self.paused else None

    sched = ResumeFirst()
    result = simulate([curve([1, 1]), curve([1])], [0, 1], 1, sched)
    assert starts(result) == [(0, 0), (0, 1), (1, 2)]


def test_startup_delays_the_first_epoch_of_every_start_and_resume():
    curves = [curve([1, 1, 1, 1], startup_s=5), curve([1, 1], startup_s=0.5)]
    sched = PauseThenResume(n=2, resume=[0])
    result = simulate(curves, [0, 1], 1, sched)
    assert timeline(result) == [
        (6, 0, 1), (7, 0, 2),  # 5 s startup, then 1 s epochs; paused after epoch 2
        (8.5, 1, 1), (9.5, 1, 2),  # 0.5 s startup; trial 1 paused at its curve's end
        (15.5, 0, 3), (16.5, 0, 4),  # resumed: 5 s startup again
    ]
    assert result.segments[0] == Segment(0, 0, 7, 1, 2)
    assert result.segments[-1] == Segment(0, 9.5, 16.5, 3, 4)
    assert result.trial_busy_s(0) == 14  # two startups + four epochs
    # The policy's pause wins over a curve shorter than max_epochs: trial 1 is never
    # resumed, and the session's end prunes it.
    assert result.completed == {0: 16.5}
    assert result.core.record(1).state is TrialState.PRUNED


# ---------------------------------------------------------------------------------------
# Money: busy worker time


def test_busy_s_until_counts_epochs_in_flight_up_to_that_moment():
    curves = [curve([4, 4]), curve([1, 1]), curve([3])]
    result = simulate(curves, [0, 1, 2], 2, NoPruning())
    # Trial 0 busy 0-8, trial 1 busy 0-2, trial 2 busy 2-5.
    assert sorted((s.trial, s.start_s, s.end_s) for s in result.segments) == [
        (0, 0, 8), (1, 0, 2), (2, 2, 5)]
    assert result.busy_s() == 13
    assert result.busy_s(0) == 0
    assert result.busy_s(1) == 2  # both in their first epoch
    assert result.busy_s(2) == 4
    assert result.busy_s(3.5) == 3.5 + 2 + 1.5  # trial 0's epoch 1 and trial 2 in flight
    assert result.busy_s(8) == result.busy_s(100) == 13
    assert result.trial_busy_s(0) == 8
    assert result.trial_busy_s(2) == 3
    assert result.trial_busy_s(9) == 0


def test_busy_s_is_non_decreasing_in_time():
    curves = [curve([1.5, 2.5, 0.5]), curve([2, 2]), curve([0.3] * 5), curve([4])]
    result = simulate(curves, [3, 0, 2, 1], 2, StopAt({0: 2}))
    grid = [i * 0.25 for i in range(0, 60)]
    busy = [result.busy_s(t) for t in grid]
    assert busy == sorted(busy)
    assert busy[-1] == pytest.approx(result.busy_s())
    assert result.busy_s() == pytest.approx(sum(result.trial_busy_s(t) for t in range(4)))


# ---------------------------------------------------------------------------------------
# The cost-aware pruner on the simulated clock


def test_cost_aware_and_no_pruning_agree_when_the_policy_cannot_stop():
    # Two-epoch curves: decisions start at epoch 2, the last one, so none is taken.
    curves = [curve([1 + (i % 3), 0.5 + (i % 4)], [0.1 * ((7 * i) % 10), 0.05 * i])
              for i in range(12)]
    order = [5, 3, 11, 0, 1, 8, 2, 4, 10, 6, 9, 7]
    none = simulate(curves, order, 3, NoPruning())
    aware = simulate(curves, order, 3, cost_aware(2))
    assert aware.reports == none.reports
    assert aware.segments == none.segments
    assert aware.completed == none.completed
    assert len(aware.completed) == 12
    assert aware.core.policy.board.finished == set(range(12))


def test_cost_aware_cuts_hopeless_trials_on_the_simulated_clock():
    # Twelve flat curves; the policy cuts the worst at once when it can rank them. Those
    # no optimistic path takes to the best finished value are paused (not stopped) while
    # configurations are new, judged again once none are, and end PRUNED with that reason.
    curves = [curve([1.0] * 10, [90.0 - 5 * i] * 10) for i in range(12)]
    result = simulate(curves, list(range(12)), 4, cost_aware(10))
    stopped = [t for t in result.epochs_done if t not in result.completed]
    assert stopped and 0 in result.completed
    assert not any(d is S for *_, d in result.reports)
    hopeless = [t for t in stopped if "optimistic path" in result.core.record(t).stop.reason]
    assert hopeless and all(result.core.record(t).state is TrialState.PRUNED for t in stopped)
    assert all(result.epochs_done[t] <= 3 for t in hopeless)  # never resumed
    assert result.busy_s() < 12 * 10


@pytest.mark.slow
def test_simulate_and_peers_import_no_heavy_package():
    code = ("import sys, json; import hpsearch.simulate, benchmarks.peers; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'ray', 'torch', 'pytorch_lightning', 'lightning', 'optuna'})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------------------------------
# Preemptions (spot)


class ScriptedPreemptions(Preemptions):
    """Preempt attempt 1 of each listed trial ``after`` seconds into it; never again."""

    def __init__(self, after: dict[int, float], restart_s: float = 0.0,
                 checkpoint_s: float = 0.0):
        super().__init__(rate_per_hour=1.0, restart_s=restart_s, checkpoint_s=checkpoint_s)
        object.__setattr__(self, "after", after)

    def after_s(self, trial, attempt):
        return self.after.get(trial, float("inf")) if attempt == 1 else float("inf")


def test_a_preempted_trial_restarts_from_its_last_epoch_and_loses_the_partial_one():
    # Epochs of 10 s; preempted 25 s in (mid epoch 3): 5 s lost, restart costs 7 s.
    sched = Recorder()
    result = simulate([curve([10] * 4)], [0], 1, sched,
                      preemptions=ScriptedPreemptions({0: 25.0}, restart_s=7.0))
    assert result.preempted == [(25.0, 0, 5.0, 7.0)]
    assert timeline(result) == [(10, 0, 1), (20, 0, 2), (25 + 7 + 10, 0, 3), (52, 0, 4)]
    assert [(s.start_s, s.end_s, s.first_epoch, s.last_epoch) for s in result.segments] == [
        (0, 25, 1, 2), (25, 52, 3, 4)]
    assert result.busy_s() == 52 and result.completed == {0: 52}
    assert sched.calls == [("start", 0), ("end", 0, 2, TrialState.PREEMPTED), ("start", 0),
                           ("end", 0, 4, TrialState.COMPLETE)]


def test_a_restart_goes_before_new_configurations():
    result = simulate([curve([10, 10]), curve([1])], [0, 1], 1, NoPruning(),
                      preemptions=ScriptedPreemptions({0: 15.0}))
    assert timeline(result) == [(10, 0, 1), (25, 0, 2), (26, 1, 1)]


def test_checkpoints_cost_worker_time_every_epoch():
    result = simulate([curve([10, 10])], [0], 1, NoPruning(),
                      preemptions=ScriptedPreemptions({}, checkpoint_s=2.0))
    assert timeline(result) == [(12, 0, 1), (24, 0, 2)]
    assert result.checkpoint_s == 4.0


def test_the_core_bills_a_preempted_attempt_apart():
    result = simulate([curve([10] * 4)], [0], 1, cost_aware(4),
                      preemptions=ScriptedPreemptions({0: 25.0}, restart_s=5.0))
    intervals = result.core.accountant.ledger.intervals
    assert [i.outcome for i in intervals] == [PREEMPTED, DONE]
    assert intervals[0].wasted_s() == pytest.approx(5.0)
    assert result.core.accountant.ledger.spent() == pytest.approx(result.busy_s() / 3600)


def test_poisson_preemptions_are_seeded():
    model = Preemptions(rate_per_hour=3600.0, seed=3)
    assert model.after_s(0, 1) == Preemptions(rate_per_hour=3600.0, seed=3).after_s(0, 1)
    assert model.after_s(0, 1) != model.after_s(0, 2)
    assert Preemptions(rate_per_hour=0.0).after_s(0, 1) == float("inf")


# -- node billing in the simulator: workers released when idle, or a fixed cluster ------

from hpsearch.money.nodes import Fleet, fleet_cost  # noqa: E402
from hpsearch.money.pricing import Price  # noqa: E402
from hpsearch.money.statement import statement  # noqa: E402
from hpsearch.spec.sections import Budget  # noqa: E402


def test_workers_released_when_idle_bill_busy_time_and_no_idle():
    curves = [curve([10, 10]), curve([5]), curve([30])]
    result = simulate(curves, [0, 1, 2], 2, NoPruning())
    money = statement(result.core.accountant.ledger, result.end_s)
    assert money.total == pytest.approx(result.busy_s() / 3600)
    assert money.kept == pytest.approx(money.total) and money.idle == pytest.approx(0.0)
    assert len(money.nodes) == 3  # one rental per attempt


def test_a_fixed_cluster_bills_every_node_for_the_whole_search():
    curves = [curve([10, 10]), curve([5]), curve([30])]
    result = simulate(curves, [0, 1, 2], 2, NoPruning(), fleet=Fleet.HELD)
    assert result.end_s == 35.0  # trial 2 starts at 5 s on the node trial 1 freed
    money = statement(result.core.accountant.ledger, result.end_s)
    assert money.total == pytest.approx(fleet_cost(2, 35.0, 1.0))
    assert money.kept == pytest.approx(result.busy_s() / 3600)
    assert money.idle == pytest.approx((2 * 35.0 - 55.0) / 3600)
    assert [n.node for n in money.nodes] == ["w0", "w1"]
    # The same search with workers released when idle: the same work, no idle.
    elastic = simulate(curves, [0, 1, 2], 2, NoPruning())
    assert elastic.busy_s() == result.busy_s()


#: One worker-hour at 36: 0.01 per second, per second after a 60 s minimum.
MINUTE_PRICE = Price(36.0, "USD", "sim", False, 36.0, 1.0, billing_granularity_s=1,
                     min_billing_s=60)


@pytest.mark.parametrize("fleet", [Fleet.PER_TRIAL, Fleet.HELD])
def test_a_budget_at_a_60_s_minimum_with_5_s_trials_passes_by_at_most_one_epoch(fleet):
    curves = [curve([1.0] * 5) for _ in range(100)]
    # (The fixed cluster's two minimums, 1.20, are owed whatever the budget.)
    for cap in (1.3, 1.9, 3.1):
        result = simulate(curves, list(range(100)), 2, NoPruning(), price=MINUTE_PRICE,
                          budget=Budget(max_cost=cap), fleet=fleet)
        spent = result.core.accountant.ledger.spent()
        assert spent <= cap + 2 * 1.0 * 0.01 + 1e-9, (fleet, cap, spent)
        assert 0 < len(result.starts) < 100
        if fleet is Fleet.PER_TRIAL:
            # Each 5 s trial rented its own worker: billed a whole minute, once.
            assert all(r.billed_s() == 60.0 for r in result.core.accountant.ledger.rentals)


def test_a_fixed_cluster_is_released_when_its_last_trial_ends_not_at_a_stale_event():
    # The preemption drawn for trial 0's only attempt lies long after it completed.
    result = simulate([curve([10, 10])], [0], 1, NoPruning(),
                      preemptions=ScriptedPreemptions({0: 500.0}), fleet=Fleet.HELD)
    assert result.last_busy_s == 20.0 and result.end_s == 500.0
    (rental,) = result.core.accountant.ledger.rentals
    assert rental.end_s == 20.0
