"""The cost/accuracy report: pure computations, writers, the study reader, the CLI, a
real run's report (its money against the ledger), headless Chromium and the dashboard.

The pure and reader tests are fast; the tests on a real run are marked slow and share
one small search (3 trials, one of them pruned by ASHA, priced as AWS spot).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna.trial import TrialState

import hpsearch
from hpsearch.money import catalog as catalog_mod
from hpsearch import keys
from hpsearch.report import (axes, curves, html_page, plain_formats, plots, report, savings,
                             writers)
from hpsearch.report import rows as report_rows
from hpsearch.report import text as report_text
from hpsearch.errors import ConfigError
from hpsearch.money.ledger import Ledger

from .conftest import REPO

slow = pytest.mark.slow

# -- hand-made records -------------------------------------------------------------------


def record(number, state, value=None, curve=(), params=None, when=None, **attrs):
    """A trial record as the Optuna adapter produces it."""
    return {
        "number": number, "state": state, "value": value,
        "intermediate": {i + 1: v for i, v in enumerate(curve)},
        "params": params or {"lr": 0.1 * (number + 1)},
        "user_attrs": attrs,
        "datetime_start": "2026-01-01T00:00:00",
        "datetime_complete": None if when is None else f"2026-01-01T00:{when:02d}:00",
    }


def study_info(mode="max", max_epochs=4, max_cost=None, direction=None):
    return {
        "name": "hand", "direction": direction or ("maximize" if mode == "max" else "minimize"),
        "user_attrs": {
            keys.ATTR_CONFIG: {"max_epochs": max_epochs,
                               "objective": {"metric": "val_acc", "mode": mode},
                               "budget": {"max_cost": max_cost}},
            keys.ATTR_PRICE: {"currency": "USD", "instance": "aws:p3.2xlarge", "spot": True},
        },
    }


def money(cost, wasted=0.0, spot=True, instance="aws:p3.2xlarge", **more):
    return {"cost": cost, "wasted_cost": wasted, "billed_s": cost * 10, "instance": instance,
            "spot": spot, "currency": "USD", **more}


def rows_of(records, mode="max"):
    return [report_rows.trial_row(r, mode) for r in records]


HAND = [
    record(0, "COMPLETE", 0.90, [0.5, 0.8, 0.85, 0.90], when=5, epochs=4, **money(4.0)),
    record(1, "PRUNED", 0.30, [0.2, 0.3], when=2, epochs=2,
           stop_reason="asha: stopped at epoch 2/4", **money(1.0)),
    record(2, "FAIL", None, [0.6], when=3, epochs=1, error="RuntimeError: boom",
           **money(0.5, wasted=0.2, preemptions=2)),
    record(3, "COMPLETE", 0.95, [0.6, 0.7, 0.9, 0.95], when=9, epochs=4, **money(6.0)),
    record(4, "RUNNING", None, [0.7, 0.8], epochs=2, **money(2.0)),
    record(5, "WAITING"),
]


# -- money from the ledger's statement: nodes, idle, savings that are true ----------------

from hpsearch.money.ledger_entries import DONE, PREEMPTED, STOPPED  # noqa: E402
from hpsearch.money.nodes import NodeSpec  # noqa: E402
from hpsearch.money.pricing import Price  # noqa: E402
from hpsearch.money.statement import statement  # noqa: E402

T0 = 1_700_000_000.0
RUN = Price(18.0, "USD", "aws:p4d.24xlarge", True, 36.0, 0.5, 1, 60)


def node_study(ledger, now, max_epochs=4):
    """Study info carrying the ledger's statement, as a real run writes it."""
    info = study_info(max_epochs=max_epochs)
    info["user_attrs"][keys.ATTR_MONEY] = statement(ledger, now).attrs()
    return info


def trial_attrs(ledger, number, epochs, epoch_s, now):
    m = ledger.trial_money(number, now)
    return {**m.attrs(), keys.ATTR_EPOCHS: epochs,
            keys.ATTR_EPOCH_TIMES: [epoch_s] * epochs}


def short_trials(min_billing_s, spot=False, pruned=(1, 2)):
    """Three trials of 1 s epochs back to back on a node of 2 slots (0.01/s): trial 0
    trains its 4 epochs, the others are pruned after 1."""
    ledger = Ledger()
    ledger.rent(NodeSpec("n", "aws:p4d.24xlarge", spot, 36.0, "USD", cpus=2,
                         granularity_s=1, min_billing_s=min_billing_s), T0)
    records, t = [], T0 + 2.0  # the driver starts for 2 s
    for k in range(3):
        epochs = 1 if k in pruned else 4
        ledger.open(k, t, RUN, node="n", share=0.5)
        ledger.close(k, t + epochs, STOPPED if k in pruned else DONE)
        state = "PRUNED" if k in pruned else "COMPLETE"
        records.append(record(k, state, None if k in pruned else 0.9,
                              [0.5] * epochs, when=k, **trial_attrs(ledger, k, epochs,
                                                                    1.0, t + epochs)))
        t += epochs
    ledger.release("n", t + 1.0)
    return ledger, records, t + 1.0


def test_a_60_s_minimum_with_trials_of_a_few_seconds_shows_no_fictional_saving():
    ledger, records, end = short_trials(min_billing_s=60)
    built = report.build(records, node_study(ledger, end))
    s = built.summary
    assert s["total_cost"] == pytest.approx(0.60)  # 9 s rented, 60 s billed, once
    assert s["kept_cost"] == pytest.approx(6 * 0.005)  # 6 trial-seconds at half the node
    assert s["idle_cost"] == pytest.approx(0.60 - 0.03)
    assert s["kept_cost"] + s["wasted_cost"] + s["idle_cost"] == pytest.approx(s["total_cost"])
    pruning = s["savings_vs_no_pruning"]
    assert pruning["n_scaled"] == 2
    # Six more trial-seconds at packing 0.5: 12 s more of the node, still in its minute.
    assert pruning["amount"] == 0.0 and pruning["share"] == 0.0
    assert pruning["baseline_cost"] == pytest.approx(0.60)
    lines = dict(report_text.summary_lines(built))
    assert lines["Saved by pruning (estimate)"] == "0 USD (0.0% of 0.6000 USD)"
    assert lines["Spent"] == ("0.6000 USD: work kept 0.0300 USD, wasted 0 USD, idle "
                              "0.5700 USD")
    # The per-trial arithmetic of before scaled each pruned trial's share 4x.
    legacy = savings.savings_vs_no_pruning(built.trials, 4)
    assert legacy["amount"] > 0


def test_without_a_minimum_pruning_saves_the_node_time_the_work_would_have_taken():
    ledger, records, end = short_trials(min_billing_s=0)
    s = report.build(records, node_study(ledger, end)).summary
    assert s["total_cost"] == pytest.approx(0.09)  # 9 s of the node
    (node,) = s["nodes"]
    packing = 6 * 0.5 / 6  # 3 share-seconds over the 6 s trials ran
    extra = 2 * 0.5 * 3 * 1.0 / packing  # two trials' 3 more epochs, at that packing
    assert s["savings_vs_no_pruning"]["amount"] == pytest.approx(extra * 0.01)
    assert s["savings_vs_on_demand"]["amount"] == 0.0  # no spot node: nothing saved
    assert node["idle_share"] == pytest.approx((0.09 - 0.03) / 0.09)


