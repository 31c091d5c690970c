"""The digits demonstration's counts and table (pure: built from Optuna trials, no run)."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from benchmarks.digits_pruning import pauses, table
from hpsearch import keys


def trial(state: TrialState, value: float | None = None, **attrs) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=state, value=value, params={"x": 0.5},
        distributions={"x": FloatDistribution(0.0, 1.0)},
        intermediate_values={1: 0.5}, user_attrs=attrs)


def test_pauses_count_a_resumed_trial_and_one_paused_for_good():
    paused_at, resumes = keys.ATTR_PAUSED_AT, keys.ATTR_RESUMES
    trials = [
        trial(TrialState.COMPLETE, 0.9),
        # Paused after epochs 3 and 7, resumed each time, trained to the end.
        trial(TrialState.COMPLETE, 0.95, **{paused_at: [3, 7], resumes: 2,
                                           keys.ATTR_RESUMED_FROM: [3, 7]}),
        # Paused and never resumed: PRUNED at the end.
        trial(TrialState.PRUNED, **{paused_at: [2]}),
        # Stopped outright: not a pause.
        trial(TrialState.PRUNED, **{keys.ATTR_STOP_REASON:
                                    "cost_aware: cannot reach the best finished trial"}),
        # Restarted after a preemption, never paused: not a resume of a pause.
        trial(TrialState.COMPLETE, 0.9, **{keys.ATTR_RESUMED_FROM: [4]}),
    ]
    assert pauses(trials) == {"paused": 2, "resumed": 1}
    assert pauses([]) == {"paused": 0, "resumed": 0}


def row(seed: int, policy: str, spent: float, best: float, sign: float = -1.0,
        **counts) -> dict:
    return {"seed": seed, "policy": policy, "spent": spent, "best": best, "sign": sign,
            "pruned": counts.get("pruned", 0), "paused": counts.get("paused", 0),
            "resumed": counts.get("resumed", 0), "epochs": counts.get("epochs", 320)}


def test_table_names_the_metric_and_counts_the_seeds_that_found_nones_best_or_better():
    rows = [row(0, "none", 2.0, 0.08), row(0, "cost_aware", 1.0, 0.08, paused=4, resumed=1),
            row(1, "none", 4.0, 0.07), row(1, "cost_aware", 1.0, 0.09, paused=6, resumed=3),
            row(2, "none", 4.0, 0.07), row(2, "cost_aware", 2.0, 0.06)]
    lines = table(rows, ["none", "cost_aware"], "val_loss").splitlines()
    assert "best val_loss" in lines[0]
    assert lines[2] == "| none | 1.00x | 0.07 | 3/3 | 0 | 0 (0) | 320 |"
    # Money: the median of 1/2, 1/4 and 1/2 of none's on the same seed; none's best on
    # seed 0, a better (lower) loss on seed 2, a worse one on seed 1.
    assert lines[3] == "| cost_aware | 0.50x | 0.08 | 2/3 | 0 | 4 (1) | 320 |"


def test_on_a_maximised_metric_a_higher_value_counts_as_better():
    rows = [row(0, "none", 1.0, 0.9749, sign=1.0), row(0, "cost_aware", 1.0, 0.9777, sign=1.0),
            row(1, "none", 1.0, 0.9749, sign=1.0), row(1, "cost_aware", 1.0, 0.9721, sign=1.0)]
    assert table(rows, ["cost_aware"], "val_acc").splitlines()[2].split(" | ")[3] == "1/2"
