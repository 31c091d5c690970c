"""The benchmark's sampler in the loop (:mod:`benchmarks.sampled`): TPE proposes each new
trial from a real in-memory Optuna study that sees what a real run's study sees, mapped
to the nearest untried configuration of the pool."""

from __future__ import annotations

import json

import numpy as np
import pytest
from optuna.trial import TrialState as OptunaState

from benchmarks import lcbench, policies, sampled
from benchmarks.lcbench import Pool
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.none import NoPruning
from hpsearch.simulate import Curve, simulate


def line_pool(n: int = 40, best_x: float = 0.8) -> Pool:
    """Configurations x in [0, 1] (one per curve, evenly spread, shuffled); the final
    accuracy falls off linearly with the distance from ``best_x``; 4 epochs each."""
    xs = np.random.default_rng(3).permutation(np.linspace(0.0, 1.0, n))
    curves = []
    for x in xs:
        final = 90.0 - 60.0 * abs(x - best_x)
        curves.append(Curve(tuple(final * f for f in (0.7, 0.8, 0.9, 1.0)),
                            (10.0, 20.0, 30.0, 40.0)))
    return Pool("line", curves, [{"x": float(x)} for x in xs])


class PauseThenStop(NoPruning):
    """Pauses trial 1 after epoch 2 (never resumed, so PRUNED at the end) and stops trial
    2 after epoch 1; the others train to the end."""

    def on_result(self, trial, epoch, value):
        if trial == 1 and epoch == 2:
            return Verdict(Decision.PAUSE, "test pause")
        if trial == 2 and epoch == 1:
            return Verdict(Decision.STOP, "test stop")
        return CONTINUE


def test_pool_space_widens_the_declared_space_to_the_pool():
    configs = [{"lr": 1e-5, "units": 64.0, "drop": 0.2, "name": "a"},
               {"lr": 0.05, "units": 512.0, "drop": 0.4, "name": "b"}]
    space = sampled.pool_space(configs, {"lr": (1e-4, 0.1, True), "units": (16, 1024, True)})
    assert space == {"lr": (1e-5, 0.1, True), "units": (16, 1024, True),
                     # not declared: the pool's range, linear (spans less than 10x)
                     "drop": (0.2, 0.4, False)}
    assert sampled.pool_space([{"a": 1.0}, {"a": 100.0}])["a"] == (1.0, 100.0, True)


def test_a_pool_without_numeric_hyperparameters_is_a_clear_error():
    with pytest.raises(ValueError, match="sampler"):
        sampled.pool_space([{"name": "a"}, {"name": "b"}])


def test_every_configuration_is_handed_out_once_then_none_is_left():
    pool = line_pool(12)
    study = sampled.SampledStudy(pool.configs, sampled.pool_space(pool.configs), "max", 0)
    assert study.left == 12
    numbers = [study.ask()[0] for _ in range(12)]
    assert sorted(numbers) == list(range(12))
    assert study.left == 0
    with pytest.raises(IndexError):
        study.ask()
    # The Optuna study holds the pool's configurations, not the raw proposals (told FAIL).
    asked = [t for t in study.optuna.trials if t.state is not OptunaState.FAIL]
    assert [t.params["x"] for t in asked] == [pool.configs[n]["x"] for n in numbers]


def test_the_optuna_study_sees_what_a_real_runs_study_sees():
    """One intermediate value per epoch, COMPLETE with the final, PRUNED for a stop, and
    a paused trial RUNNING until the end of the search (then PRUNED, never resumed)."""
    pool = line_pool(6)
    study = sampled.SampledStudy(pool.configs, sampled.pool_space(pool.configs), "max", 1)
    seen_paused: list = []

    class Watch(PauseThenStop):
        def on_end(self, trial, epoch, state):
            if trial == 1 and epoch == 2:
                seen_paused.append(study.optuna.trials[study.trials[1].number].state)

    result = simulate(pool.curves, [], 2, Watch(), params=pool.configs, study=study)
    frozen = {n: study.optuna.trials[t.number] for n, t in study.trials.items()}
    assert len(frozen) == 6 and sorted(result.epochs_done) == list(range(6))
    assert frozen[2].state is OptunaState.PRUNED and list(frozen[2].intermediate_values) == [1]
    assert frozen[1].state is OptunaState.PRUNED
    assert list(frozen[1].intermediate_values) == [1, 2]
    for n in (0, 3, 4, 5):
        assert frozen[n].state is OptunaState.COMPLETE
        assert frozen[n].value == pytest.approx(pool.curves[n].values[-1])
        assert list(frozen[n].intermediate_values) == [1, 2, 3, 4]
    # Trial 1 was paused, left RUNNING, before the end pruned it.
    assert seen_paused[0] is OptunaState.RUNNING