def test_budget_stopped_trials_are_not_counted_as_pruned():
    ledger, records, end = short_trials(min_billing_s=0)
    for r in records[1:]:
        r["state"] = "RUNNING"
        r["user_attrs"][keys.ATTR_LIFECYCLE] = "budget_stopped"
    built = report.build(records, node_study(ledger, end))
    assert [r["state"] for r in built.trials] == ["COMPLETE", "BUDGET_STOPPED",
                                                  "BUDGET_STOPPED"]
    assert built.summary["n_by_state"]["BUDGET_STOPPED"] == 2
    assert built.summary["savings_vs_no_pruning"]["amount"] == 0.0


def test_spot_saving_reprices_the_node_and_counts_lost_work_and_restarts():
    ledger = Ledger()
    ledger.rent(NodeSpec("s", "aws:x", True, 3.6, "USD", cpus=1), T0)  # 0.001/s
    ledger.open(0, T0, RUN, node="s", share=1.0)
    ledger.checkpoint(0, T0 + 40)
    ledger.close(0, T0 + 60, PREEMPTED)  # 20 s lost
    ledger.open(0, T0 + 60, RUN, node="s", share=1.0)
    ledger.startup(0, 10.0)  # the restart
    ledger.close(0, T0 + 100, DONE)
    ledger.release("s", T0 + 100)
    info = node_study(ledger, T0 + 100)
    records = [record(0, "COMPLETE", 0.9, [0.9] * 4, when=1,
                      **trial_attrs(ledger, 0, 4, 20.0, T0 + 100))]
    catalog = catalog_mod.Catalog([catalog_mod.Offer(
        "aws", "x", "T4", 1, 16, 4, "", "USD", 0.0036, 0.0036 / 3, "", 1, 0, "test", "")])
    s = report.build(records, info, catalog=catalog).summary
    spot = s["savings_vs_on_demand"]
    # On demand: no preemption, so 100 - 20 lost - 10 restarting = 70 s at 3x the price.
    assert spot["baseline_cost"] == pytest.approx(70 * 0.003)
    assert spot["amount"] == pytest.approx(70 * 0.003 - 0.1)
    assert spot["n_repriced"] == 1 and s["wasted_cost"] == pytest.approx(0.02)
    # At a ratio that spot barely beats, the waste makes it dearer: said as such.
    dear = catalog_mod.Catalog([catalog_mod.Offer(
        "aws", "x", "T4", 1, 16, 4, "", "USD", 0.0036 * 1.2, 0.0036, "", 1, 0, "test", "")])
    worse = report.build(records, info, catalog=dear).summary["savings_vs_on_demand"]
    assert worse["amount"] == pytest.approx(70 * 0.0012 - 0.1) and worse["amount"] < 0
    text = report_text.estimate_text(worse, "USD")
    assert text.startswith("none: it cost 0.0160 USD more than")


def test_idle_over_time_and_the_node_table():
    ledger, records, end = short_trials(min_billing_s=60)
    built = report.build(records, node_study(ledger, end))
    (series,) = built.idle_over_time
    assert series["t_s"][0] == 0.0 and series["idle_cost"][0] == 0.0
    assert series["idle_cost"][1] == pytest.approx(0.02)  # the 2 s before the first trial
    assert series["idle_cost"][-1] == pytest.approx(built.summary["idle_cost"])
    header, rows = report_text.node_table(built)
    assert header[:3] == ["node", "instance", "kind"] and len(rows) == 1
    assert rows[0][4] == "60" and rows[0][-1] == "3"
    assert "## Money by node" in plain_formats.markdown(built)
    doc = plain_formats.json_document(built)
    assert doc["idle_over_time"][0]["idle_cost"][-1] == pytest.approx(0.57)


def test_a_study_from_before_node_billing_keeps_the_per_trial_estimates():
    built = report.build(HAND, study_info())
    s = built.summary
    assert s["idle_cost"] is None and s["nodes"] == [] and built.idle_over_time == []
    assert s["savings_vs_no_pruning"]["method"] == savings.METHOD_NO_PRUNING
    assert s["total_cost"] == pytest.approx(13.5)


# -- the Pareto front --------------------------------------------------------------------

POINTS = [  # (key, cost, value)
    ("A", 1.0, 0.5),
    ("B", 2.0, 0.7),
    ("C", 2.0, 0.6),   # same cost as B, worse: dominated
    ("D", 3.0, 0.7),   # same value as B, dearer: dominated
    ("E", 0.5, 0.3),
    ("F", 4.0, 0.9),
    ("G", 4.0, 0.9),   # identical to F: neither dominates the other
    ("H", 1.0, 0.5),   # identical to A
    ("I", 5.0, 0.85),  # dearer and worse than F
]


def test_pareto_front_max_mode_with_ties():
    assert curves.pareto_front(POINTS, "max") == ["E", "A", "H", "B", "F", "G"]


def test_pareto_front_min_mode_with_ties():
    # As losses, lower is better: E (0.3 at 0.5) beats everything that costs more.
    assert curves.pareto_front(POINTS, "min") == ["E"]
    losses = [("a", 1.0, 0.9), ("b", 2.0, 0.5), ("c", 2.0, 0.5), ("d", 3.0, 0.5),
              ("e", 4.0, 0.1), ("f", 0.5, 0.95), ("g", 5.0, 0.2)]
    assert curves.pareto_front(losses, "min") == ["f", "a", "b", "c", "e"]


def test_pareto_front_leaves_out_missing_and_non_finite_points():
    points = [("a", 1.0, 0.5), ("b", None, 0.99), ("c", 0.1, float("nan")),
              ("d", float("inf"), 1.0), ("e", 2.0, None)]
    assert curves.pareto_front(points, "max") == ["a"]
    assert curves.pareto_front([], "max") == []
    with pytest.raises(ValueError):
        curves.pareto_front(points, "maximize")


def _dominates(p, q, mode):
    better_or_equal = p[2] >= q[2] if mode == "max" else p[2] <= q[2]
    strictly = (p[2] > q[2] if mode == "max" else p[2] < q[2]) or p[1] < q[1]
    return p[1] <= q[1] and better_or_equal and strictly


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=25),
       st.sampled_from(["max", "min"]))
def test_pareto_front_matches_the_definition(pairs, mode):
    points = [(i, float(c), float(v)) for i, (c, v) in enumerate(pairs)]
    expected = {p[0] for p in points if not any(_dominates(q, p, mode) for q in points)}
    front = curves.pareto_front(points, mode)
    assert set(front) == expected
    costs = [points[k][1] for k in front]
    assert costs == sorted(costs)


# -- rows, savings and the summary --------------------------------------------------------


