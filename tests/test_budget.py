"""Unit tests of hpsearch.money.budget: admission control, the run's and a trial's money caps.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here. Time comes from
a fake clock the tests move by hand; nothing sleeps.
"""

from __future__ import annotations

import pytest

from hpsearch.money.budget import Accountant, Admission
from hpsearch.money.fmt import fmt_money
from hpsearch.spec.sections import Budget
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import DONE, STOPPED
from hpsearch.money.pricing import Price

T0 = 1_700_000_000.0
#: 3.6 per hour = 0.001 per second: one 10 s epoch costs 0.01.
PRICE = Price(per_hour=3.6, currency="USD", instance="aws:p3.2xlarge", spot=False,
              instance_per_hour=3.6, share=1.0, billing_granularity_s=1, min_billing_s=0)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(max_cost=None, max_cost_per_trial=None, max_wall_s=None, max_epochs=10,
         ledger=None):
    clock = FakeClock()
    limits = Budget(max_cost=max_cost, max_cost_per_trial=max_cost_per_trial,
                    max_wall_s=max_wall_s)
    acct = Accountant(PRICE, limits, ledger if ledger is not None else Ledger(),
                      max_epochs, clock)
    return acct, clock


def run_epochs(acct, clock, trial, n, epoch_s=10.0, first=1, startup_s=None):
    """``trial`` trains epochs ``first .. first+n-1`` of ``epoch_s`` seconds each."""
    for epoch in range(first, first + n):
        clock.advance(epoch_s)
        acct.trial_reported(trial, epoch, epoch_s, startup_s if epoch == 1 else None)


# ---------------------------------------------------------------------------------------
# Admission


def test_admit_without_a_cap():
    acct, clock = make(max_cost=None)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 10)
    assert acct.spent() == pytest.approx(0.1)
    verdict = acct.admission()
    assert verdict.admission is Admission.ADMIT
    assert acct.run_stop_reason() is None


def test_admit_before_anything_is_measured():
    acct, clock = make(max_cost=0.05)
    assert acct.new_trial_cost() is None
    assert acct.admission().admission is Admission.ADMIT
    acct.trial_started(0)
    clock.advance(5)  # running, but no epoch measured yet
    assert acct.admission().admission is Admission.ADMIT


def _one_measured_epoch(max_cost):
    """Trial 0 ran one 10 s epoch: spent 0.01, 0.09 to finish, a new trial 0.1."""
    acct, clock = make(max_cost=max_cost)
    acct.trial_admitted(0)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 1)
    assert acct.spent() == pytest.approx(0.01)
    assert acct.committed() == pytest.approx(0.09)
    assert acct.new_trial_cost() == pytest.approx(0.1)
    return acct, clock


def test_admit_when_the_new_trial_fits():
    acct, _ = _one_measured_epoch(max_cost=0.25)
    assert acct.admission().admission is Admission.ADMIT


def test_wait_when_it_does_not_fit_but_a_trial_runs():
    acct, _ = _one_measured_epoch(max_cost=0.15)
    verdict = acct.admission()
    assert verdict.admission is Admission.WAIT
    assert "budget.max_cost" in verdict.reason
    assert acct.run_stop_reason() is None


def test_admission_reopens_when_a_running_trial_frees_its_commitment():
    acct, _ = _one_measured_epoch(max_cost=0.15)
    assert acct.admission().admission is Admission.WAIT
    acct.trial_ended(0, STOPPED)  # pruned: its remaining 0.09 is no longer committed
    assert acct.committed() == 0
    assert acct.admission().admission is Admission.ADMIT


def test_closed_when_it_does_not_fit_and_nothing_runs():
    acct, _ = _one_measured_epoch(max_cost=0.1)
    acct.trial_ended(0, STOPPED)
    verdict = acct.admission()
    assert verdict.admission is Admission.CLOSED
    assert "budget.max_cost" in verdict.reason
    assert "0.1000 USD" in verdict.reason  # the expected cost of a new trial


