"""The policy benchmark: its figures, the peers, the command line and the data loaders.

No real benchmark data is needed: pools are hand-made or synthetic, and the loaders read
tiny fixtures built here in the real formats (LCBench parquet files, a YAHPO-style ONNX
surrogate with its JSON files).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import lcbench, peers, policies
from benchmarks.lcbench import Pool
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.none import NoPruning
from hpsearch.simulate import Curve, simulate

HOUR = 3600.0


def money(seconds: float) -> float:
    return seconds * policies.PRICE_PER_HOUR / HOUR


class StopAt(NoPruning):
    """Stops the trials of ``at`` (trial -> epoch) after that epoch."""

    def __init__(self, at: dict[int, int]):
        self.at = at

    def on_result(self, trial, epoch, value):
        return Verdict(Decision.STOP, "test") if self.at.get(trial) == epoch else CONTINUE


def starts(result) -> list[tuple[int, float]]:
    """``(trial, time)`` of every start, in start order."""
    return [(trial, at) for at, trial in result.starts]


# ---------------------------------------------------------------------------------------
# run_metrics on a hand-made pool


def three_curve_pool(final_2: float) -> Pool:
    """Trial 1 is the pool's best (90 after 40 s); trial 2 (fast) ends at ``final_2``.

    On 2 workers in order 0, 1, 2 without pruning: trial 0 is busy 0-18 s, trial 1 0-40 s,
    trial 2 18-28 s.
    """
    curves = [Curve((50.0, 60.0), (10.0, 18.0)),
              Curve((70.0, 90.0), (20.0, 40.0)),
              Curve((80.0, final_2), (5.0, 10.0))]
    return Pool("hand", curves, [{"id": i} for i in range(3)])


@pytest.mark.parametrize(
    "final_2, t_hit",
    [(89.6, 28.0),  # 0.4 pp below the best: trial 2 hits at 28 s
     (89.5, 28.0),  # exactly best - 0.5 pp still hits
     (89.4, 40.0)],  # too far: the hit is trial 1 itself, at 40 s
)
def test_run_metrics_hit_money_regret_and_oracle(final_2, t_hit):
    pool = three_curve_pool(final_2)
    result = simulate(pool.curves, [0, 1, 2], 2, NoPruning())
    assert result.completed == {0: 18.0, 2: 28.0, 1: 40.0}
    m = policies.run_metrics(pool, result)
    # Busy worker time until the hit, the epochs in flight included.
    busy_to_hit = {28.0: 18 + 28 + 10, 40.0: 18 + 40 + 10}[t_hit]
    assert m["hit"] is True
    assert m["money_to_hit"] == pytest.approx(money(busy_to_hit))
    assert m["money"] == pytest.approx(money(18 + 40 + 10))
    assert m["regret_pp"] == pytest.approx(0.0)
    assert m["x_oracle"] == pytest.approx(busy_to_hit / 40.0)  # the best alone: 40 s
    # The trial that hit started when trial 0 freed a worker (18 s), or at once.
    assert m["hit_start_x_oracle"] == pytest.approx({28.0: 18.0, 40.0: 0.0}[t_hit] / 40.0)
    assert m["wasted"] == 0.0
    assert m["trained_fully"] == 3
    assert m["epochs"] == 6
    assert m["sim_hours"] == pytest.approx(40.0 / HOUR)


def test_run_metrics_when_the_policy_stops_the_best_trial():
    pool = three_curve_pool(85.0)
    result = simulate(pool.curves, [0, 1, 2], 2, StopAt({1: 1}))  # trial 1 stops at 20 s
    m = policies.run_metrics(pool, result)
    assert m["hit"] is False
    assert m["money_to_hit"] is None and m["x_oracle"] is None
    assert m["hit_start_x_oracle"] is None
    assert m["regret_pp"] == pytest.approx(90.0 - 85.0)  # best fully trained: trial 2
    assert m["money"] == pytest.approx(money(18 + 20 + 10))
    assert m["wasted"] == pytest.approx(20 / 48)
    assert m["trained_fully"] == 2
    assert m["epochs"] == 5


def test_the_money_to_the_hit_is_broken_down_by_true_rank_and_depth():
    # Hit at 28 s (trial 2 ends 0.4 pp below the best). By then trial 0 (poor) ran both
    # epochs in 18 s, trial 1 (the best: the pool's best quarter) one of two epochs in
    # the 28 s it was busy, trial 2 (poor) both in 10 s: 56 s in all.
    pool = three_curve_pool(89.6)
    m = policies.run_metrics(pool, simulate(pool.curves, [0, 1, 2], 2, NoPruning()))
    shares = {k: m[k] for k in policies.BREAKDOWN_KEYS}
    assert shares == pytest.approx({**dict.fromkeys(policies.BREAKDOWN_KEYS, 0.0),
                                    "to_hit_good_tried": 28 / 56,
                                    "to_hit_poor_run": 28 / 56})
    # A trial looked at (one epoch of ten, then stopped) counts where it stopped.
    curves = [Curve(tuple(range(10)), tuple(float(e + 1) for e in range(10))),
              Curve(tuple(range(1, 11)), tuple(float(e + 1) for e in range(10)))]
    pool = Pool("looked", curves, [{"id": i} for i in range(2)])
    m = policies.run_metrics(pool, simulate(pool.curves, [0, 1], 1, StopAt({0: 1})))
    assert m["to_hit_poor_looked_at"] == pytest.approx(1 / 11)
    assert m["to_hit_good_run"] == pytest.approx(10 / 11)
    # No hit: nothing to break down.
    pool = three_curve_pool(85.0)
    m = policies.run_metrics(pool, simulate(pool.curves, [0, 1, 2], 2, StopAt({1: 1})))
    assert all(m[k] is None for k in policies.BREAKDOWN_KEYS)


def test_run_metrics_when_nothing_is_trained_fully():
    pool = three_curve_pool(85.0)
    result = simulate(pool.curves, [0, 1, 2], 3, StopAt({0: 1, 1: 1, 2: 1}))
    m = policies.run_metrics(pool, result)
    assert m["hit"] is False and m["trained_fully"] == 0
    assert m["regret_pp"] == pytest.approx(90.0)  # the whole best value
    assert m["wasted"] == pytest.approx(1.0)


def test_anytime_points_are_money_and_best_so_far_in_time_order():
    pool = three_curve_pool(89.6)
    result = simulate(pool.curves, [0, 1, 2], 2, NoPruning())
    points = policies.anytime(pool, result)
    assert [acc for _, acc in points] == [60.0, 89.6, 90.0]
    assert [m for m, _ in points] == pytest.approx(
        [money(18 + 18), money(18 + 28 + 10), money(68)])


# ---------------------------------------------------------------------------------------
# The peers on a synthetic pool


@pytest.fixture(scope="module")
def pool40() -> Pool:
    return lcbench.synthetic_pool(40, seed=3)


def run_peer(pool: Pool, name: str, seed: int = 3, **options):
    scheduler = peers.make(name, max_epochs=lcbench.EPOCHS, n_trials=len(pool.curves),
                           seed=seed, **options)
    order = [int(i) for i in np.random.default_rng([seed, 1]).permutation(len(pool.curves))]
    return scheduler, simulate(pool.curves, order, 4, scheduler)


@pytest.mark.parametrize("name", peers.PEERS)
def test_every_peer_searches_the_pool(pool40, name):
    scheduler, result = run_peer(pool40, name)
    assert set(result.epochs_done) == set(range(40))  # every configuration started
    assert result.completed, "something must be trained to the end"
    assert all(result.epochs_done[t] == lcbench.EPOCHS for t in result.completed)
    m = policies.run_metrics(pool40, result)
    assert m["money"] > 0 and m["regret_pp"] >= 0


@pytest.mark.parametrize("name", peers.PEERS)
def test_each_peer_is_named_by_its_key(name):
    policy = peers.make(name, max_epochs=lcbench.EPOCHS, n_trials=40, seed=0)
    if not hasattr(policy, "on_result"):  # made with the run's accountant
        policy = simulate([], [], 1, policy).core.policy
    assert policy.name == name


def test_unknown_peer_is_an_error():
    with pytest.raises(ValueError, match="--policies: unknown policy.*grid-of-dreams"):
        peers.make("grid-of-dreams", max_epochs=5, n_trials=3, seed=0)


def test_an_unknown_peer_fails_before_any_run(tmp_path, capsys):
    code = policies.main(["--quick", "--tasks", "synthetic", "--policies", "none", "asha",
                          "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--policies: unknown policy (got 'asha')" in err and "ray-asha" in err
    assert not (tmp_path / "out").exists()


def test_no_pruning_trains_everything_fully(pool40):
    _, result = run_peer(pool40, "none")
    assert set(result.completed) == set(range(40))
    assert result.busy_s() == pytest.approx(sum(c.cum_time_s[-1] for c in pool40.curves))
    assert policies.run_metrics(pool40, result)["regret_pp"] == 0


@pytest.mark.parametrize("k, top", [(3, 3), (1, 2)])
def test_i_epoch_pauses_at_k_and_finishes_the_top_best_first(pool40, k, top):
    scheduler, result = run_peer(pool40, f"i-epoch-{k}", i_epoch_top=top)
    pauses = [(trial, epoch) for _, trial, epoch, _, d in result.reports
              if d is Decision.PAUSE]
    assert sorted(pauses) == [(t, k) for t in range(40)]  # each once, at epoch k
    at_k = {trial: value for _, trial, epoch, value, _ in result.reports if epoch == k}
    best_first = sorted(at_k, key=lambda t: -at_k[t])[:top]
    assert set(result.completed) == set(best_first)
    assert {t: result.epochs_done[t] for t in result.epochs_done if t not in best_first} \
        == {t: k for t in range(40) if t not in best_first}
    resumed = starts(result)[40:]
    assert [t for t, _ in resumed] == best_first
    # They resume from epoch k + 1 once every configuration has paused.
    last_pause = max(t for t, _, _, _, d in result.reports if d is Decision.PAUSE)
    assert all(at == last_pause for _, at in resumed)
    for t in best_first:
        assert [(s.first_epoch, s.last_epoch) for s in result.segments if s.trial == t] \
            == [(1, k), (k + 1, lcbench.EPOCHS)]


def test_i_epoch_default_top_is_a_twentieth(pool40):
    _, result = run_peer(pool40, "i-epoch-3")
    assert len(result.completed) == 40 // 20


def test_ray_asha_stops_some_trials(pool40):
    _, result = run_peer(pool40, "ray-asha")
    early = {trial for _, trial, epoch, _, d in result.reports
             if d is Decision.STOP and epoch < lcbench.EPOCHS}
    assert early
    assert 0 < len(result.completed) < 40
    assert early.isdisjoint(result.completed)
    # Grace period 1, reduction factor 3: rungs at 1, 3, 9, 27 epochs.
    assert {result.epochs_done[t] for t in early} <= {1, 3, 9, 27}


@pytest.mark.parametrize("name", ["optuna-median", "optuna-hyperband"])
def test_optuna_pruners_are_deterministic(pool40, name):
    _, first = run_peer(pool40, name, seed=5)
    _, second = run_peer(pool40, name, seed=5)
    assert first.reports == second.reports
    assert any(d is Decision.STOP for *_, d in first.reports)
    assert 0 < len(first.completed) < 40


# ---------------------------------------------------------------------------------------
# The command line


RUN_COLUMNS = ["task", "seed", "policy", "market", "hit", "money_to_hit", "regret_pp",
               "money", "x_oracle", "wasted", "x_none", "objective", "group", "pred_n",
               "pred_in"]


# ---------------------------------------------------------------------------------------
# The objectives' hit definitions


def test_accuracy_hits_within_half_a_point_of_the_best():
    acc = lcbench.OBJECTIVES["acc"]
    assert (acc.metric, acc.mode) == ("val_accuracy", "max")
    assert acc.hit_target(90.0) == pytest.approx(89.5)
    assert acc.hits(89.5, 90.0) and acc.hits(90.0, 90.0) and not acc.hits(89.49, 90.0)
    assert acc.regret(88.0, 90.0) == pytest.approx(2.0)


def test_loss_hits_within_two_percent_of_the_best():
    loss = lcbench.OBJECTIVES["loss"]
    assert (loss.metric, loss.mode) == ("val_cross_entropy", "min")
    assert loss.hit_target(0.5) == pytest.approx(0.51)
    assert loss.hits(0.51, 0.5) and loss.hits(0.5, 0.5) and not loss.hits(0.5101, 0.5)
    assert loss.regret(0.55, 0.5) == pytest.approx(10.0)  # percent of the best loss


def test_run_metrics_on_a_loss_pool():
    curves = [Curve((2.0, 0.50), (10.0, 18.0)),  # the best loss
              Curve((1.0, 0.505), (5.0, 10.0)),  # within 2%: a hit, sooner
              Curve((1.0, 0.60), (5.0, 8.0))]
    pool = Pool("hand", curves, [{}] * 3, lcbench.OBJECTIVES["loss"])
    assert pool.best() == 0 and pool.best_final() == pytest.approx(0.50)
    result = simulate(pool.curves, [0, 1, 2], 3, NoPruning())
    m = policies.run_metrics(pool, result)
    assert m["hit"] is True and m["regret_pp"] == 0.0
    assert m["money_to_hit"] == pytest.approx(money(10 + 10 + 8))  # at 10 s
    stopped = simulate(pool.curves, [0, 1, 2], 3, StopAt({0: 1, 1: 1}))
    m = policies.run_metrics(pool, stopped)
    assert m["hit"] is False
    assert m["regret_pp"] == pytest.approx(20.0)  # 0.60 against 0.50


def test_pools_of_both_objectives_share_configurations_and_times():
    acc = lcbench.load_pool("synthetic", 20, 1, None, "acc")
    loss = lcbench.load_pool("synthetic", 20, 1, None, "loss")
    assert acc.configs == loss.configs
    assert [c.cum_time_s for c in acc.curves] == [c.cum_time_s for c in loss.curves]
    assert acc.best() == loss.best()  # the same ranking, reversed, in other units


def test_ray_hyperband_pauses_and_resumes(pool40):
    _, result = run_peer(pool40, "ray-hyperband")
    paused = {trial for _, trial, _, _, d in result.reports if d is Decision.PAUSE}
    assert paused
    started = [t for _, t in result.starts]
    resumed = {t for t in started if started.count(t) > 1}
    assert resumed and resumed <= paused
    assert result.completed


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.timeout(60)
def test_quick_loss_benchmark_reports_groups_and_calibration(tmp_path):
    import pandas as pd

    assert policies.main(["--quick", "--tasks", "synthetic", "--objective", "loss",
                          "--policies", "none", "ray-asha-g5", "cost_aware",
                          "--spot-rate", "0", "--out", str(tmp_path)]) == 0
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert set(RUN_COLUMNS) <= set(runs.columns)
    assert set(runs["objective"]) == {"loss"} and set(runs["group"]) == {"synthetic"}
    mine = runs.set_index("policy").loc["cost_aware"]
    assert mine["pred_n"] > 0 and 0 <= mine["pred_in"] <= mine["pred_n"]
    assert runs.set_index("policy").loc["none"]["pred_n"] != runs.set_index(
        "policy").loc["none"]["pred_n"]  # NaN: no predictions
    summary = (tmp_path / "summary.md").read_text()
    assert "Objective loss (val_cross_entropy, min)" in summary
    assert "Task group synthetic:" in summary
    assert "regret (mean)" in summary and "calibration of 80% intervals" in summary
    assert f"of {int(mine['pred_n'])} |" in summary


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.timeout(60)
def test_quick_benchmark_writes_its_results(tmp_path, capsys):
    import pandas as pd

    assert policies.main(["--quick", "--tasks", "synthetic", "--out", str(tmp_path)]) == 0
    runs = pd.read_csv(tmp_path / "runs.csv")
    # One row per policy on demand, then one per policy on spot with preemptions.
    assert list(runs["policy"]) == list(peers.PEERS) * 2
    assert list(runs["market"]) == ["on-demand"] * len(peers.PEERS) + ["spot"] * len(peers.PEERS)
    assert set(RUN_COLUMNS) <= set(runs.columns)
    assert set(runs["task"]) == {"synthetic"} and set(runs["seed"]) == {0}
    assert set(runs["n"]) == {60}
    on_demand = runs[runs["market"] == "on-demand"].set_index("policy")
    none = on_demand.loc["none"]
    assert bool(none["hit"]) and none["x_none"] == pytest.approx(1.0)
    assert none["regret_pp"] == 0 and none["wasted"] == 0
    assert none["preemptions"] == 0 and none["checkpoint_share"] == 0
    spot_none = runs[runs["market"] == "spot"].set_index("policy").loc["none"]
    # A third of the price, plus checkpoints and lost work: cheaper, but not 3x cheaper.
    assert 1 / 3 < spot_none["x_none"] < 1.0
    assert spot_none["checkpoint_share"] > 0
    summary = (tmp_path / "summary.md").read_text()
    assert "| policy | hits |" in summary
    assert "On spot at a third of the price" in summary
    assert "Where the money to the hit went" in summary
    hit_rows = runs[runs["hit"].astype(bool)]
    assert np.allclose(hit_rows[list(policies.BREAKDOWN_KEYS)].sum(axis=1), 1.0)
    for name in peers.PEERS:
        assert f"| {name} | " in summary, name
    png = (tmp_path / "accuracy_vs_money.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert "wrote" in capsys.readouterr().out


def test_benchmark_without_data_fails_cleanly(tmp_path, capsys):
    code = policies.main(["--tasks", "fashion-mnist", "--seeds", "0", "--policies", "none",
                          "--data", str(tmp_path / "absent"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "HPSEARCH_BENCHDATA" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------
# Loaders: load_pool, the real LCBench replay and the surrogate, on generated fixtures


def test_load_pool_without_data_names_the_ways_to_give_it(tmp_path):
    for data in (None, tmp_path / "absent"):
        for task in ("fashion-mnist", lcbench.REAL_TASK):
            with pytest.raises(FileNotFoundError) as err:
                lcbench.load_pool(task, 5, 0, data)
            assert "--data" in str(err.value) and "HPSEARCH_BENCHDATA" in str(err.value)


def test_synthetic_pool_needs_no_data_and_is_seeded():
    a = lcbench.load_pool("synthetic", 12, 4, None)
    b = lcbench.synthetic_pool(12, 4)
    assert a.task == "synthetic" and len(a.curves) == 12 == len(a.configs)
    assert a.curves == b.curves
    assert lcbench.synthetic_pool(12, 5).curves != a.curves
    for c in a.curves:
        assert c.epochs == lcbench.EPOCHS
        assert all(0 <= v <= 100 for v in c.values)
        assert list(c.cum_time_s) == sorted(c.cum_time_s) and c.cum_time_s[0] > 0


def test_default_data_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSEARCH_BENCHDATA", str(tmp_path))
    assert lcbench.default_data_dir() == tmp_path


#: Trial ids of the real-format fixture (not 0..n-1: the loader must use the labels).
REAL_TRIALS = list(range(100, 110))
REAL_EPOCHS = 5


def real_acc(trial: int, epoch: int) -> float:
    return 50.0 + (trial - 100) + epoch / 10


@pytest.fixture
def real_data(tmp_path) -> Path:
    """A tiny LCBench-format task: config.parquet.gzip and metrics.parquet.gzip."""
    import pandas as pd

    folder = tmp_path / "lcbench_real_blood_transfusion"
    folder.mkdir()
    configs = pd.DataFrame({"batch_size": [1000 + t for t in REAL_TRIALS],
                            "learning_rate": [1e-3 * (t - 99) for t in REAL_TRIALS],
                            "optimizer": ["sgd"] * len(REAL_TRIALS)},
                           index=pd.Index(REAL_TRIALS, name="trial"))
    configs.to_parquet(folder / "config.parquet.gzip", compression="gzip")
    rows = []
    for t in REAL_TRIALS:
        times = [0.0, 1.0, 2.0, 3.0, 4.0]
        if t == 103:
            times = [0.0, 2.0, 1.5, 3.5, 3.0]  # dips twice
        for e in range(REAL_EPOCHS):
            rows.append({"trial": t, "epoch": e, "Train/val_accuracy": real_acc(t, e),
                         "Train/loss": 1.0, "time": times[e]})
    metrics = pd.DataFrame(rows).set_index(["trial", "epoch"])
    metrics = metrics.sample(frac=1.0, random_state=0)  # stored out of order
    metrics.to_parquet(folder / "metrics.parquet.gzip", compression="gzip")
    return tmp_path


def test_real_pool_replays_the_chosen_curves_exactly(real_data):
    pool = lcbench.real_pool(real_data, 4, seed=0)
    assert pool.task == lcbench.REAL_TASK
    assert len(pool.curves) == 4 == len(pool.configs)
    trials = [cfg["batch_size"] - 1000 for cfg in pool.configs]
    assert len(set(trials)) == 4 and set(trials) <= set(REAL_TRIALS)
    assert trials == sorted(trials)
    for trial, cfg, c in zip(trials, pool.configs, pool.curves):
        assert cfg["optimizer"] == "sgd"
        assert cfg["learning_rate"] == pytest.approx(1e-3 * (trial - 99))
        # The logs' epoch 0 (the untrained model) is dropped: the curve starts at epoch 1.
        assert c.values == pytest.approx([real_acc(trial, e) for e in range(1, REAL_EPOCHS)])
        assert c.epochs == REAL_EPOCHS - 1


def test_real_pool_makes_time_non_decreasing(real_data):
    pool = lcbench.real_pool(real_data, len(REAL_TRIALS), seed=0)
    by_trial = {cfg["batch_size"] - 1000: c for cfg, c in zip(pool.configs, pool.curves)}
    assert sorted(by_trial) == REAL_TRIALS  # n = all: each once
    assert list(by_trial[103].cum_time_s) == [2.0, 2.0, 3.5, 3.5]
    assert list(by_trial[100].cum_time_s) == [1.0, 2.0, 3.0, 4.0]
    for c in pool.curves:
        assert list(c.cum_time_s) == sorted(c.cum_time_s)
        assert c.cum_time_s[0] > 0  # a zero first time would make a free epoch


def test_real_pool_sampling_is_seeded_and_without_replacement(real_data):
    def chosen(n, seed):
        pool = lcbench.real_pool(real_data, n, seed)
        return [cfg["batch_size"] - 1000 for cfg in pool.configs]

    assert chosen(5, 1) == chosen(5, 1)
    draws = {tuple(chosen(5, seed)) for seed in range(6)}
    assert len(draws) > 1
    assert all(len(set(d)) == 5 for d in draws)
    with pytest.raises(ValueError):
        lcbench.real_pool(real_data, len(REAL_TRIALS) + 1, seed=0)
    # load_pool dispatches the real task to it.
    assert lcbench.load_pool(lcbench.REAL_TASK, 5, 1, real_data).configs == \
        lcbench.real_pool(real_data, 5, 1).configs


#: Our own hyperparameter ranges for the surrogate fixture (the JSON shape is YAHPO's).
SPACE = {
    "batch_size": ("uniform_int", True, 32, 256),
    "learning_rate": ("uniform_float", True, 1e-3, 1e-1),
    "max_dropout": ("uniform_float", False, 0.0, 0.5),
    "max_units": ("uniform_int", True, 64, 512),
    "momentum": ("uniform_float", False, 0.5, 0.9),
    "num_layers": ("uniform_int", False, 1, 4),
    "weight_decay": ("uniform_float", False, 1e-4, 1e-2),
}
#: The surrogate's x_cont order, as the data's README states it.
ORDER = ("epoch", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers",
         "max_units", "max_dropout")
#: Accuracy of the fixture model: these weights on x_cont (in ORDER) + 0.5 x the task code.
ACC_WEIGHTS = (1.0, 0.01, 100.0, 10.0, 1000.0, 2.0, 0.001, 5.0)
CODES = {"#na#": 0, "7593": 1, "189908": 2}


def surrogate_time(epoch: int, batch_size: float) -> float:
    """The fixture's raw time output: dips to near zero at epoch 3."""
    return abs(epoch - 3 + 0.001 * batch_size)