def test_trial_rows_read_final_and_best_values_and_default_preemptions():
    rows = {r["number"]: r for r in rows_of(HAND)}
    assert rows[0]["value"] == 0.90 and rows[0]["best_value"] == 0.90
    # A pruned or failed trial's final value is its last epoch.
    assert rows[1]["value"] == 0.30 and rows[1]["stop_reason"].startswith("asha:")
    assert rows[2]["value"] == 0.6 and rows[2]["error"] == "RuntimeError: boom"
    assert rows[2]["preemptions"] == 2 and rows[0]["preemptions"] == 0
    assert rows[4]["state"] == "RUNNING" and rows[4]["cost"] == 2.0
    assert rows[5]["cost"] is None and rows[5]["epochs"] == 0 and rows[5]["value"] is None
    assert rows[0]["duration_s"] == 300.0
    # Best is mode-aware: as a loss, the first epoch of trial 0 is its best.
    assert report_rows.trial_row(HAND[0], "min")["best_value"] == 0.5
    # Without an epochs attribute, the last reported epoch counts.
    bare = record(7, "RUNNING", None, [0.1, 0.2, 0.3])
    assert report_rows.trial_row(bare, "max")["epochs"] == 3


def test_savings_vs_no_pruning_scales_pruned_trials_linearly():
    rows = rows_of(HAND)
    est = savings.savings_vs_no_pruning(rows, max_epochs=4)
    # Trial 1 ran 2 of 4 epochs for 1.0: 2.0 to the end; the others as billed.
    total = 4.0 + 1.0 + 0.5 + 6.0 + 2.0
    assert est["estimate"] is True
    assert est["baseline_cost"] == pytest.approx(total + 1.0)
    assert est["amount"] == pytest.approx(1.0)
    assert est["share"] == pytest.approx(1.0 / (total + 1.0))
    assert est["n_scaled"] == 1
    assert "estimate" in est["method"] and "max_epochs / epochs" in est["method"]

    unknown = savings.savings_vs_no_pruning(rows, max_epochs=None)
    assert unknown["amount"] is None and "not estimated" in unknown["method"]


def test_savings_vs_on_demand_reprices_spot_trials_with_the_catalogue_ratio():
    catalog = catalog_mod.packaged()
    offer = catalog.lookup("aws:p3.2xlarge")
    ratio = offer.on_demand_per_hour / offer.spot_per_hour
    rows = rows_of([
        record(0, "COMPLETE", 0.9, [0.9], **money(1.0)),
        record(1, "COMPLETE", 0.8, [0.8], **money(2.0, spot=False)),
        record(2, "COMPLETE", 0.7, [0.7], **money(3.0, instance="nowhere:x9")),
    ])
    ratios = savings.on_demand_ratios(["aws:p3.2xlarge", "nowhere:x9"], catalog)
    assert ratios == {"aws:p3.2xlarge": pytest.approx(ratio), "nowhere:x9": None}
    est = savings.savings_vs_on_demand(rows, ratios)
    assert est["estimate"] is True
    assert est["amount"] == pytest.approx(1.0 * (ratio - 1))
    assert est["baseline_cost"] == pytest.approx(1.0 * ratio + 2.0 + 3.0)
    assert est["n_repriced"] == 1 and est["not_repriced"] == ["nowhere:x9"]
    assert "on-demand/spot price ratio" in est["method"] and "nowhere:x9" in est["method"]

    on_demand = rows_of([record(0, "COMPLETE", 0.9, [0.9], **money(1.0, spot=False))])
    assert savings.savings_vs_on_demand(on_demand, {})["amount"] == 0.0


def test_summary_totals_best_trial_and_budget():
    built = report.build(HAND, study_info(max_cost=27.0))
    s = built.summary
    assert s["total_cost"] == pytest.approx(13.5)
    assert s["wasted_cost"] == pytest.approx(0.2)
    assert s["budget_max_cost"] == 27.0 and s["budget_used"] == pytest.approx(0.5)
    assert s["n_trials"] == 6
    assert s["n_by_state"] == {"COMPLETE": 2, "PRUNED": 1, "BUDGET_STOPPED": 0, "FAIL": 1, "RUNNING": 1,
                               "WAITING": 1}
    assert (s["best_trial"], s["best_value"], s["best_epochs"]) == (3, 0.95, 4)
    assert s["best_params"] == HAND[3]["params"]
    assert s["currency"] == "USD" and s["metric"] == "val_acc" and s["mode"] == "max"
    assert s["preemptions"] == 2
    for key in ("savings_vs_no_pruning", "savings_vs_on_demand",
                "savings_vs_on_demand_without_pruning"):
        assert s[key]["estimate"] is True and s[key]["method"].startswith("estimate")
        assert s[key]["amount"] > 0
    both = s["savings_vs_on_demand_without_pruning"]["baseline_cost"]
    assert both > s["savings_vs_no_pruning"]["baseline_cost"]
    assert both > s["savings_vs_on_demand"]["baseline_cost"]
    # The Pareto front holds COMPLETE trials only: the cheap pruned trial 1 is not on it.
    assert built.pareto_front == [0, 3] == s["pareto_front"]
    assert [r["number"] for r in built.trials if r["on_pareto_front"]] == [0, 3]
    assert s["pareto_front_label"] == "val_acc vs cost"
    assert built.cost_by_state["FAIL"] == {"n": 1, "cost": 0.5, "wasted_cost": 0.2}
    assert "WAITING" not in built.cost_by_state  # it cost nothing: no bar

    assert report.build(HAND, study_info()).summary["budget_used"] is None


def test_summary_in_min_mode_and_without_completed_trials():
    losses = [record(0, "COMPLETE", 0.3, [0.3], when=1, **money(1.0)),
              record(1, "COMPLETE", 0.2, [0.2], when=2, **money(1.0)),
              record(2, "COMPLETE", 0.2, [0.2], when=3, **money(1.0))]
    s = report.build(losses, study_info(mode="min")).summary
    assert (s["best_trial"], s["best_value"]) == (1, 0.2)  # ties: the first
    # Without a config, the study's direction decides.
    bare = {"name": "x", "direction": "minimize", "user_attrs": {}}
    assert report.build(losses, bare).summary["mode"] == "min"

    none = report.build([record(0, "PRUNED", 0.1, [0.1], **money(1.0))], study_info())
    assert none.summary["best_trial"] is None and none.summary["best_value"] is None


def test_best_vs_cost_follows_completion_order_with_running_trials_last():
    built = report.build(HAND, study_info())
    points = built.best_vs_cost
    assert [p["number"] for p in points] == [1, 2, 0, 3, 4]  # WAITING costs nothing
    assert [p["cumulative_cost"] for p in points] == pytest.approx([1.0, 1.5, 5.5, 11.5,
                                                                    13.5])
    assert [p["best_value"] for p in points] == [None, None, 0.90, 0.95, 0.95]
    assert points[-1]["cumulative_cost"] == pytest.approx(built.summary["total_cost"])


# -- direction and scale ---------------------------------------------------------------------

#: A search with a pruned trial that diverged: as accuracies (max) they are these values.
OUTLIERS = [
    record(0, "COMPLETE", 0.90, [0.5, 0.90], when=5, epochs=2, **money(4.0)),
    record(1, "PRUNED", 0.02, [0.02], when=2, epochs=1, **money(1.0)),
    record(2, "PRUNED", -3.0, [-3.0], when=3, epochs=1, **money(0.5)),
    record(3, "COMPLETE", 0.95, [0.6, 0.95], when=9, epochs=2, **money(6.0)),
    record(4, "COMPLETE", 0.93, [0.6, 0.93], when=8, epochs=2, **money(5.0)),
    record(5, "PRUNED", 0.88, [0.88], when=4, epochs=1, **money(0.7)),
]