def test_wait_while_an_admitted_trial_is_pending():
    acct, _ = _one_measured_epoch(max_cost=0.15)
    acct.trial_ended(0, STOPPED)
    acct.trial_admitted(1)  # admitted, waiting for a worker
    assert acct.committed() == pytest.approx(0.1)
    assert acct.admission().admission is Admission.WAIT
    acct.trial_ended(1, STOPPED)  # never started: no longer pending
    assert acct.committed() == 0
    assert acct.admission().admission is Admission.ADMIT


def test_committed_counts_pending_trials_at_the_new_trial_cost():
    acct, clock = make(max_cost=10.0, max_epochs=10)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 4, epoch_s=10, startup_s=20)
    # new trial: 20 s start-up + 10 x 10 s = 120 s = 0.12; trial 0: 6 x 10 s = 0.06.
    assert acct.new_trial_cost() == pytest.approx(0.12)
    assert acct.committed() == pytest.approx(0.06)
    for trial in (1, 2, 3):
        acct.trial_admitted(trial)
    assert acct.committed() == pytest.approx(0.06 + 3 * 0.12)
    acct.trial_started(1)  # started: now counted by what it needs to finish
    assert acct.committed() == pytest.approx(0.06 + 0.1 + 2 * 0.12)


def test_closed_once_spent_reaches_the_cap():
    acct, clock = make(max_cost=0.05)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 4)
    assert acct.run_stop_reason() is None
    run_epochs(acct, clock, 0, 1, first=5)
    assert acct.spent() == pytest.approx(0.05)
    reason = acct.run_stop_reason()
    assert reason is not None and "budget.max_cost" in reason
    verdict = acct.admission()
    assert verdict.admission is Admission.CLOSED
    assert verdict.reason == reason
    # The decision sticks, even once spending stops.
    acct.trial_ended(0, STOPPED)
    assert acct.run_stop_reason() == reason


def test_earlier_sessions_count_against_the_cap():
    ledger = Ledger()
    ledger.open(0, T0 - 1000, PRICE)
    ledger.close(0, T0 - 500, DONE)  # 500 s = 0.5 spent in an earlier session
    acct, _ = make(max_cost=0.5, ledger=ledger)
    assert acct.spent() == pytest.approx(0.5)
    assert acct.admission().admission is Admission.CLOSED
    assert "budget.max_cost" in acct.run_stop_reason()


def test_closed_after_max_wall_s():
    acct, clock = make(max_wall_s=3600)
    clock.advance(3599)
    assert acct.run_stop_reason() is None
    assert acct.admission().admission is Admission.ADMIT
    clock.advance(1)
    reason = acct.run_stop_reason()
    assert reason is not None and "budget.max_wall_s" in reason
    assert acct.admission().admission is Admission.CLOSED


# ---------------------------------------------------------------------------------------
# The per-trial cap


def test_trial_stop_reason_fires_before_the_epoch_that_would_pass_the_cap():
    acct, clock = make(max_cost_per_trial=0.035)
    acct.trial_started(0)
    acct.trial_started(1)
    assert acct.trial_stop_reason(0, 0) is None  # no estimate yet: nothing to go on
    run_epochs(acct, clock, 0, 2)  # 0.02 spent, next epoch 0.01 -> 0.03 <= 0.035
    assert acct.trial_cost(0) == pytest.approx(0.02)
    assert acct.trial_stop_reason(0, 2) is None
    run_epochs(acct, clock, 0, 1, first=3)  # 0.03 spent, next -> 0.04 > 0.035
    reason = acct.trial_stop_reason(0, 3)
    assert reason is not None and "budget.max_cost_per_trial" in reason
    assert acct.run_stop_reason() is None  # only this trial's cap


def test_trial_stop_reason_uses_this_trials_epoch_time():
    acct, clock = make(max_cost_per_trial=0.1)
    acct.trial_started(0)
    acct.trial_started(1)
    run_epochs(acct, clock, 0, 3, epoch_s=5)  # trial 0 fast: 5 s epochs
    for epoch in range(1, 4):
        clock.advance(20)
        acct.trial_reported(1, epoch, 20)  # trial 1 slow: 20 s epochs
    # Both billed since T0. At T0+86 each has spent 0.086: trial 1's next epoch (0.02)
    # would pass 0.1, trial 0's (0.005) would not.
    clock.now = T0 + 86
    assert acct.trial_cost(0) == pytest.approx(0.086)
    assert acct.trial_cost(1) == pytest.approx(0.086)
    assert acct.trial_stop_reason(0, 3) is None
    assert acct.trial_stop_reason(1, 3) is not None