def test_tpe_proposes_the_best_region_sooner_than_a_random_order():
    """On a pool whose final is a function of its one hyperparameter, the sampler, which
    learns from the study, starts the best configuration earlier than the seeded orders
    do (over five seeds, the median start position)."""
    pool = line_pool(60)
    best = pool.best()
    tpe, order = [], []
    for seed in range(5):
        study = sampled.SampledStudy(pool.configs, sampled.pool_space(pool.configs), "max",
                                     seed)
        result = simulate(pool.curves, [], 2, NoPruning(), params=pool.configs, study=study)
        tpe.append(study.order.index(best))
        order.append(list(np.random.default_rng([seed, 1]).permutation(60)).index(best))
        assert result.starts[0][1] == study.order[0]
    assert np.median(tpe) < np.median(order) / 2


def test_run_all_with_the_sampler_records_it_and_when_a_hit_started():
    rows, _ = policies.run_all(["synthetic"], [0], ["none"], 40, 2, None, log=lambda s: None,
                               sampler="tpe")
    (row,) = rows
    assert row["sampler"] == "tpe" and row["hit"]
    assert 1 <= row["hit_started"] <= 40
    fixed, _ = policies.run_all(["synthetic"], [0], ["none"], 40, 2, None,
                                log=lambda s: None)
    pool = lcbench.load_pool("synthetic", 40, 0, None)
    order = list(np.random.default_rng([0, 1]).permutation(40))
    first = next(i for i, t in enumerate(order, 1)
                 if pool.objective.hits(pool.finals()[t], pool.best_final()))
    assert fixed[0]["sampler"] == "order" and fixed[0]["hit_started"] == first


def test_an_unknown_sampler_is_an_error_naming_it(capsys):
    with pytest.raises(ValueError, match="sampler.*'bogus'"):
        policies.run_all(["synthetic"], [0], ["none"], 10, 2, None, sampler="bogus")
    with pytest.raises(SystemExit) as exit_info:
        policies.main(["--tasks", "synthetic", "--sampler", "bogus"])
    assert exit_info.value.code == 2
    assert "--sampler" in capsys.readouterr().err


def test_declared_space_reads_the_surrogates_numeric_hyperparameters(tmp_path):
    folder = tmp_path / "lcbench_surrogate"
    folder.mkdir()
    (folder / "config_space.json").write_text(json.dumps({"hyperparameters": [
        {"name": "OpenML_task_id", "type": "categorical", "choices": ["3945"]},
        {"name": "epoch", "type": "uniform_int", "log": False, "lower": 1, "upper": 52},
        {"name": "batch_size", "type": "uniform_int", "log": True, "lower": 16,
         "upper": 512},
        {"name": "max_dropout", "type": "uniform_float", "log": False, "lower": 0.0,
         "upper": 1.0}]}))
    assert lcbench.declared_space(tmp_path) == {"batch_size": (16.0, 512.0, True),
                                               "max_dropout": (0.0, 1.0, False)}


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.timeout(60)
def test_the_command_line_runs_with_the_sampler_and_says_so(tmp_path):
    import pandas as pd

    out = tmp_path / "out"
    assert policies.main(["--tasks", "synthetic", "--quick", "--sampler", "tpe",
                          "--policies", "none", "cost_aware", "--spot-rate", "0",
                          "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "proposed by TPE from the study" in summary
    assert "first hitting configuration started" in summary
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["sampler"]) == {"tpe"} and runs["hit_started"].notna().all()
