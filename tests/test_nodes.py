"""Unit tests of node billing: rentals, trials' shares, the statement (kept, wasted, idle).

Pure: no Ray, torch, Lightning or Optuna. Times are plain numbers the tests choose.
"""

from __future__ import annotations

import json

import pytest

from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import DONE, FAILED, PREEMPTED, STOPPED
from hpsearch.money.ledger_file import LedgerCorrupt, LedgerTooNew
from hpsearch.money.nodes import Demand, NodeSpec, billed_seconds, fleet_cost, from_ray
from hpsearch.money.pricing import Price
from hpsearch.money.statement import statement, summary_lines

T0 = 1_700_000_000.0
#: 36 per hour = 0.01 per second: money reads as hundredths of node-seconds.
NODE = NodeSpec("n1", "aws:p4d.24xlarge", True, 36.0, "USD", cpus=96, gpus=8,
                granularity_s=1, min_billing_s=60)
RUN = Price(4.5, "USD", "aws:p4d.24xlarge", True, 36.0, 0.125, 1, 60)


def test_demand_shares_gpus_then_cpus():
    assert Demand(cpu=4, gpu=1).share(NODE) == pytest.approx(1 / 8)
    assert Demand(cpu=4, gpu=0).share(NODE) == pytest.approx(4 / 96)
    assert Demand(cpu=1, gpu=16).share(NODE) == 1.0  # never above the whole node
    assert Demand(cpu=1).share(NodeSpec("x", "custom", False, 1.0, "USD")) == 1.0
    assert Demand(cpu=1, gpu=1).fits(NODE) and not Demand(cpu=1, gpu=9).fits(NODE)
    assert not Demand(cpu=200).fits(NODE)