def transformed(records, scale, mode):
    """The same search with its metric times ``scale``, as a ``mode`` objective."""
    out = copy.deepcopy(records)
    for r in out:
        if r["value"] is not None:
            r["value"] *= scale
        r["intermediate"] = {k: v * scale for k, v in r["intermediate"].items()}
    return out, study_info(mode=mode)


@pytest.mark.parametrize("scale, mode", [(1.0, "max"), (-1.0, "min"), (1000.0, "max"),
                                         (-1e-3, "min"), (-250.0, "min")],
                         ids=["acc-max", "loss-min", "acc-x1000", "loss-x1e-3", "loss-x250"])
def test_decisions_do_not_depend_on_the_direction_or_the_scale(scale, mode):
    records, info = transformed(OUTLIERS, scale, mode)
    built = report.build(records, info)
    s = built.summary
    # The same trials win whatever the units: an accuracy maximised and its negative
    # minimised (a loss) are one search.
    assert s["mode"] == mode
    assert (s["best_trial"], built.pareto_front) == (3, [0, 4, 3])
    assert [p["best_number"] for p in built.best_vs_cost] == [None, None, None, 0, 4, 3]
    axis = plots.plot_axis(built)
    pinned = [r["number"] for r in built.trials
              if axis.place(r["value"])[1] is not axes.Pin.IN_PLACE]
    assert pinned == [1, 2]  # the diverged trials; trial 5 (0.88) is drawn in place
    # Pinned values sit inside the axis, on the side they lie beyond.
    for r in built.trials:
        y, side = axis.place(r["value"])
        assert axis.low <= y <= axis.high
        beyond = axes.Pin.BELOW if r["value"] < 0.5 * scale else axes.Pin.ABOVE
        assert side is (axes.Pin.IN_PLACE if r["number"] not in (1, 2) else beyond)


BELOW, IN_PLACE, ABOVE = axes.Pin.BELOW, axes.Pin.IN_PLACE, axes.Pin.ABOVE


def test_metric_axis_follows_the_completed_trials():
    axis = axes.metric_axis([0.90, 0.95, 0.93], [0.02, -3.0, 0.88])
    assert axis.window == pytest.approx((0.80, 1.05))
    assert axis.low < 0.88 and 0.95 < axis.high < 1.0  # padded around what is in place
    assert axis.place(0.88) == (0.88, IN_PLACE)
    assert axis.place(-3.0)[1] is BELOW and axis.place(45.0)[1] is ABOVE
    # Pinned values are drawn in a band of their own, inside the range, below (above)
    # every value drawn in place.
    assert axis.low < axis.place(-3.0)[0] < 0.88 - 0.1 * (axis.high - axis.low)
    assert axis.place(45.0)[0] == axis.high  # nothing lies above: no band there
    # Close values are all drawn: nothing pinned, the range covers them all.
    near = axes.metric_axis([0.5, 0.6], [0.4, 0.7])
    assert near.window is None and near.low < 0.4 and near.high > 0.7
    # Without a COMPLETE trial nothing is pinned; without any value there is no axis.
    assert axes.metric_axis([], [0.1, 45.0]).window is None
    assert axes.metric_axis([None], [float("nan")]) is None
    # Equal COMPLETE values: the values' median distance from their median is the
    # spread (0.1 here); the diverged losses are pinned.
    equal = axes.metric_axis([0.4, 0.4], [2.3, 1e6, 0.5])
    assert equal.window == pytest.approx((0.2, 0.6))
    assert [equal.place(v)[1] for v in (2.3, 1e6, 0.5)] == [ABOVE, ABOVE, IN_PLACE]
    # Two close COMPLETE trials (a real digits run): the bulk of the pruned trials sets
    # the spread, so the one at 0.81 stays in place and the two near chance are pinned.
    close = axes.metric_axis([0.958, 0.947], [0.808, 0.195, 0.053])
    assert [close.place(v)[1] for v in (0.808, 0.195, 0.053)] == [IN_PLACE, BELOW, BELOW]
    # Nothing spread at all: no pinning, a padded range around the one value.
    assert axes.metric_axis([0.0], [0.0]).window is None
    assert axes.metric_axis([0.0], [0.0]).low < 0.0 < axes.metric_axis([0.0], []).high
    assert axes.metric_axis([0.5, 0.5], [0.5]).window is None


@settings(max_examples=150, deadline=None)
# Subnormal floats are left out: scaled by 1e-3 they underflow to 0, which no rule
# free of units could tell apart (hypothesis found 5e-324).
@given(st.lists(st.floats(-1e3, 1e3, allow_subnormal=False), min_size=1, max_size=6),
       st.lists(st.floats(-1e6, 1e6, allow_subnormal=False), max_size=8),
       st.sampled_from([1.0, -1.0, 1e-3, -1e3, 7.5]))
def test_metric_axis_pins_the_same_values_whatever_the_scale_and_sign(done, rest, scale):
    base = axes.metric_axis(done, rest)
    scaled = axes.metric_axis([v * scale for v in done], [v * scale for v in rest])
    sides = [base.place(v)[1] for v in done + rest]
    scaled_sides = [scaled.place(v * scale)[1] for v in done + rest]
    # A negative scale swaps above and below.
    swap = {BELOW: ABOVE, ABOVE: BELOW, IN_PLACE: IN_PLACE}
    assert scaled_sides == [s if scale > 0 else swap[s] for s in sides]
    assert all(side is IN_PLACE for side in sides[:len(done)])  # COMPLETE: never pinned


def test_cost_axis_starts_at_zero_and_reads_equal_costs():
    assert axes.cost_axis([0.25, 0.25, 0.25]) == pytest.approx((0.0, 0.27))
    assert axes.cost_axis([1.0, None, 4.0])[0] == 0.0
    assert axes.cost_axis([]) == (0.0, 1.0) == axes.cost_axis([0.0, None])


def test_the_pareto_front_is_labelled_by_the_objective():
    losses, info = transformed(OUTLIERS, -1.0, "min")
    info["user_attrs"][keys.ATTR_CONFIG]["objective"]["metric"] = "val_loss"
    built = report.build(losses, info)
    assert built.summary["pareto_front_label"] == "val_loss vs cost"
    labels = dict(report_text.summary_lines(built))
    assert labels["Pareto front (val_loss vs cost)"] == "trial 0, trial 4, trial 3"
    assert "`*`: on the Pareto front (val_loss vs cost)." in plain_formats.markdown(built)
    panels = plots.figures(built)
    assert panels[1].heading == "Pareto front: val_loss vs cost per trial"
    names = [t.name for t in panels[1].figure.data]
    assert "Pareto front (val_loss vs cost)" in names
    assert panels[1].figure.layout.yaxis.title.text == "final val_loss (lower is better)"
    assert any("2 trial(s) far outside" in n for n in panels[1].notes)
    # Money axes start at 0.
    assert [p.figure.layout.xaxis.range[0] for p in panels[:2]] == [0, 0]
    assert panels[2].figure.layout.yaxis.range[0] == 0