def surrogate_acc(cfg: dict, epoch: int, code: int) -> float:
    x = [epoch if k == "epoch" else cfg[k] for k in ORDER]
    return sum(w * v for w, v in zip(ACC_WEIGHTS, x)) + 0.5 * code


@pytest.fixture
def surrogate_data(tmp_path) -> Path:
    """A YAHPO-lcbench-shaped folder: a small ONNX model, encoding.json, config_space.json.

    The model: output = |concat(x_cont, float(x_cat)) @ W + b| with column 0 (time) =
    |epoch - 3 + 0.001 batch_size| and column 1 (accuracy) = ACC_WEIGHTS . x_cont +
    0.5 code; the other four outputs are zero.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((9, 6), dtype=np.float32)
    w[0, 0], w[1, 0] = 1.0, 0.001
    w[:8, 1] = ACC_WEIGHTS
    w[8, 1] = 0.5
    b = np.zeros(6, dtype=np.float32)
    b[0] = -3.0
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x_cat"], ["cat_f"], to=TensorProto.FLOAT),
         helper.make_node("Concat", ["x_cont", "cat_f"], ["x"], axis=1),
         helper.make_node("MatMul", ["x", "W"], ["y"]),
         helper.make_node("Add", ["y", "b"], ["z"]),
         helper.make_node("Abs", ["z"], ["output"])],
        "lcbench_fixture",
        [helper.make_tensor_value_info("x_cat", TensorProto.INT32, ["batch_size", 1]),
         helper.make_tensor_value_info("x_cont", TensorProto.FLOAT, ["batch_size", 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch_size", 6])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    folder = tmp_path / "lcbench_surrogate"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx")
    (folder / "encoding.json").write_text(json.dumps({"OpenML_task_id": CODES}))
    hyper = [{"name": "OpenML_task_id", "type": "categorical",
              "choices": [c for c in CODES if c != "#na#"], "default": "7593",
              "probabilities": None},
             {"name": "epoch", "type": "uniform_int", "log": False, "lower": 1,
              "upper": 52, "default": 26}]
    for name, (kind, log, low, high) in SPACE.items():
        hyper.append({"name": name, "type": kind, "log": log, "lower": low, "upper": high,
                      "default": low})
    (folder / "config_space.json").write_text(json.dumps(
        {"hyperparameters": hyper, "conditions": [], "forbiddens": [],
         "python_module_version": "0.4.18", "json_format_version": 0.2}))
    return tmp_path


CONFIGS = [
    {"batch_size": 64.0, "learning_rate": 0.01, "momentum": 0.6, "weight_decay": 0.002,
     "num_layers": 3.0, "max_units": 300.0, "max_dropout": 0.25},
    {"batch_size": 200.0, "learning_rate": 0.05, "momentum": 0.85, "weight_decay": 0.0005,
     "num_layers": 1.0, "max_units": 80.0, "max_dropout": 0.1},
]


def test_x_cont_order_is_the_readme_order():
    assert lcbench.X_CONT == ORDER


def test_surrogate_feeds_x_cont_in_order_and_the_task_code(surrogate_data):
    s = lcbench.Surrogate(surrogate_data / "lcbench_surrogate")
    curves = s.curves("189908", CONFIGS)
    assert len(curves) == 2
    for cfg, c in zip(CONFIGS, curves):
        assert c.epochs == lcbench.EPOCHS
        expected = [surrogate_acc(cfg, e, CODES["189908"]) for e in range(1, 53)]
        assert c.values == pytest.approx(expected, rel=1e-5)
    other = s.curves("7593", CONFIGS[:1])[0]
    assert other.values[0] == pytest.approx(curves[0].values[0] - 0.5, rel=1e-5)


def test_surrogate_time_is_a_running_maximum(surrogate_data):
    s = lcbench.Surrogate(surrogate_data / "lcbench_surrogate")
    for cfg, c in zip(CONFIGS, s.curves("7593", CONFIGS)):
        raw = [max(surrogate_time(e, cfg["batch_size"]), 1e-3) for e in range(1, 53)]
        assert c.cum_time_s == pytest.approx(list(np.maximum.accumulate(raw)), rel=1e-5)
        assert list(c.cum_time_s) == sorted(c.cum_time_s)
        # The raw output dipped: epochs 2-4 are flat at the epoch-1 time.
        assert c.cum_time_s[1] == c.cum_time_s[0] and c.epoch_s(3) == 0.0


def test_surrogate_rejects_an_unknown_task(surrogate_data):
    s = lcbench.Surrogate(surrogate_data / "lcbench_surrogate")
    with pytest.raises(ValueError, match="unknown OpenML task id '12345'"):
        s.curves("12345", CONFIGS)


def test_surrogate_samples_its_space(surrogate_data):
    s = lcbench.Surrogate(surrogate_data / "lcbench_surrogate")
    assert set(s.space) == set(SPACE)  # neither the task id nor the epoch
    configs = s.sample(2000, np.random.default_rng(0))
    assert configs == s.sample(2000, np.random.default_rng(0))
    for name, (kind, log, low, high) in SPACE.items():
        values = np.array([cfg[name] for cfg in configs])
        assert values.min() >= low and values.max() <= high, name
        if kind == "uniform_int":
            assert np.all(values == np.round(values)), name
        middle = math.sqrt(low * high) if log else (low + high) / 2
        assert 0.4 < np.mean(values < middle) < 0.6, name  # log-uniform where it says


def test_surrogate_draws_every_integer_equally_often(surrogate_data):
    # "Drawn uniformly": num_layers in 1..4 takes each value a quarter of the time (the
    # ends included, as ConfigSpace's uniform integers do).
    s = lcbench.Surrogate(surrogate_data / "lcbench_surrogate")
    layers = np.array([cfg["num_layers"] for cfg in s.sample(4000, np.random.default_rng(1))])
    shares = {v: float(np.mean(layers == v)) for v in (1, 2, 3, 4)}
    assert all(abs(share - 0.25) < 0.03 for share in shares.values()), shares


def test_surrogate_pool_by_task_name(surrogate_data):
    pool = lcbench.load_pool("fashion-mnist", 3, 7, surrogate_data)
    assert pool.task == "fashion-mnist"
    assert len(pool.curves) == 3 == len(pool.configs)
    code = CODES[lcbench.SURROGATE_TASKS["fashion-mnist"]]
    for cfg, c in zip(pool.configs, pool.curves):
        assert c.values[0] == pytest.approx(surrogate_acc(cfg, 1, code), rel=1e-5)
    again = lcbench.surrogate_pool(surrogate_data, "fashion-mnist", 3, 7)
    assert again.configs == pool.configs and again.curves == pool.curves
    by_id = lcbench.surrogate_pool(surrogate_data, "189908", 3, 7)
    assert by_id.configs == pool.configs


def test_the_sensitivity_benchmark_varies_constants_that_exist_and_restores_them():
    from benchmarks import sensitivity

    for module, name, half, double in sensitivity.VARIANTS:
        default = getattr(module, name)
        assert half(default) != default and double(default) != default, name
        assert type(half(default)) is type(default), name
    assert sensitivity.main(["--only", "NO_SUCH_CONSTANT"]) == 2
    # The curve sampler's constants are varied with --sampler curve only.
    assert sensitivity.main(["--only", "N_TREES"]) == 2


def test_the_curve_samplers_sensitivity_varies_constants_that_exist_and_are_read_when_used():
    from benchmarks import sensitivity

    for module, name, half, double in (sensitivity.MODEL_VARIANTS
                                       + sensitivity.CANDIDATE_VARIANTS
                                       + sensitivity.PRIOR_VARIANTS):
        default = getattr(module, name)
        assert double(default) != default, name
        assert type(half(default)) is type(default) is type(double(default)), name
    # The prior's constants are varied only with a prior, and a prior only with the
    # curve sampler.
    assert sensitivity.main(["--sampler", "curve", "--only", "PRIOR_WEIGHT"]) == 2
    assert sensitivity.main(["--prior", "loto", "--only", "PRIOR_WEIGHT"]) == 2
    # Read where used, not bound as a default when the module loaded: a changed value
    # reaches the next proposal.
    from hpsearch.model import forest

    fitted = forest.Forest.fit(np.arange(20.0).reshape(-1, 1), np.arange(20.0),
                               np.arange(20), seed=0, n_trees=4)
    saved = forest.N_SAMPLES
    forest.N_SAMPLES = 5
    try:
        assert fitted.plausible(np.zeros((3, 1))).shape == (3, 5)
    finally:
        forest.N_SAMPLES = saved


@pytest.mark.slow  # several curve-sampler searches; CI runs it
def test_the_candidate_sensitivity_measures_the_gap_and_restores_the_constant(
        tmp_path, capsys, monkeypatch):
    from benchmarks import sensitivity
    from hpsearch.model import planner

    monkeypatch.setattr(sensitivity, "TOY_SEEDS", (0, 1))
    monkeypatch.setattr(sensitivity, "TOY_TRIALS", 12)
    assert sensitivity.toy_search(0) == sensitivity.toy_search(0) >= 0.0
    out = tmp_path / "curve.md"
    default = planner.LOCAL_STEP
    assert sensitivity.main(["--sampler", "curve", "--only", "LOCAL_STEP",
                             "--out", str(out)]) == 0
    assert planner.LOCAL_STEP == default
    printed = capsys.readouterr().out
    assert f"planner.LOCAL_STEP = {default / 2!r}" in printed
    assert f"planner.LOCAL_STEP = {default * 2!r}" in printed
    table = out.read_text()
    assert "| `planner.LOCAL_STEP` | `0.08` |" in table and "after 12 trials" in table
    assert "for scale, random search 0." in table and "Optuna's TPE 0." in table


@pytest.mark.slow  # seven small curve-sampler searches and four prior studies; CI runs it
def test_the_prior_sensitivity_searches_from_a_prior_and_restores_the_constant(
        tmp_path, capsys, monkeypatch):
    from benchmarks import lcbench, sensitivity
    from hpsearch.model import freeze_thaw

    # The synthetic pools stand in for the development tasks (their prior: other seeds).
    monkeypatch.setattr(lcbench, "DEV_TASKS", ("synthetic",))
    out = tmp_path / "prior.md"
    default = freeze_thaw.PRIOR_WEIGHT
    seen = []
    real_fit = freeze_thaw.CurveModel._fit_forest

    def fit(self, *args, **kwargs):  # which weight each fit read
        seen.append(freeze_thaw.PRIOR_WEIGHT)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(freeze_thaw.CurveModel, "_fit_forest", fit)
    assert sensitivity.main(["--sampler", "curve", "--prior", "loto", "--only",
                             "PRIOR_WEIGHT", "--objectives", "acc", "--seeds", "0",
                             "--n", "30", "--data", str(tmp_path), "--out", str(out)]) == 0
    assert freeze_thaw.PRIOR_WEIGHT == default
    printed = capsys.readouterr().out
    assert printed.count("prior: searched synthetic") == 4  # built once, shared
    assert f"freeze_thaw.PRIOR_WEIGHT = {default / 2!r}" in printed
    assert f"freeze_thaw.PRIOR_WEIGHT = {default * 2!r}" in printed
    assert {default / 2, default, default * 2} <= set(seen)
    table = out.read_text()
    assert "from a leave-one-task-out prior" in table
    assert f"| `freeze_thaw.PRIOR_WEIGHT` | `{default!r}` |" in table


def test_the_curve_samplers_cost_benchmark_measures_refits_and_reuses(capsys):
    from benchmarks import curve_cost

    assert curve_cost.main(["--trials", "12", "--dims", "2", "--epochs", "6",
                            "--prior-studies", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "12 trials, prior     0 trials" in out and "prior    24 trials (24 used)" in out
    assert "largest:" in out and "of the budget" in out
    row = curve_cost.measure(12, 2, 6, 0, 1)
    assert row["refit_s"] > 0 and row["reuse_s"] >= 0
    assert curve_cost.main(["--trials", "0"]) == 2