def test_no_per_trial_cap():
    acct, clock = make()
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 10)
    assert acct.trial_stop_reason(0, 10) is None


# ---------------------------------------------------------------------------------------
# Trial events


def test_report_without_start_opens_billing_at_the_epoch_start():
    acct, clock = make()
    clock.advance(100)
    acct.trial_reported(0, 1, 30.0)
    assert acct.ledger.is_open(0)
    assert acct.ledger.intervals[0].start_s == pytest.approx(T0 + 70)
    assert acct.ledger.intervals[0].checkpoint_s == pytest.approx(T0 + 100)
    assert acct.spent() == pytest.approx(0.03)


def test_repeated_report_of_an_epoch_is_measured_once():
    acct, clock = make()
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 2)
    acct.trial_reported(0, 2, 99.0)  # e.g. a restarted process re-reporting
    assert acct.timing.trials[0].epoch_times_s == [10.0, 10.0]


def test_epoch_and_finish_costs():
    acct, clock = make(max_epochs=10)
    assert acct.epoch_cost() is None and acct.cost_to_finish(0, 0) is None
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 3)
    assert acct.epoch_cost(0) == pytest.approx(0.01)
    assert acct.cost_to_finish(0, 3) == pytest.approx(0.07)
    assert acct.currency == "USD"


def test_trial_ended_closes_billing():
    acct, clock = make()
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 2)
    acct.trial_ended(0, DONE)
    clock.advance(1000)
    assert acct.spent() == pytest.approx(0.02)


# ---------------------------------------------------------------------------------------
# The cap is passed by at most one reporting interval of the running trials


def simulate(cap, epoch_s, workers=2, max_epochs=10, n_trials=12):
    """Train trials on ``workers`` slots, reporting each epoch; stop all at the cap.

    ``epoch_s[i % len(epoch_s)]`` is trial i's epoch length. Returns the accountant, the
    trials stopped by the run's cap and the epoch length of each trial.
    """
    acct, clock = make(max_cost=cap, max_epochs=max_epochs)
    length = {}
    next_report: dict[int, float] = {}  # trial -> when it reports next
    epochs: dict[int, int] = {}
    stopped_by_cap: list[int] = []
    created = 0
    closed = False

    def try_admit():
        nonlocal created, closed
        while not closed and len(next_report) < workers and created < n_trials:
            verdict = acct.admission()
            if verdict.admission is Admission.CLOSED:
                closed = True
            if verdict.admission is not Admission.ADMIT:
                return
            trial = created
            created += 1
            length[trial] = epoch_s[trial % len(epoch_s)]
            acct.trial_admitted(trial)
            acct.trial_started(trial)
            next_report[trial] = clock.now + length[trial]
            epochs[trial] = 0

    try_admit()
    for _ in range(100_000):
        if not next_report:
            break
        trial = min(next_report, key=lambda t: (next_report[t], t))
        clock.now = next_report.pop(trial)
        epochs[trial] += 1
        acct.trial_reported(trial, epochs[trial], length[trial])
        if acct.run_stop_reason() is not None:
            acct.trial_ended(trial, STOPPED)
            stopped_by_cap.append(trial)
            closed = True
        elif epochs[trial] >= max_epochs:
            acct.trial_ended(trial, DONE)
        else:
            next_report[trial] = clock.now + length[trial]
        try_admit()
    else:  # pragma: no cover - the loop must end
        raise AssertionError("simulation did not finish")
    return acct, stopped_by_cap, length


