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

#: One money unit per second of a trial: amounts read as seconds.
PRICE = {"price_per_hour": 3600.0, "currency": "USD"}


def ledger_events(run_dir):
    """The ledger's trial events (its header and ``alive`` events name no trial)."""
    events = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    return [e for e in events if "trial" in e]


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


def test_budget_cap_stops_cleanly_and_a_larger_budget_finishes_the_study(ray_cluster, in_tmp):
    # Six trials of 40 epochs cost far more than 12: the cap is hit whatever the speed.
    cfg = spec(**{"name": "budget", "max_epochs": 40, "pricing": PRICE,
                  "search.n_trials": 6, "search.concurrency": 2,
                  "budget.max_cost": 12.0})
    lines: list[str] = []
    first = hpsearch.run(cfg, emit=lines.append)

    assert first.stop_reason and "budget.max_cost" in first.stop_reason
    assert any(line.startswith("Stopped early: ") for line in lines)
    study = load_study(first)
    trials = study.get_trials()
    assert 0 < len(trials) < 6
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    for t in trials:
        if t.state == TrialState.PRUNED:
            assert t.user_attrs["stop_reason"].startswith("budget: budget.max_cost reached")
            assert t.user_attrs["saved_cost"] > 0
        assert t.user_attrs["currency"] == "USD" and t.user_attrs["instance"] == "custom"
        assert t.user_attrs["cost"] > 0 and t.user_attrs["billed_s"] > 0
        assert t.user_attrs["spot"] is False and t.user_attrs["wasted_cost"] == 0
    # Spend passes the cap by at most one reporting interval of each running trial.
    assert first.spent <= 12.0 + 2 * longest_unreported_s(first.run_dir) * 1.0
    assert sum(t.user_attrs["cost"] for t in trials) == pytest.approx(first.spent, rel=1e-6)

    second = hpsearch.run(cfg, overrides={"budget.max_cost": 1000.0}, emit=None)
    assert second.run_dir == first.run_dir
    assert second.stop_reason is None
    trials = load_study(second).get_trials()
    assert len(trials) == 6
    assert [t.state for t in trials[len(study.trials):]] == \
        [TrialState.COMPLETE] * (6 - len(study.trials))
    assert second.spent > first.spent
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
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs["stop_reason"].startswith("budget: budget.max_cost_per_trial")
    assert trial.user_attrs["epochs"] < 300
    # It stopped before an epoch that would pass the cap: within one epoch of it.
    epoch_cost = trial.user_attrs["cost"] / trial.user_attrs["epochs"]
    assert trial.user_attrs["cost"] <= 6.0 + epoch_cost


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


def test_every_result_carries_the_expected_time_and_cost_to_finish(ray_cluster, in_tmp):
    cfg = spec(**{"name": "estimates", "max_epochs": 3, "pricing": PRICE,
                  "search.n_trials": 1})
    result = hpsearch.run(cfg, emit=None)
    (trial_dir,) = (result.run_dir / "tune" / "session-1").glob("trial-0000-*")
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    assert [r["hps_epoch"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["hps_remaining_s"] >= 0
        assert r["hps_cost_to_finish"] == pytest.approx(r["hps_remaining_s"] * 1.0)
    assert rows[-1]["hps_remaining_s"] == 0
    assert rows[0]["hps_remaining_s"] > 0
    study = optuna.load_study(study_name="estimates", storage=result.storage_url)
    assert study.user_attrs["price"]["per_hour"] == 3600.0
    assert study.user_attrs["spent"] == pytest.approx(result.spent)