def test_a_run_without_a_completed_trial_gets_notes_instead_of_empty_plots():
    failed = [record(i, "FAIL", None, [], when=i + 1, epochs=0, error="RuntimeError: oom",
                     **money(0.01, wasted=0.01)) for i in range(3)]
    panels = plots.figures(report.build(failed, study_info()))
    assert [p.figure is None for p in panels] == [True, True, False]
    assert panels[0].notes == ["No completed trial: nothing to draw yet (3 trial(s) cost "
                               "0.0300 USD and none reported val_acc)."]
    assert panels[1].notes[0].startswith("No completed trial")
    # Pruned trials alone are drawn, and the note says there is no front yet.
    pruned = [record(0, "PRUNED", 0.3, [0.3], when=1, **money(1.0)),
              record(1, "FAIL", 0.2, [0.2], when=2, **money(1.0))]
    panels = plots.figures(report.build(pruned, study_info()))
    assert all(p.figure is not None for p in panels)
    assert panels[1].notes == ["No completed trial: no Pareto front yet (it holds "
                               "COMPLETE trials only)."]
    assert all("Pareto" not in (t.name or "") for t in panels[1].figure.data)
    # No trial at all: three notes, no plot (and no plotly script in the page).
    empty = report.build([], study_info())
    assert all(p.figure is None for p in plots.figures(empty))
    page = html_page.html_document(empty)
    assert "no completed trial" in page.lower() and "plotly.js v" not in page


@pytest.mark.parametrize("text, short", [
    ("asha: stopped at epoch 1/4 with val_acc=0.0833333333333333",
     "asha: stopped at epoch 1/4 with val_acc=0.08333"),
    ("stopped at epoch 2/8 with val_loss=2.30258512496948", "stopped at epoch 2/8 with "
                                                            "val_loss=2.303"),
    ("cannot reach the best finished trial (0.9512): even an optimistic path ends at "
     "0.93 (epoch 3/10)", "cannot reach the best finished trial (0.9512): even an "
                          "optimistic path ends at 0.93 (epoch 3/10)"),
    ("loss -1234567.891 then 1.23456789e-05 and 12345.6789, x0.83",
     "loss -1234568 then 1.235e-05 and 12346, x0.83"),
    ("budget.max_cost: spent 0.001234 USD of 10.00 USD; ray 2.60.1",
     "budget.max_cost: spent 0.001234 USD of 10.00 USD; ray 2.60.1"),
    (None, ""),
])
def test_stop_reasons_keep_four_significant_digits(text, short):
    assert report_text.fmt_reason(text) == short


def test_stop_reasons_in_the_tables_are_shortened_and_kept_whole_in_the_data(tmp_path):
    reason = "asha: stopped at epoch 1/4 with val_acc=0.0833333333333333"
    built = report.build([record(0, "PRUNED", 0.0833333333333333, [0.0833333333333333],
                                 when=1, stop_reason=reason, **money(1.0))], study_info())
    header, cells = report_text.table_rows(built)
    assert cells[0][header.index("stop reason / error")].endswith("val_acc=0.08333")
    writers.write(built, tmp_path, ["json", "csv", "md"])
    assert json.loads((tmp_path / "report.json").read_text())["trials"][0][
        "stop_reason"] == reason
    assert "val_acc=0.08333 |" in (tmp_path / "report.md").read_text()


def test_pauses_are_counted_per_trial_and_in_the_summary(tmp_path):
    paused_at, resumes = keys.ATTR_PAUSED_AT, keys.ATTR_RESUMES
    records = [
        # Paused after 1, resumed, paused after 2, resumed: trained to the end.
        record(0, "COMPLETE", 0.9, [0.5, 0.6, 0.8, 0.9], when=5, epochs=4,
               **{paused_at: [1, 2], resumes: 2}, **money(2.0)),
        # Paused after 2 and never resumed: pruned where it paused when the run ended.
        record(1, "PRUNED", 0.3, [0.2, 0.3], when=6, epochs=2,
               stop_reason="cost_aware: paused: ...", **{paused_at: [2]}, **money(1.0)),
        record(2, "COMPLETE", 0.7, [0.5, 0.6, 0.65, 0.7], when=4, epochs=4, **money(2.0)),
    ]
    built = report.build(records, study_info())
    rows = {r["number"]: r for r in built.trials}
    assert (rows[0]["paused_at"], rows[0]["resumes"]) == ([1, 2], 2)
    assert (rows[2]["paused_at"], rows[2]["resumes"]) == ([], 0)
    s = built.summary
    assert (s["paused_trials"], s["pauses"], s["resumes"], s["ended_paused"]) == (2, 3, 2, 1)
    assert dict(report_text.summary_lines(built))["Pauses"] == (
        "2 trial(s) paused 3 times; 2 pause(s) undone (the trial trained on); 1 trial(s) "
        "not resumed after their last pause")
    header, cells = report_text.table_rows(built)
    column = header.index("paused after")
    assert [c[column] for c in cells] == ["1, 2", "2", "-"]
    writers.write(built, tmp_path, ["json", "csv"])
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["pauses"] == 3
    assert "[1, 2]" in (tmp_path / "report.csv").read_text()
    # A run that paused nothing says so, and its table has no such column.
    quiet = report.build(records[2:], study_info())
    assert dict(report_text.summary_lines(quiet))["Pauses"] == "none"
    assert "paused after" not in report_text.table_rows(quiet)[0]


# -- conditional parameters ---------------------------------------------------------------

#: Trials of a conditional space: ``momentum`` only with sgd, ``betas`` only with adam,
#: a constant ``epochs_warmup`` in some records, and a NaN a hand-made record can hold.
CONDITIONAL = [
    record(0, "COMPLETE", 0.9, [0.9], when=1, params={"optimizer": "sgd", "momentum": 0.9},
           **money(1.0)),
    record(1, "COMPLETE", 0.8, [0.8], when=2, params={"optimizer": "adam",
                                                      "betas": [0.9, 0.999]}, **money(1.0)),
    record(2, "PRUNED", 0.5, [0.5], when=3, params={"optimizer": "adam", "lr": float("nan"),
                                                    "epochs_warmup": 3}, **money(0.5)),
    dict(record(3, "FAIL", None, [], when=4, error="boom", **money(0.1)), params={}),
]