#: (cap, epoch lengths by trial, whether the cap must be reached).
SIMULATIONS = [
    (0.15, [10.0, 17.0], True),  # two unmeasured trials pass the cap together
    (0.12, [30.0, 7.0], True),
    (0.07, [3.0, 41.0], True),
    (0.35, [10.0, 10.0, 60.0], True),  # admitted at 10 s/epoch, runs at 60 s/epoch
    (0.6, [10.0, 12.0, 45.0, 50.0], True),
    (0.33, [10.0, 13.0, 11.0], False),  # admission control stops short of the cap
    (0.5, [9.0, 31.0, 12.0, 25.0], False),
]


@pytest.mark.parametrize("cap, epoch_s, reaches", SIMULATIONS)
def test_spend_passes_the_cap_by_at_most_one_interval(cap, epoch_s, reaches):
    acct, stopped_by_cap, length = simulate(cap, epoch_s)
    assert acct.ledger.open_trials() == []
    spent = acct.spent()
    one_interval = sum(length[t] for t in stopped_by_cap) * PRICE.per_second
    assert spent <= cap + one_interval + 1e-12
    if reaches:
        # The property is exercised: the cap was reached and stopped running trials.
        assert stopped_by_cap
        assert spent > cap
        assert "budget.max_cost" in acct.run_stop_reason()
    else:
        # Admission closed before any money past the cap was committed.
        assert stopped_by_cap == [] and spent <= cap
        assert acct.admission().admission is Admission.CLOSED


def test_simulation_without_a_reachable_cap_finishes_every_trial():
    acct, stopped_by_cap, _ = simulate(100.0, [10.0, 17.0], n_trials=4)
    assert stopped_by_cap == []
    # Two trials of 10 x 10 s and two of 10 x 17 s at 0.001 per second.
    assert acct.spent() == pytest.approx(2 * 0.1 + 2 * 0.17)
    assert sorted(acct.ledger.trials()) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------
# fmt_money


@pytest.mark.parametrize(
    "amount, text",
    [
        (1234.5678, "1234.57 USD"),
        (10.0, "10.00 USD"),
        (9.87654, "9.8765 USD"),
        (0.123456, "0.1235 USD"),
        (0.01, "0.0100 USD"),
        (0.000146, "0.000146 USD"),
        (0.0, "0 USD"),
    ],
)
def test_fmt_money(amount, text):
    assert fmt_money(amount, "USD") == text


def test_fmt_money_keeps_the_currency():
    assert fmt_money(22.0, "CNY") == "22.00 CNY"


def test_heartbeat_keeps_the_ledger_told_until_when_trials_ran(tmp_path):
    from hpsearch.money.ledger import ALIVE_EVERY_S
    from hpsearch.money.ledger_entries import FAILED

    path = tmp_path / "ledger.jsonl"
    acct, clock = make(ledger=Ledger(path))
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 2)  # checkpointed at T0 + 20
    clock.advance(ALIVE_EVERY_S)
    assert acct.heartbeat() == clock.now  # written: the first alive
    clock.advance(1.0)
    acct.heartbeat()  # throttled
    shown_at = acct.heartbeat(force=True)  # what the console shows is written down
    shown = acct.ledger.spent(shown_at)
    # The driver dies here; the next session replays the ledger.
    after = Ledger(path)
    after.close_all(shown_at + 999, FAILED, at_last_event=True)
    assert after.spent() == pytest.approx(shown)
    assert after.wasted() == pytest.approx((shown_at - (T0 + 20)) * 0.001)


# ---------------------------------------------------------------------------------------
# Admission in node money: what the rented nodes will bill, minimums included

from hpsearch.money.nodes import Demand, Fleet, NodeSpec, billed_seconds  # noqa: E402

#: 36 per node-hour = 0.01 per node-second, billed per second after a 60 s minimum.
MIN_PRICE = Price(per_hour=18.0, currency="USD", instance="aws:p4d.24xlarge", spot=True,
                  instance_per_hour=36.0, share=0.5, billing_granularity_s=1,
                  min_billing_s=60)


def node(node_id="n", cpus=2.0):
    return NodeSpec(node_id, "aws:p4d.24xlarge", True, 36.0, "USD", cpus=cpus,
                    granularity_s=1, min_billing_s=60)


