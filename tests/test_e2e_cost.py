"""Money end to end: real Ray, real Lightning, a real SQLite study and the ledger file."""

from __future__ import annotations

import json
from collections import defaultdict

import optuna
import pytest
from optuna.trial import TrialState

import hpsearch

from .test_e2e import BAD, GOOD, enqueue, load_study, spec

pytestmark = pytest.mark.slow

#: One money unit per second of the machine (the test cluster: 2 CPUs, so a 1-CPU
#: trial pays half of it): amounts read as seconds.
PRICE = {"price_per_hour": 3600.0, "currency": "USD"}


def ledger_events(run_dir):
    """The ledger's timed trial events (its header, nodes and ``alive`` name no trial)."""
    events = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    return [e for e in events if "trial" in e and ("at_s" in e or "start_s" in e)]


def longest_unreported_s(run_dir) -> float:
    """The longest stretch any trial was billed without reporting (start-up included)."""
    last: dict[int, float] = {}
    longest = 0.0
    for event in ledger_events(run_dir):
        trial = event["trial"]
        at = event["start_s"] if event["event"] == "open" else event["at_s"]
        if event["event"] != "open":
            longest = max(longest, at - last[trial])
        last[trial] = at
    return longest


def wrap_up_s(run_dir) -> float:
    """Seconds the machine stayed rented after its last trial was closed (Tune noticing
    the stop, the session closing): billed, and no report can stop it."""
    events = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    released = max(e["at_s"] for e in events if e["event"] == "release")
    closed = max(e["at_s"] for e in events if e["event"] == "close")
    return max(0.0, released - closed)