def test_a_param_missing_from_some_trials_gives_empty_cells(tmp_path):
    built = report.build(CONDITIONAL, study_info())
    assert built.param_names() == ["optimizer", "momentum", "betas", "lr", "epochs_warmup"]
    flat = built.flat_rows()
    assert all(set(r) == set(flat[0]) for r in flat)  # every row, every column
    assert flat[1]["params_momentum"] is None and flat[3]["params_optimizer"] is None

    writers.write(built, tmp_path)
    with (tmp_path / "report.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert {f"params_{n}" for n in built.param_names()} <= set(reader.fieldnames)
    assert len(rows) == 4 and all(len(r) == len(reader.fieldnames) for r in rows)
    assert [r["params_momentum"] for r in rows] == ["0.9", "", "", ""]
    assert [r["params_betas"] for r in rows] == ["", "[0.9, 0.999]", "", ""]
    assert [r["params_lr"] for r in rows] == ["", "", "", ""]  # NaN: empty, not "nan"
    assert "nan" not in (tmp_path / "report.csv").read_text().lower()

    doc = json.loads((tmp_path / "report.json").read_text(),
                     parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert [t["params"] for t in doc["trials"]] == [
        {"optimizer": "sgd", "momentum": 0.9}, {"optimizer": "adam", "betas": [0.9, 0.999]},
        {"optimizer": "adam", "lr": None, "epochs_warmup": 3}, {}]

    header, cells = report_text.table_rows(built)
    params = [c[header.index("params")] for c in cells]
    assert params == ["optimizer=sgd, momentum=0.9", "optimizer=adam, betas=[0.9, 0.999]",
                      "optimizer=adam, lr=nan, epochs_warmup=3", ""]
    md = (tmp_path / "report.md").read_text()
    assert all(line.count(" | ") == len(header) - 1 for line in md.splitlines()
               if line.startswith("| ") and line.split(" | ")[0][2:].strip().isdigit())
    page = (tmp_path / "report.html").read_text()
    assert '<span class="param">optimizer=sgd,</span> <span class="param">momentum=0.9</span>' \
        in page


def test_load_results_reads_a_conditional_study(new_sqlite, tmp_path):
    url = new_sqlite("cond.db")
    study = optuna.create_study(storage=url, study_name="cond", direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["sgd", "adam"])
    for optimizer in ("sgd", "adam"):
        dists = {"optimizer": choice}
        params = {"optimizer": optimizer}
        if optimizer == "sgd":
            dists["momentum"] = optuna.distributions.FloatDistribution(0.0, 0.99)
            params["momentum"] = 0.5
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=0.7,
            user_attrs=money(1.0, spot=False, instance="custom")))
    frame = hpsearch.load_results(url)
    assert list(frame["params_optimizer"]) == ["sgd", "adam"]
    assert frame.loc[0, "params_momentum"] == 0.5
    assert frame["params_momentum"].isna().tolist() == [False, True]
    out = tmp_path / "out"
    from hpsearch.adapters.optuna.results import write_study_report

    write_study_report(study, out, ["csv"])
    with (out / "report.csv").open(newline="") as f:
        assert [r["params_momentum"] for r in csv.DictReader(f)] == ["0.5", ""]


# -- writers -------------------------------------------------------------------------------


def test_parse_formats():
    assert writers.parse_formats("html, CSV,json,md,csv") == ["html", "csv", "json", "md"]
    with pytest.raises(ConfigError, match=r"--format: unknown format 'pdf'.*\(got 'html,pdf'\)"):
        writers.parse_formats("html,pdf")
    with pytest.raises(ConfigError, match="--format"):
        writers.parse_formats(" , ")