def node_accountant(cap, fleet=Fleet.HELD, max_epochs=5, tail_s=0.0):
    clock = FakeClock()
    acct = Accountant(MIN_PRICE if fleet is Fleet.HELD else PER_TRIAL_PRICE,
                      Budget(max_cost=cap), Ledger(), max_epochs, clock,
                      demand=Demand(cpu=1.0), fleet=fleet, tail_s=tail_s)
    return acct, clock


#: A node per trial: each worker is one trial's node, 0.01 per second, 60 s minimum.
PER_TRIAL_PRICE = Price(per_hour=36.0, currency="USD", instance="w", spot=False,
                        instance_per_hour=36.0, share=1.0, billing_granularity_s=1,
                        min_billing_s=60)


def test_a_rented_node_bills_its_minimum_at_once_and_admission_counts_it():
    acct, clock = node_accountant(cap=0.5)
    acct.node_rented(node())
    assert acct.spent() == pytest.approx(0.60)  # the minimum is owed from the start
    verdict = acct.admission()
    assert verdict.admission is Admission.CLOSED
    assert "budget.max_cost reached" in verdict.reason


def test_a_trial_that_fits_in_capacity_already_paid_for_adds_nothing():
    acct, clock = node_accountant(cap=1.0)
    acct.node_rented(node())  # two slots; 0.60 owed for its first minute
    acct.trial_admitted(0)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 2, epoch_s=10.0)  # 20 s, 30 s to go
    # A new trial of 50 s on the free slot ends at 70 s: 10 s past the minimum.
    assert acct.projected(0) == pytest.approx(0.60)
    assert acct.projected(1) == pytest.approx(0.70)
    assert acct.admission().admission is Admission.ADMIT
    # The trial's own share: half the node for what it ran.
    assert acct.trial_cost(0) == pytest.approx(20 * 0.005)


def test_admission_refuses_what_the_node_would_bill_past_the_cap():
    acct, clock = node_accountant(cap=0.65)
    acct.node_rented(node())
    acct.trial_admitted(0)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 2, epoch_s=10.0)
    verdict = acct.admission()  # 0.70 expected in all
    assert verdict.admission is Admission.WAIT
    assert "0.7000 USD in all would pass budget.max_cost 0.6500 USD" in verdict.reason
    assert "add 0.0000 USD" not in verdict.reason
    acct.trial_ended(0, STOPPED)
    assert acct.admission().admission is Admission.CLOSED


def test_per_trial_nodes_each_count_their_minimum():
    acct, clock = node_accountant(cap=1.5, fleet=Fleet.PER_TRIAL)
    acct.node_rented(node("w0", cpus=1.0))
    acct.trial_started(0, node="w0")
    run_epochs(acct, clock, 0, 1, epoch_s=5.0)  # 5 s epochs: a 25 s trial
    assert acct.spent() == pytest.approx(0.60)
    # Its node ends with it (within its minimum); a new trial rents one more: 0.60.
    assert acct.projected(1) == pytest.approx(1.20)
    assert acct.admission().admission is Admission.ADMIT
    acct.trial_admitted(1)
    assert acct.projected(1) == pytest.approx(1.80)
    assert acct.admission().admission is Admission.WAIT


def test_the_wrap_up_of_a_held_fleet_counts_against_the_cap():
    acct, clock = node_accountant(cap=0.64, tail_s=3.0)
    acct.node_rented(node())
    clock.advance(59.0)
    assert acct.run_stop_reason() is None  # 0.60 billed + 0.03 of wrap-up < 0.64 ...
    clock.advance(2.0)
    assert acct.spent() == pytest.approx(0.61)
    assert acct.run_stop_reason() is not None  # ... 0.61 + 0.03 reaches it