def test_a_local_run_bills_this_machine_for_the_run(ray_cluster, in_tmp):
    import subprocess
    import sys
    import time

    from hpsearch.money.ledger import Ledger
    from hpsearch.money.statement import statement

    cfg = spec(**{"name": "wall", "max_epochs": 6, "pricing": PRICE, "search.n_trials": 3,
                  "search.concurrency": 2})
    lines: list[str] = []
    started = time.time()
    result = hpsearch.run(cfg, emit=lines.append)
    ended = time.time()
    ledger = Ledger(result.run_dir / "ledger.jsonl")
    (machine,) = ledger.rentals
    # The machine is billed from the run's start until its trials are settled ...
    assert 0 <= machine.start_s - started < 0.5
    last_trial = max(i.end_s for i in ledger.intervals)
    assert 0 <= machine.end_s - last_trial < 2.0
    # ... so the ledger is the run's wall time x price, less the summary and the report
    # written after the bill is closed (a second or two here).
    wall = ended - started
    assert result.spent == pytest.approx(machine.billed_s() * 1.0)
    assert wall - 3.0 < result.spent <= wall + 1.0  # billed per whole second
    assert result.spent >= wall - (ended - machine.end_s) - 1e-6
    # Trials pay half the machine each while they run; the rest is idle, kept apart.
    money = statement(ledger, ended)
    assert money.kept == pytest.approx(sum(0.5 * (i.end_s - i.start_s)
                                           for i in ledger.intervals))
    assert (result.kept, result.wasted, result.idle) == (
        pytest.approx(money.kept), pytest.approx(money.wasted), pytest.approx(money.idle))
    assert result.idle > 0  # the driver's start, before the first trial
    # The terminal summary and the report agree to the cent.
    (spent_line,) = [ln for ln in lines if ln.startswith("Spent: ")]
    proc = subprocess.run([sys.executable, "-m", "hpsearch", "report", str(result.run_dir),
                           "--format", "json", "--out", "again"], capture_output=True,
                          text=True, cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((in_tmp / "again" / "report.json").read_text())["summary"]
    for key, label in (("total_cost", "Spent: "), ("kept_cost", "work kept "),
                       ("wasted_cost", "wasted "), ("idle_cost", "idle ")):
        shown = float(spent_line.split(label, 1)[1].split(" USD")[0])
        assert round(summary[key], 2) == round(shown, 2), key


def test_budget_cap_stops_cleanly_and_a_larger_budget_resumes_the_stopped_trials_first(
        ray_cluster, in_tmp):
    # Each trial trains at least 30 x 0.5 s: two at a time, at 0.5 USD/s each, pass the
    # 12 USD cap while both still run, however fast the machine (the cap must stop
    # running trials, not only close admission).
    epochs = 30
    cfg = spec(**{"name": "budget", "max_epochs": epochs, "pricing": PRICE,
                  "trainable": "tests.fault_trainables:slow", "space.sleep_s": 0.5,
                  "search.n_trials": 6, "search.concurrency": 2,
                  "budget.max_cost": 12.0})
    lines: list[str] = []
    first = hpsearch.run(cfg, emit=lines.append)

    assert first.stop_reason and "budget.max_cost" in first.stop_reason
    assert any(line.startswith("Stopped early: ") and "stopped by budget resume first" in line
               for line in lines)
    study = load_study(first)
    trials = study.get_trials()
    assert 0 < len(trials) < 6
    stopped = [t for t in trials if t.user_attrs.get("lifecycle") == "budget_stopped"]
    assert stopped, "the cap stopped running trials"
    for t in stopped:
        # Left unfinished in Optuna (it cannot reopen a finished trial): more money
        # resumes them; the progress line says so.
        assert t.state == TrialState.RUNNING
        assert t.user_attrs["stop_reason"].startswith("budget: budget.max_cost reached")
        assert t.user_attrs["saved_cost"] > 0
        assert any(ln.startswith(f"  trial {t.number} stopped by budget after") for ln in lines)
    assert all(t.state in (TrialState.COMPLETE, TrialState.RUNNING) for t in trials)
    for t in trials:
        assert t.user_attrs["currency"] == "USD" and t.user_attrs["instance"] == "custom"
        assert t.user_attrs["cost"] > 0 and t.user_attrs["billed_s"] > 0
        assert t.user_attrs["spot"] is False and t.user_attrs["wasted_cost"] == 0
        assert t.user_attrs["share"] == 0.5
    # Spend passes the cap by at most one reporting interval of the machine (a running
    # trial is stopped at its next report) and the wrap-up after the last trial, both
    # measured from the ledger (a loaded machine stretches both).
    assert first.spent <= 12.0 + (longest_unreported_s(first.run_dir)
                                  + wrap_up_s(first.run_dir)) * 1.0 + 1.0
    assert sum(t.user_attrs["cost"] for t in trials) == pytest.approx(
        first.kept + first.wasted, rel=1e-6)

    second = hpsearch.run(cfg, overrides={"budget.max_cost": 1000.0}, emit=lines.append)
    assert second.run_dir == first.run_dir
    assert second.stop_reason is None
    trials = load_study(second).get_trials()
    assert len(trials) == 6
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    assert second.spent > first.spent
    # The session's first starts are the budget-stopped trials, from their checkpoints.
    opened, session = [], 0
    for event in (json.loads(ln) for ln in
                  (second.run_dir / "ledger.jsonl").read_text().splitlines()):
        session += event["event"] == "node"
        if event["event"] == "open" and session == 2:
            opened.append(event["trial"])
    assert sorted(opened[:len(stopped)]) == sorted(t.number for t in stopped)
    for t in stopped:
        resumed = trials[t.number]
        assert resumed.user_attrs["resumed_from_epochs"][-1] == \
            max(t.intermediate_values)
        assert sorted(resumed.intermediate_values) == list(range(1, epochs + 1))
    billed = defaultdict(int)
    for event in ledger_events(second.run_dir):
        if event["event"] == "open":
            billed[event["trial"]] += 1
    assert sorted(billed) == [t.number for t in trials]


def test_per_trial_cap_stops_a_trial_before_it_passes_it(ray_cluster, in_tmp):
    cfg = spec(**{"name": "per-trial", "max_epochs": 300, "pricing": PRICE,
                  "search.n_trials": 1, "search.concurrency": 1,
                  "budget.max_cost_per_trial": 6.0})
    result = hpsearch.run(cfg, emit=None)
    (trial,) = load_study(result).get_trials()
    assert trial.user_attrs["lifecycle"] == "budget_stopped"
    assert trial.user_attrs["stop_reason"].startswith("budget: budget.max_cost_per_trial")
    assert trial.user_attrs["epochs"] < 300
    # It stopped before an epoch that would pass the cap (as the epochs so far
    # estimate it): within one reporting interval of it, at its 0.5 USD/s share.
    assert trial.user_attrs["cost"] <= 6.0 + longest_unreported_s(result.run_dir) * 0.5


def test_cost_aware_pruning_stops_a_hopeless_trial_and_says_why(ray_cluster, in_tmp):
    run_dir = in_tmp / "cost-aware"
    good = [dict(GOOD, lr=lr) for lr in (0.01, 0.02, 0.005, 0.03, 0.015)]
    enqueue(run_dir, "cost-aware", "max", [*good, BAD])
    cfg = spec(**{"name": "cost-aware", "max_epochs": 5, "search.concurrency": 1,
                  "search.n_trials": 6, "space.lr.low": 1.0e-6,
                  "pruning": {"policy": "cost_aware"}})
    lines: list[str] = []
    result = hpsearch.run(cfg, run_dir=run_dir, emit=lines.append)

    trials = load_study(result).get_trials()
    bad = trials[5]
    assert bad.params["lr"] == BAD["lr"]
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs["stop_reason"].startswith("cost_aware: ")
    assert max(bad.intermediate_values) < 5
    assert 0.0 <= bad.user_attrs["predicted_final"] <= 0.5
    assert bad.user_attrs["saved_cost"] > 0
    assert len([t for t in trials[:5] if t.state == TrialState.COMPLETE]) >= 3
    assert any(line.startswith("  trial 5 pruned after") for line in lines)


def test_every_result_carries_the_expected_time_and_the_study_the_cost_to_finish(
        ray_cluster, in_tmp):
    cfg = spec(**{"name": "estimates", "max_epochs": 3, "pricing": PRICE,
                  "search.n_trials": 1})
    result = hpsearch.run(cfg, emit=None)
    (trial_dir,) = (result.run_dir / "tune" / "session-1").glob("trial-0000-*")
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    assert [r["hps_epoch"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["hps_remaining_s"] >= 0
        # The trial prices nothing: money is the accountant's (one formula).
        assert "hps_cost_to_finish" not in r
    assert rows[-1]["hps_remaining_s"] == 0
    assert rows[0]["hps_remaining_s"] > 0
    study = optuna.load_study(study_name="estimates", storage=result.storage_url)
    assert study.user_attrs["price"]["instance_per_hour"] == 3600.0
    assert study.user_attrs["price"]["per_hour"] == 1800.0
    assert study.user_attrs["spent"] == pytest.approx(result.spent)
    (trial,) = study.trials
    assert trial.user_attrs["remaining_s"] == 0 and trial.user_attrs["cost_to_finish"] == 0


def test_an_infinite_metric_prints_nothing_and_tune_keeps_json_and_csv(
        ray_cluster, in_tmp, capfd, caplog):
    """Tune's TensorBoard logger is off: tensorboardX printed "NaN or Inf found in input
    tensor." for every infinite value a diverging trial reported."""
    cfg = spec(**{"name": "diverging", "max_epochs": 2, "search.n_trials": 1,
                  "trainable": "tests.trainables:diverging"})
    result = hpsearch.run(cfg, emit=None)
    out, err = capfd.readouterr()
    # tensorboardX logged it as a warning (the terminal shows Ray's warnings).
    assert "NaN or Inf" not in out + err
    assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]
    (trial_dir,) = (result.run_dir / "tune" / "session-1").glob("trial-0000-*")
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    assert [r["hps_epoch"] for r in rows] == [1, 2]
    assert (trial_dir / "progress.csv").read_text().count("\n") == 3  # header and 2 rows
    assert not list((result.run_dir / "tune").rglob("events.out.tfevents*"))
    assert load_study(result).trials[0].state == TrialState.COMPLETE


def test_a_trial_whose_objective_turns_nan_is_stopped_at_that_epoch_and_fails(
        ray_cluster, in_tmp):
    """A diverged trial is not trained (and billed) to its last epoch: it ends FAILED
    at its first NaN epoch, with the reason, for any policy (here none)."""
    cfg = spec(**{"name": "nan-stop", "max_epochs": 6, "pricing": PRICE,
                  "search.n_trials": 2, "search.concurrency": 1,
                  "trainable": "tests.trainables:nan_from",
                  "objective": {"metric": "val_acc_or_nan", "mode": "max"},
                  "space.nan_from": {"type": "categorical", "choices": [2, 6]}})
    enqueue(in_tmp / "runs" / "nan-stop", "nan-stop", "max",
            [{**GOOD, "nan_from": 2}, {**GOOD, "nan_from": 6}])
    result = hpsearch.run(cfg, run_dir=in_tmp / "runs" / "nan-stop", emit=None)
    diverged, healthy = load_study(result).trials
    assert diverged.state == TrialState.FAIL
    # Epochs 1-2 real, epoch 3 NaN: stopped there, not after epoch 6.
    assert sorted(diverged.intermediate_values) == [1, 2, 3]
    assert "NaN after epoch 3/6" in diverged.user_attrs["error"]
    assert diverged.user_attrs["stop_reason"].startswith("diverged: ")
    assert diverged.user_attrs["epochs"] == 3
    assert healthy.state == TrialState.COMPLETE and len(healthy.intermediate_values) == 6