def test_writers_on_a_hand_made_report(tmp_path):
    built = report.build(HAND, study_info(max_cost=27.0))
    paths = writers.write(built, tmp_path / "out", version="9.9")
    assert [p.name for p in paths] == ["report.html", "report.csv", "report.json", "report.md"]

    doc = json.loads((tmp_path / "out/report.json").read_text(),
                     parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["summary"]["total_cost"] == pytest.approx(13.5)
    assert [t["number"] for t in doc["trials"]] == [0, 1, 2, 3, 4, 5]

    with (tmp_path / "out/report.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and rows[1]["state"] == "PRUNED" and rows[5]["cost"] == ""
    assert rows[0]["params_lr"] == "0.1"

    md = (tmp_path / "out/report.md").read_text()
    assert "Saved by pruning (estimate)" in md and "## How the estimates are made" in md
    assert "| 3 * | COMPLETE | 0.95 |" in md

    page = (tmp_path / "out/report.html").read_text()
    assert_self_contained_figures(page)

    only = writers.write(built, tmp_path / "csv-only", ["csv"])
    assert [p.name for p in only] == ["report.csv"]
    assert sorted(p.name for p in (tmp_path / "csv-only").iterdir()) == ["report.csv"]


def assert_self_contained_figures(page: str) -> None:
    for n in (1, 2, 3):
        assert f'id="hpsearch-figure-{n}"' in page
        assert re.search(rf'Plotly\.newPlot\(\s*"hpsearch-figure-{n}"', page), n
    assert page.count("* plotly.js v") == 1, "plotly's JavaScript is not inlined once"
    assert not re.search(r"<script[^>]*\ssrc=", page), "a script is loaded from elsewhere"
    assert not re.search(r"<link[^>]*href=\"?https?:", page)


# -- reading studies from storage -----------------------------------------------------------


def make_study(url: str, name: str, running: bool = True) -> optuna.Study:
    """A real SQLite study with a complete, a pruned and (optionally) a running trial."""
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    study.set_user_attr(keys.ATTR_CONFIG, {"name": name, "max_epochs": 4,
                                           "objective": {"metric": "val_acc", "mode": "max"}})
    study.set_user_attr(keys.ATTR_PRICE, {"currency": "USD", "instance": "custom",
                                          "spot": False})
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}
    for i, (state, cost) in enumerate([("COMPLETE", 0.4), ("PRUNED", 0.1),
                                       ("RUNNING", 0.25)][: 3 if running else 2]):
        trial = study.ask(dist)
        trial.report(0.5 + 0.1 * i, step=1)
        for key, value in money(cost, spot=False, instance="custom").items():
            trial.set_user_attr(key, value)
        if state == "COMPLETE":
            trial.report(0.9, step=2)
            study.tell(trial, 0.9)
        elif state == "PRUNED":
            trial.set_user_attr(keys.ATTR_STOP_REASON, "median: behind")
            study.tell(trial, state=TrialState.PRUNED)
    return study


def test_load_results_reads_a_run_in_progress(fast_dir, new_sqlite):
    run_dir = fast_dir / "run"
    run_dir.mkdir()
    make_study(new_sqlite("run/optuna.db"), "live")
    frame = hpsearch.load_results(run_dir)
    assert list(frame["number"]) == [0, 1, 2]
    assert list(frame["state"]) == ["COMPLETE", "PRUNED", "RUNNING"]
    assert list(frame["cost"]) == pytest.approx([0.4, 0.1, 0.25])
    assert frame.loc[2, "value"] == pytest.approx(0.7)  # its latest epoch
    assert "params_lr" in frame.columns
    assert frame.attrs["summary"]["total_cost"] == pytest.approx(0.75)
    assert frame.attrs["summary"]["n_by_state"]["RUNNING"] == 1


def test_the_study_is_chosen_by_name_run_dir_or_storage(fast_dir, new_sqlite):
    from hpsearch.adapters.optuna.results import load_report

    url = new_sqlite("shared.db")
    make_study(url, "alpha", running=False)
    make_study(url, "beta", running=False)
    with pytest.raises(ConfigError, match=r"--study: .*holds 2 studies; choose one of: "
                                          r"alpha, beta"):
        hpsearch.load_results(url)
    with pytest.raises(ConfigError, match=r"no such study .* it holds: alpha, beta "
                                          r"\(got 'gamma'\)"):
        hpsearch.load_results(url, study="gamma")
    assert len(hpsearch.load_results(url, study="beta")) == 2

    # A run dir whose space.yaml names another storage reads it, and its own study.
    run_dir = fast_dir / "beta-run"
    run_dir.mkdir()
    (run_dir / "space.yaml").write_text(f"name: beta\nstorage: {url}\n")
    report_obj, source = load_report(run_dir)
    assert source.url == url and report_obj.summary["study"] == "beta"


def test_sources_without_a_study_are_errors_and_create_nothing(fast_dir, new_sqlite):
    from hpsearch.adapters.optuna.results import load_report

    with pytest.raises(ConfigError, match=r"run dir: not found \(got '.*nope'\)"):
        load_report(fast_dir / "nope")
    (fast_dir / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no study"):
        load_report(fast_dir / "empty")
    with pytest.raises(ConfigError, match="SQLite file not found"):
        load_report(f"sqlite:///{fast_dir / 'missing.db'}")
    blank = new_sqlite("blank.db")  # Optuna's tables, no study
    with pytest.raises(ConfigError, match=r"study: .* holds no study"):
        load_report(blank)
    assert sorted(p.name for p in fast_dir.iterdir()) == ["blank.db", "empty"]
    assert list((fast_dir / "empty").iterdir()) == []


# -- the CLI on bad input ------------------------------------------------------------------


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hpsearch: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("args, fragments", [
    (["report", "runs/nope"], ["run dir: not found", "(got 'runs/nope')"]),
    (["report", "sqlite:///nope.db"], ["SQLite file not found", "(got 'sqlite:///nope.db')"]),
    (["report", "run", "--format", "html,pdf"], ["--format: unknown format 'pdf'"]),
    (["report", "run", "--study", "other"], ["--study: no such study", "(got 'other')"]),
    (["report", "empty"], ["run dir: holds no study", "(got 'empty')"]),
    (["dashboard", "runs/nope"], ["run dir: not found", "(got 'runs/nope')"]),
    (["dashboard", "run", "--port", "0"], ["--port: must be between 1 and 65535"]),
], ids=["missing-run-dir", "missing-sqlite", "bad-format", "unknown-study", "no-study",
        "dashboard-missing-run-dir", "dashboard-bad-port"])
@pytest.mark.slow
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, fragments):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make_study(f"sqlite:///{run_dir / 'optuna.db'}", "one", running=False)
    (tmp_path / "empty").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    proc = cli(*args, cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_cli_dashboard_refuses_a_port_in_use(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make_study(f"sqlite:///{run_dir / 'optuna.db'}", "one", running=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli("dashboard", "run", "--port", str(port), cwd=tmp_path)
    assert_one_line_error(proc, "--port: cannot listen on 127.0.0.1", f"(got {port})")


# -- a real run -----------------------------------------------------------------------------

BASE = {
    "name": "report-run",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc", "mode": "max"},
    "max_epochs": 4,
    "space": {
        "lr": {"type": "float", "low": 1.0e-6, "high": 0.05, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
        "dropout": {"type": "float", "low": 0.0, "high": 0.3, "step": 0.1},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "search": {"sampler": "random", "n_trials": 3, "concurrency": 1, "seed": 0},
    "pruning": {"policy": "asha", "min_epochs": 1, "reduction_factor": 2},
    # A spot price from the catalogue, so the on-demand estimate has work to do.
    "pricing": {"instance": "aws:g4dn.xlarge", "spot": True},
    "budget": {"max_cost": 5.0},
}
GOOD = {"lr": 0.01, "hidden": 64, "dropout": 0.0, "optimizer": "adam"}
#: A learning rate this small leaves the model at chance level: ASHA prunes it.
BAD = {"lr": 1.0e-6, "hidden": 16, "dropout": 0.0, "optimizer": "sgd"}

TRIAL_KEYS = {"number", "state", "value", "best_value", "epochs", "params", "stop_reason",
              "cost", "wasted_cost", "billed_s", "preemptions", "instance", "spot"}
CSV_COLUMNS = TRIAL_KEYS - {"params"} | {"params_lr", "params_hidden", "params_dropout",
                                         "params_optimizer"}


#: The tests of :func:`real_run` go to one pytest-xdist worker (``--dist loadgroup``),
#: which makes the search once, not once a worker.
SHARES_REAL_RUN = pytest.mark.xdist_group("test_report-real_run")


@pytest.fixture(scope="module")
def real_run(ray_cluster, tmp_path_factory):
    """One small real search with a pruned trial; its run dir and printed lines."""
    run_dir = tmp_path_factory.mktemp("report-run") / "run"
    run_dir.mkdir()
    study = optuna.create_study(storage=f"sqlite:///{run_dir / 'optuna.db'}",
                                study_name=BASE["name"], direction="maximize")
    for params in (GOOD, GOOD, BAD):
        study.enqueue_trial(params)
    lines: list[str] = []
    result = hpsearch.run(copy.deepcopy(BASE), run_dir=run_dir, emit=lines.append)
    return result, lines


@SHARES_REAL_RUN
@slow
def test_run_writes_the_report_and_says_where(real_run):
    result, lines = real_run
    files = ["report.html", "report.csv", "report.json", "report.md"]
    for name in files:
        assert (result.run_dir / name).is_file(), name
    (report_line,) = [ln for ln in lines if ln.startswith("Report: ")]
    assert Path(report_line[len("Report: "):]).resolve() == \
        (result.run_dir / "report.html").resolve()
    (results_line,) = [ln for ln in lines if ln.startswith("Results: ")]
    assert all(name in results_line for name in files)
    assert lines.index(report_line) < lines.index(results_line)


@SHARES_REAL_RUN
@slow
def test_report_totals_match_the_ledger(real_run):
    from hpsearch.money.nodes import billed_seconds
    from hpsearch.money.statement import statement

    result, _ = real_run
    ledger = Ledger(result.run_dir / "ledger.jsonl")
    money = statement(ledger, 0.0)  # everything is closed: the moment does not matter
    doc = json.loads((result.run_dir / "report.json").read_text())
    summary, trials = doc["summary"], doc["trials"]
    assert {"best_value", "total_cost", "kept_cost", "wasted_cost", "idle_cost", "nodes",
            "currency", "best_trial", "n_by_state", "savings_vs_no_pruning",
            "savings_vs_on_demand"} <= set(summary)
    assert all(TRIAL_KEYS <= set(t) for t in trials)
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert trials[2]["params"]["lr"] == BAD["lr"]
    assert trials[2]["stop_reason"].startswith("asha: stopped at epoch 1/4")
    assert all(t["instance"] == "aws:g4dn.xlarge" and t["spot"] is True for t in trials)
    assert all(t["preemptions"] == 0 for t in trials)

    # The node bills the run; the trials pay their shares of it; the rest is idle.
    (node,) = summary["nodes"]
    assert node["cost"] == pytest.approx(ledger.spent(), rel=1e-9)
    assert summary["total_cost"] == pytest.approx(ledger.spent(), rel=1e-9)
    assert summary["total_cost"] == pytest.approx(result.spent, rel=1e-9)
    assert sum(t["cost"] for t in trials) == pytest.approx(money.kept + money.wasted,
                                                           rel=1e-9)
    assert summary["kept_cost"] + summary["wasted_cost"] + summary["idle_cost"] == \
        pytest.approx(summary["total_cost"], rel=1e-9)
    assert summary["idle_cost"] > 0  # the driver's start, the trials' half of the node
    assert summary["wasted_cost"] == pytest.approx(ledger.wasted(), abs=1e-12)
    for t in trials:
        assert t["cost"] == pytest.approx(ledger.spent(trial=t["number"]), rel=1e-9)
        assert t["share"] == 0.5  # one of the test cluster's two CPUs
    assert summary["currency"] == "USD"
    assert summary["budget_used"] == pytest.approx(ledger.spent() / 5.0)
    best = max((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    assert (summary["best_trial"], summary["best_value"]) == (best["number"], best["value"])
    assert summary["best_value"] == pytest.approx(result.best_trial.value)

    # Without pruning the node would have run 3 more epochs of trial 2 (at the packing
    # it had): billed with its 60 s minimum, which may well cover them.
    (rental,) = money.nodes
    packing = rental.work_s / rental.active_s
    extra = 0.5 * 3 * trials[2]["epoch_s"] / packing
    baseline = billed_seconds(rental.length_s + extra, 1, 60) * 0.21 / 3600
    pruning = summary["savings_vs_no_pruning"]
    assert pruning["estimate"] is True and pruning["n_scaled"] == 1
    assert pruning["amount"] == pytest.approx(baseline - rental.cost, abs=1e-12)
    if rental.length_s + extra <= 60:
        assert pruning["amount"] == 0 and pruning["share"] == 0  # no fictional saving
    offer = catalog_mod.packaged().lookup("aws:g4dn.xlarge")
    spot = summary["savings_vs_on_demand"]
    assert spot["amount"] == pytest.approx(
        summary["total_cost"] * (offer.on_demand_per_hour / offer.spot_per_hour - 1))
    assert spot["method"].startswith("estimate")


@SHARES_REAL_RUN
@slow
def test_report_csv_has_one_row_per_trial(real_run):
    result, _ = real_run
    with (result.run_dir / "report.csv").open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert CSV_COLUMNS <= set(reader.fieldnames)
    assert [int(r["number"]) for r in rows] == [0, 1, 2]
    ledger = Ledger(result.run_dir / "ledger.jsonl")
    assert sum(float(r["cost"]) for r in rows) == pytest.approx(
        sum(ledger.spent(trial=t) for t in ledger.trials()), rel=1e-9)
    assert rows[2]["state"] == "PRUNED" and float(rows[2]["params_lr"]) == BAD["lr"]


@SHARES_REAL_RUN
@slow
def test_report_html_holds_the_figures_and_loads_nothing_from_outside(real_run):
    result, _ = real_run
    page = (result.run_dir / "report.html").read_text()
    assert_self_contained_figures(page)
    assert "Saved by pruning (estimate)" in page and "Cost by trial state" in page


@SHARES_REAL_RUN
@slow
def test_load_results_returns_one_row_per_trial(real_run):
    result, _ = real_run
    frame = hpsearch.load_results(result.run_dir)
    assert len(frame) == 3 and list(frame["number"]) == [0, 1, 2]
    assert CSV_COLUMNS <= set(frame.columns)
    summary = frame.attrs["summary"]
    assert summary["total_cost"] == pytest.approx(result.spent, rel=1e-9)
    assert frame["cost"].sum() == pytest.approx(summary["kept_cost"] + summary["wasted_cost"],
                                                rel=1e-9)
    assert summary["idle_cost"] == pytest.approx(result.idle, rel=1e-9)
    same = hpsearch.load_results(result.storage_url, study=BASE["name"])
    assert list(same["cost"]) == list(frame["cost"])


@SHARES_REAL_RUN
@slow
def test_cli_report_writes_the_requested_formats(real_run, in_tmp):
    result, _ = real_run
    proc = cli("report", str(result.run_dir), "--format", "csv,json", "--out", "out",
               cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(Path("out") / "report.csv"),
                                        str(Path("out") / "report.json")]
    assert sorted(p.name for p in (in_tmp / "out").iterdir()) == ["report.csv",
                                                                  "report.json"]
    # A storage URL writes to ./report by default.
    proc = cli("report", result.storage_url, "--format", "md", cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(Path("report") / "report.md")
    assert "| 2 | PRUNED |" in (in_tmp / "report/report.md").read_text()


@SHARES_REAL_RUN
@slow
def test_headless_chromium_renders_the_plots(real_run, tmp_path):
    result, _ = real_run
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: this test needs Debian's headless "
                    "Chromium (apt-get install -y chromium; .ci/run installs it)")
    page = (result.run_dir / "report.html").resolve()
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    parts = re.split(r'id="hpsearch-figure-\d"', dom)
    # Best against money, the Pareto front, cost by state, and idle money over time (a
    # local run bills this machine for the run).
    assert len(parts) == 5, "the four figure divs are not in the DOM"
    for n, part in enumerate(parts[1:], start=1):
        # plotly adds its SVG layers only once it has drawn the figure.
        assert 'class="main-svg"' in part, f"figure {n} was not drawn"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, proc: subprocess.Popen, deadline_s: float = 60.0):
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"the dashboard exited with {proc.returncode}: "
                            f"{proc.stderr.read()[-2000:]}")
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@SHARES_REAL_RUN
@slow
def test_cli_dashboard_serves_the_run(real_run, in_tmp):
    result, _ = real_run
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "dashboard", str(result.run_dir),
         "--port", str(port)],
        cwd=in_tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The command prints its URL once the dashboard answers: wait for that line.
        first = proc.stdout.readline()
        assert first.startswith(f"Dashboard: http://127.0.0.1:{port}/dashboard/"), first
        studies = _get_json(f"http://127.0.0.1:{port}/api/studies", proc)["study_summaries"]
        (summary,) = [s for s in studies if s["study_name"] == BASE["name"]]
        detail = _get_json(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}",
                           proc)
        trials = sorted(detail["trials"], key=lambda t: t["number"])
        assert [t["state"] for t in trials] == ["Complete", "Complete", "Pruned"]
        for trial in trials:
            attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
            for key in (keys.ATTR_COST, keys.ATTR_WASTED_COST, keys.ATTR_BILLED_S,
                        keys.ATTR_INSTANCE, keys.ATTR_SPOT, keys.ATTR_CURRENCY):
                assert key in attrs, (trial["number"], key)
            assert float(attrs[keys.ATTR_COST]) > 0
        pruned_attrs = {a["key"]: a["value"] for a in trials[2]["user_attrs"]}
        assert pruned_attrs[keys.ATTR_STOP_REASON].startswith("asha:")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Dashboard stopped." in out
    assert "Traceback" not in err
    assert not _listening(port), "optuna-dashboard outlived the command"


def test_a_trial_moved_from_spot_to_on_demand_is_repriced_only_for_its_spot_part():
    from hpsearch.report.savings import savings_vs_on_demand

    row = {"cost": 40.0, "spot_cost": 10.0, "instance": "aws:x", "spot": False}
    saved = savings_vs_on_demand([row], {"aws:x": 3.0})
    assert saved["estimate"] is True
    assert saved["baseline_cost"] == pytest.approx(40.0 - 10.0 + 30.0)
    assert saved["amount"] == pytest.approx(20.0)