def test_a_node_from_rays_node_list_takes_its_resources_and_price():
    entry = {"NodeID": "abc", "Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}}
    spec = from_ray(entry, RUN)
    assert (spec.node_id, spec.cpus, spec.gpus) == ("abc", 2.0, 1.0)
    assert (spec.price_per_hour, spec.spot, spec.min_billing_s) == (36.0, True, 60)
    assert from_ray({**entry, "Alive": False}, RUN) is None


def test_a_60_s_minimum_is_billed_once_for_three_5_s_trials_back_to_back():
    ledger = Ledger()
    ledger.rent(NODE, T0)
    share = Demand(cpu=12, gpu=1).share(NODE)  # 1/8
    for k in range(3):
        ledger.open(k, T0 + 5 * k, RUN, node="n1", share=share)
        ledger.close(k, T0 + 5 * (k + 1), DONE)
    ledger.release("n1", T0 + 15)
    money = statement(ledger, T0 + 100)
    # The node: 15 s rented, 60 s billed (its minimum), once.
    assert ledger.rentals[0].billed_s() == 60.0
    assert money.total == pytest.approx(0.60)
    # Each trial: its eighth of the node for its 5 s; no minimum of its own.
    for k in range(3):
        assert ledger.spent(trial=k) == pytest.approx(5 * 0.01 / 8)
    assert money.kept == pytest.approx(3 * 5 * 0.01 / 8)
    assert money.idle == pytest.approx(0.60 - 3 * 5 * 0.01 / 8)
    assert money.kept + money.wasted + money.idle == pytest.approx(money.total)
    (node,) = money.nodes
    assert (node.length_s, node.billed_s, node.work_s) == (15.0, 60.0, pytest.approx(15 / 8))
    assert node.active_s == 15.0 and node.trials == {0: 0.125, 1: 0.125, 2: 0.125}


def test_two_trials_share_a_node_and_one_is_preempted():
    ledger = Ledger()
    node = NodeSpec("n", "x", True, 3.6, "USD", cpus=2, granularity_s=1, min_billing_s=0)
    ledger.rent(node, T0)  # 0.001 per node-second: each half-node trial 0.0005 per second
    ledger.open(0, T0 + 10, RUN, node="n", share=0.5)
    ledger.open(1, T0 + 10, RUN, node="n", share=0.5)
    ledger.checkpoint(1, T0 + 40)
    ledger.close(1, T0 + 50, PREEMPTED)  # 10 s since its checkpoint are lost
    ledger.close(0, T0 + 70, DONE)
    ledger.release("n", T0 + 80)
    money = statement(ledger, T0 + 80)
    assert money.total == pytest.approx(0.080)  # 80 s of the whole node
    assert ledger.spent(trial=0) == pytest.approx(60 * 0.0005)
    assert ledger.spent(trial=1) == pytest.approx(40 * 0.0005)
    assert money.wasted == pytest.approx(10 * 0.0005)
    assert money.kept == pytest.approx((60 + 40 - 10) * 0.0005)
    # Idle: 10 s before any trial, half the node from 50 to 70 s, 10 s after.
    assert money.idle == pytest.approx(0.010 + 0.010 + 0.010)
    (n,) = money.nodes
    assert n.wasted_s == pytest.approx(5.0) and n.active_s == 60.0
    assert n.idle_cost == pytest.approx(money.idle)
    # Idle over time: flat while both trials run, then rising at half the node's price.
    points = dict(n.timeline)
    assert points[T0 + 10] == pytest.approx(0.010)
    assert points[T0 + 50] == pytest.approx(0.010)
    assert points[T0 + 70] == pytest.approx(0.020)
    assert n.timeline[-1] == (T0 + 80, pytest.approx(0.030))


def test_the_minimum_and_granularity_go_to_the_nodes_idle():
    ledger = Ledger()
    hourly = NodeSpec("h", "x", False, 3.6, "USD", cpus=1, granularity_s=3600,
                      min_billing_s=0)
    ledger.rent(hourly, T0)
    ledger.open(0, T0, RUN, node="h", share=1.0)
    ledger.close(0, T0 + 600, DONE)
    ledger.release("h", T0 + 600)
    money = statement(ledger, T0 + 600)
    assert money.total == pytest.approx(3.6)  # an hour billed for 10 minutes
    assert money.kept == pytest.approx(0.6)
    assert money.idle == pytest.approx(3.0)
    assert money.nodes[0].timeline[-1] == (T0 + 600, pytest.approx(3.0))


def test_an_open_rental_bills_at_least_its_minimum_from_the_moment_it_is_rented():
    ledger = Ledger()
    ledger.rent(NODE, T0)
    assert ledger.spent(T0) == pytest.approx(0.60)
    assert ledger.spent(T0 + 90) == pytest.approx(0.90)
    assert NODE.minimum_cost() == pytest.approx(0.60)


def test_a_lost_node_bills_its_trials_no_further_than_its_release():
    ledger = Ledger()
    node = NodeSpec("s", "x", True, 3.6, "USD", cpus=1, granularity_s=1)
    ledger.rent(node, T0)
    ledger.open(0, T0, RUN, node="s", share=1.0)
    ledger.checkpoint(0, T0 + 20)
    ledger.release("s", T0 + 30, lost=True)  # taken back
    ledger.close(0, T0 + 34, PREEMPTED)  # Ray noticed a little later
    money = statement(ledger, T0 + 40)
    assert ledger.spent(trial=0) == pytest.approx(0.030)
    assert money.wasted == pytest.approx(0.010)
    assert money.idle == pytest.approx(0.0)
    assert money.nodes[0].lost


def test_a_trial_moved_to_the_node_it_landed_on_is_billed_there_from_its_start():
    ledger = Ledger()
    ledger.rent(NodeSpec("a", "x", False, 3.6, "USD", cpus=2), T0)
    ledger.rent(NodeSpec("b", "y", True, 7.2, "USD", cpus=4), T0)
    ledger.open(0, T0 + 10, RUN, node="a", share=0.5)
    assert ledger.place(0, "b", 0.25)
    assert not ledger.place(0, "b", 0.25)  # already there
    assert not ledger.place(0, "nowhere", 0.5)
    ledger.close(0, T0 + 20, DONE)
    (interval,) = ledger.intervals
    assert (interval.node, interval.instance, interval.spot) == ("b", "y", True)
    assert ledger.spent(trial=0) == pytest.approx(10 * 7.2 / 3600 * 0.25)
    money = statement(ledger, T0 + 20)
    assert [n.trials for n in money.nodes] == [{}, {0: 0.25}]


def test_restart_seconds_after_a_preemption_are_counted_per_node():
    ledger = Ledger()
    ledger.rent(NodeSpec("n", "x", True, 3.6, "USD", cpus=1), T0)
    ledger.open(0, T0, RUN, node="n", share=1.0)
    ledger.startup(0, 4.0)  # the first start-up is no restart
    ledger.close(0, T0 + 30, PREEMPTED)
    ledger.open(0, T0 + 30, RUN, node="n", share=1.0)
    ledger.startup(0, 6.0)
    ledger.startup(0, 9.0)  # once per interval
    ledger.close(0, T0 + 60, DONE)
    assert statement(ledger, T0 + 60).nodes[0].restart_s == pytest.approx(6.0)


def test_rentals_and_shares_are_replayed_and_a_dead_driver_closes_at_its_last_alive(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.ensure_id()
    ledger.rent(NODE, T0)
    ledger.open(0, T0 + 5, RUN, node="n1", share=0.125)
    ledger.checkpoint(0, T0 + 50)
    ledger.alive(T0 + 70)
    # SIGKILL here: the next session replays, and closes what was open where it was seen.
    after = Ledger(path)
    assert after.read_version == 2 and [r.node for r in after.rented()] == ["n1"]
    after.close_all(T0 + 999, FAILED, at_last_event=True)
    assert after.rentals[0].end_s == T0 + 70 and after.intervals[0].end_s == T0 + 70
    assert after.wasted() == pytest.approx(20 * 0.01 / 8)
    assert after.spent() == pytest.approx(0.70)
    again = Ledger(path)
    assert statement(again, T0 + 2000).attrs() == statement(after, T0 + 2000).attrs()


def test_a_format_1_ledger_is_read_and_continued_in_format_2(tmp_path):
    path = tmp_path / "ledger.jsonl"
    old = [{"event": "ledger", "id": "abc", "version": 1},
           {"event": "open", "trial": 0, "instance": "custom", "spot": False,
            "price_per_hour": 3.6, "currency": "USD", "start_s": T0, "end_s": None,
            "checkpoint_s": None, "outcome": "open", "granularity_s": 1,
            "min_billing_s": 60},
           {"event": "close", "trial": 0, "at_s": T0 + 10, "outcome": "done"}]
    path.write_text("".join(json.dumps(e) + "\n" for e in old))
    ledger = Ledger(path)
    assert ledger.read_version == 1 and ledger.id == "abc"
    assert ledger.spent() == pytest.approx(0.06)  # its own minimum, as billed then
    assert ledger.ensure_id() == "abc"
    ledger.rent(NodeSpec("n", "custom", False, 3.6, "USD", cpus=1), T0 + 100)
    ledger.release("n", T0 + 110)
    replayed = Ledger(path)
    assert replayed.read_version == 2
    money = statement(replayed, T0 + 200)
    assert money.total == pytest.approx(0.06 + 0.01)
    assert money.unplaced == pytest.approx(0.06) and money.kept == pytest.approx(0.06)
    assert money.idle == pytest.approx(0.01)


def test_a_ledger_of_a_newer_format_is_refused_in_one_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps({"event": "ledger", "id": "x", "version": 99}) + "\n")
    with pytest.raises(LedgerTooNew) as info:
        Ledger(path)
    assert info.value.exit_code == 2
    assert "ledger format 99" in str(info.value) and "upgrade hpsearch" in str(info.value)
    path.write_text(json.dumps({"event": "release", "node": "n"}) + "\n" + "{}\n")
    with pytest.raises(LedgerCorrupt):
        Ledger(path)


def test_fleet_cost_is_nodes_times_their_billed_time():
    assert fleet_cost(4, 100.0, 36.0) == pytest.approx(4.0)
    assert fleet_cost(2, 10.0, 36.0, 1, 60) == pytest.approx(1.2)
    assert billed_seconds(61.0, 60, 0) == 120.0 and billed_seconds(5.0, 0, 0) == 5.0


def test_summary_lines_keep_the_three_figures_apart():
    ledger = Ledger()
    ledger.rent(NodeSpec("aaaaaaaaaaaaaaaa", "x", True, 9.0, "USD", cpus=1), T0)
    ledger.rent(NodeSpec("b", "y", False, 7.2, "USD", cpus=1), T0)
    ledger.open(0, T0, RUN, node="b", share=1.0)
    ledger.close(0, T0 + 10, STOPPED)
    ledger.close_all(T0 + 10, FAILED)
    lines = summary_lines(statement(ledger, T0 + 10), cap=1.0)
    assert lines[0] == ("Spent: 0.0450 USD of budget.max_cost 1.0000 USD: work kept "
                        "0.0200 USD, wasted 0 USD (work lost to preemption, "
                        "failure or interruption), idle 0.0250 USD (paid capacity no "
                        "trial used)")
    # One line per node, the largest idle first.
    assert lines[1] == ("  node aaaaaaaaaaaa (x, spot): billed 0.0250 USD for 10 s, trials "
                        "0 USD, idle 0.0250 USD")
    assert len(lines) == 3
