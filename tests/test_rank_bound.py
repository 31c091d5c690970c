"""benchmarks.rank_bound: the rank cut on a (noisy) oracle of the true finals.

Pure and fast: hand-made boards, and the synthetic pool (no benchmark data needed).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import lcbench, rank_bound
from benchmarks.rank_bound import OracleRankPolicy
from hpsearch.pruning.cost_aware import Board, CostAwarePolicy


def board(curves: dict[int, list[float]], mode: str = "max") -> Board:
    b = Board(mode=mode)
    for trial, curve in curves.items():
        for epoch, value in enumerate(curve, start=1):
            b.add(trial, epoch, value)
    return b


#: Ten trials at epoch 5: trial i flat at 0.9 - 0.05 i, except the slow starter 9, last
#: at epoch 5 and best at the end.
CURVES = {i: [0.9 - 0.05 * i] * 5 for i in range(9)}
CURVES[9] = [0.1, 0.15, 0.2, 0.25, 0.3]
FINALS = np.array([0.9 - 0.05 * i for i in range(9)] + [0.99])


def test_the_policys_ranking_key_is_its_score_plus_the_capped_bonus():
    b = board(CURVES)
    policy = CostAwarePolicy("max", 52)
    keys = policy.rank_keys(b, 5)
    assert keys == [pytest.approx(b.ranked_score(t, 5)) for t in b.trials_at[5]]
    assert policy.rank_key(b, 9, 5) == pytest.approx(b.ranked_score(9, 5))
    assert policy.rank_key(b, 9, 6) is None


@pytest.mark.parametrize("mode,scale", [("max", 1.0), ("max", 100.0), ("min", -1.0)])
def test_a_perfect_oracle_keeps_the_slow_starter_the_score_cuts(mode, scale):
    """The cut on the score now stops the slow starter at epoch 5 (rank 10/10); on the
    true final it ranks first: same decisions when the metric is scaled or negated."""
    curves = {t: [scale * v for v in c] for t, c in CURVES.items()}
    b = board(curves, mode)
    sign = 1.0 if mode == "max" else -1.0
    shipped = CostAwarePolicy(mode, 52)
    oracle = OracleRankPolicy(mode, 52, sign * scale * FINALS, np.zeros(10))
    assert not shipped.cut(b, 9, 5).keeps
    cut = oracle.cut(b, 9, 5)
    assert cut.keeps and cut.rank == 1
    assert not oracle.cut(b, 8, 5).keeps  # now the worst final


def test_the_error_is_persistent_seeded_and_in_the_pools_own_spread():
    pool = lcbench.synthetic_pool(40, 0)
    e1 = rank_bound.errors_for(pool, 3, 0.5)
    assert np.array_equal(e1, rank_bound.errors_for(pool, 3, 0.5))
    assert not np.array_equal(e1, rank_bound.errors_for(pool, 4, 0.5))
    assert np.allclose(rank_bound.errors_for(pool, 3, 1.0), 2 * e1)
    assert not rank_bound.errors_for(pool, 3, 0.0).any()
    q1, q3 = np.percentile(pool.finals(), [25, 75])
    z = np.random.default_rng([3, 14]).standard_normal(40)
    assert np.allclose(e1, 0.5 * (q3 - q1) * z)


def test_an_errors_weight_shrinks_to_nothing_at_the_last_epoch():
    b = board({0: [0.5] * 4})
    policy = OracleRankPolicy("max", 4, np.array([0.7]), np.array([0.2]))
    assert policy.rank_key(b, 0, 2) == pytest.approx(0.7 + 0.5 * 0.2)
    assert policy.rank_key(b, 0, 4) == pytest.approx(0.7)
    assert policy.rank_keys(b, 2) == [pytest.approx(0.8)]


def test_spearman_of_a_ranking_with_itself_and_its_reverse():
    a = np.array([0.3, 0.1, 0.7, 0.5])
    assert rank_bound.spearman(a, a) == pytest.approx(1.0)
    assert rank_bound.spearman(a, -a) == pytest.approx(-1.0)


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
def test_a_run_on_the_synthetic_pool_counts_every_variant():
    measured = rank_bound.run("acc", [0.0], [1.0, 2.0], [0], None, 40, 4, log=lambda *_: None,
                              tasks=["synthetic"])
    results = measured["results"]
    assert set(results) == {("score", 1.0), ("score", 2.0), (0.0, 1.0), (0.0, 2.0)}
    for r in results.values():
        assert r["runs"] == 1 and r["hits"] in (0, 1)
        assert len(r["x_none"]) == r["hits"]
        assert all(0.0 <= w < 1.0 for w in r["waited"])
        assert all(0.99 <= b <= 1.0 + 1e-9 for b in r["busy"])
    assert measured["quality"][(0.0, 5)] == pytest.approx(1.0)
    text = rank_bound.table("acc", [0.0], [1.0, 2.0], measured)
    assert "| oracle, sigma 0 | 1.00 / 1.00 / 1.00 |" in text


def _pool(curves: list[list[float]], epoch_s: list[float], mode: str = "max") -> lcbench.Pool:
    from hpsearch.simulate import Curve

    cs = [Curve(values=c, cum_time_s=[s * (e + 1) for e in range(len(c))])
          for c, s in zip(curves, epoch_s)]
    return lcbench.Pool(task="hand", curves=cs,
                        configs=[{} for _ in cs], objective=lcbench.OBJECTIVES[
                            "acc" if mode == "max" else "loss"])


def test_the_idle_floor_is_first_epochs_before_the_hit_then_its_whole_curve():
    """Four 10-epoch configurations; only number 2 hits (90% against 50-60%). In the
    order 0, 1, 2, 3 the floor is the first epochs of 0 and 1 (3 s and 5 s) and all of 2
    (10 x 2 s); the same on a loss (1 - the accuracy as a fraction) with the mode
    flipped."""
    finals = [0.5, 0.6, 0.9, 0.55]
    for mode in ("max", "min"):
        curves = [[100 * f if mode == "max" else 1.0 - f] * 10 for f in finals]
        pool = _pool(curves, [3.0, 5.0, 2.0, 7.0], mode)
        assert rank_bound.hit_trials(pool) == {2}
        assert rank_bound.idle_floor(pool, [0, 1, 2, 3]) == pytest.approx(3 + 5 + 20)
        assert rank_bound.idle_floor(pool, [2, 0, 1, 3]) == pytest.approx(20)


def test_the_idle_floor_takes_the_cheapest_configuration_that_hits():
    """Two hit (0 and 2); 0 is slow (100 s an epoch), so reaching 2 first is cheaper."""
    pool = _pool([[90.0] * 4, [10.0] * 4, [90.0] * 4], [100.0, 1.0, 1.0])
    assert rank_bound.hit_trials(pool) == {0, 2}
    assert rank_bound.idle_floor(pool, [0, 1, 2]) == pytest.approx(100 + 1 + 4)


def test_the_screen_floor_trains_only_the_hits_past_their_first_epoch():
    from hpsearch.simulate import simulate

    pool = _pool([[50.0] * 6, [90.0] * 6, [40.0] * 6, [30.0] * 6], [1.0] * 4)
    result = simulate(pool.curves, [0, 1, 2, 3], 2,
                      rank_bound.ScreenPolicy(rank_bound.hit_trials(pool)))
    assert set(result.completed) == {1}
    assert result.epochs_done == {0: 1, 1: 6, 2: 1, 3: 1}


def test_a_run_reports_both_floors_no_dearer_than_the_policy():
    measured = rank_bound.run("acc", [0.0], [1.0], [0], None, 40, 4, log=lambda *_: None,
                              tasks=["synthetic"])
    floors = measured["floors"]
    assert set(floors) == set(rank_bound.FLOORS)
    for f in floors.values():
        assert f["runs"] == 1 and f["hits"] == 1
    assert floors["screen, idle"]["x_none"][0] <= floors["screen"]["x_none"][0]
    policy = measured["results"][("score", 1.0)]
    if policy["hits"]:
        assert floors["screen"]["x_none"][0] <= policy["x_none"][0]
    text = rank_bound.table("acc", [0.0], [1.0], measured)
    assert "| screen, idle | 1/1 |" in text


@pytest.mark.parametrize("argv,field", [(["--sigmas", "-1"], "--sigmas"),
                                        (["--aggressiveness", "0"], "--aggressiveness"),
                                        (["--data", "/nonexistent/benchdata"], "--data")])
def test_bad_arguments_exit_2_naming_the_field(argv, field, tmp_path, capsys):
    out = tmp_path / "rb.md"
    assert rank_bound.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not out.exists()


def test_sensitivity_names_a_data_folder_that_is_not_there(tmp_path, capsys):
    from benchmarks import sensitivity

    out = tmp_path / "s.md"
    assert sensitivity.main(["--data", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "--data" in capsys.readouterr().err
    assert not out.exists()