def _node_run(cap, fleet, epoch_s, n_trials=30, workers=2, max_epochs=5):
    """Short trials on a node with a 60 s minimum, stopped at the cap as the core does."""
    acct, clock = node_accountant(cap, fleet=fleet, max_epochs=max_epochs)
    if fleet is Fleet.HELD:
        acct.node_rented(node(cpus=float(workers)))
    next_report: dict[int, float] = {}
    epochs: dict[int, int] = {}
    created, closed, stopped = 0, False, []

    def fill():
        nonlocal created, closed
        while not closed and len(next_report) < workers and created < n_trials:
            verdict = acct.admission()
            closed = verdict.admission is Admission.CLOSED
            if verdict.admission is not Admission.ADMIT:
                return
            trial, created = created, created + 1
            acct.trial_admitted(trial)
            if fleet is Fleet.PER_TRIAL:
                acct.node_rented(node(f"w{trial}", cpus=1.0))
            acct.trial_started(trial, node=None if fleet is Fleet.HELD else f"w{trial}")
            next_report[trial], epochs[trial] = clock.now + epoch_s, 0

    def end(trial, outcome):
        acct.trial_ended(trial, outcome)
        if fleet is Fleet.PER_TRIAL:
            acct.node_released(f"w{trial}")

    fill()
    while next_report:
        trial = min(next_report, key=lambda t: (next_report[t], t))
        clock.now = next_report.pop(trial)
        epochs[trial] += 1
        acct.trial_reported(trial, epochs[trial], epoch_s)
        if acct.run_stop_reason() is not None:
            end(trial, STOPPED)
            stopped.append(trial)
            closed = True
        elif epochs[trial] >= max_epochs:
            end(trial, DONE)
        else:
            next_report[trial] = clock.now + epoch_s
        fill()
    acct.ledger.close_all(clock.now, STOPPED)
    return acct, stopped


@pytest.mark.parametrize("fleet", [Fleet.HELD, Fleet.PER_TRIAL])
@pytest.mark.parametrize("cap", [0.7, 1.3, 2.05, 3.3])
def test_short_trials_at_a_60_s_minimum_pass_the_cap_by_at_most_one_interval(fleet, cap):
    acct, stopped = _node_run(cap, fleet, epoch_s=1.0, n_trials=200)
    assert len(acct.ledger.trials()) < 200  # the cap binds
    spent = acct.spent()
    # One reporting interval of every node that was billing then: 1 s of each.
    nodes = 1 if fleet is Fleet.HELD else 2
    assert spent <= cap + nodes * 1.0 * 0.01 + 1e-9
    assert acct.ledger.trials(), "something ran"
    if fleet is Fleet.PER_TRIAL:
        # Every trial paid a whole minimum: no trial was admitted that did not fit.
        assert all(r.billed_s() == 60.0 for r in acct.ledger.rentals)


def test_before_node_billing_admission_left_out_the_minimum_and_overshot():
    # The old arithmetic: each 5 s trial billed its own 60 s minimum, admission
    # estimated it at 5 s x price. Eleven trials were admitted on a 0.3 budget.
    per_trial = 0.01 * 60  # what each trial was billed
    estimated = 0.01 * 5  # what admission counted for it
    admitted = int(0.3 // estimated) + 1
    assert admitted * per_trial > 0.3 * 10
    # Now: a trial per node pays its node's minimum, and admission counts it.
    acct, _ = _node_run(0.3, Fleet.PER_TRIAL, epoch_s=1.0)
    assert acct.spent() <= 0.3 and acct.ledger.trials() == []
    acct, _ = _node_run(1.25, Fleet.PER_TRIAL, epoch_s=1.0)
    assert len(acct.ledger.trials()) == 2 and acct.spent() == pytest.approx(1.2)


def test_without_nodes_a_new_trial_is_estimated_with_its_own_minimum():
    clock = FakeClock()
    acct = Accountant(MIN_PRICE, Budget(max_cost=0.5), Ledger(), 5, clock)
    acct.trial_started(0)
    run_epochs(acct, clock, 0, 5, epoch_s=1.0)  # 5 s, billed 60 s on its own: 0.30
    acct.trial_ended(0, DONE)
    assert acct.spent() == pytest.approx(0.30)
    assert billed_seconds(5.0, 1, 60) == 60.0
    verdict = acct.admission()
    assert verdict.admission is Admission.CLOSED  # 0.30 more would pass 0.5
