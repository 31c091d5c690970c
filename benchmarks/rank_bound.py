"""Benchmark: how good a forecast the rank cut would need to reach issue 14's money.

`cost_aware` decides who trains on by a rank cut at each epoch: a trial is kept while it
ranks within a share of the trials seen at that epoch. It ranks them on their score now
(plus a capped bonus for still improving). This benchmark asks what that cut would cost
if it ranked on something better: each trial's *true final* (which the benchmark knows)
plus a persistent error, ``sigma`` times the spread (interquartile range) of the pool's
true finals, shrinking linearly to nothing at the last epoch (one normal draw per trial
and seed: a forecast that is wrong about a trial stays wrong about it). Everything else
is the policy as shipped: the schedule, the leader and cost rules, the predictor behind
pauses, stops and resumes. ``sigma = 0`` is a perfect forecast; the ranking on the
score now is the policy itself.

It also says how good the score now is as a forecast, in the same terms: the Spearman
rank correlation, over every configuration of each pool, of the score at epoch 2, 5 and
10 with the true final, against that of the noisy oracle at each ``sigma``.

And it gives two floors no curve-based policy can beat in the benchmark's order, both
with a perfect forecast after one epoch (every configuration is looked at for at least
one epoch, as a curve must be seen before it can be judged): *screen* (the simulator, the
workers kept busy: every configuration that will not hit is stopped after its first
epoch, every one that will is trained to the end) and *screen, idle* (computed: the first
epoch of each configuration before the one that hits, then that one to the end, and no
configuration started after it; the minimum over the configurations that hit).

    python -m benchmarks.rank_bound [--objective acc] [--sigmas 0 0.5 1]
        [--aggressiveness 1 2 4]
        [--seeds 0 1 2 3 4] [--out benchmarks/results/rank_bound.md]

The same pools, orders and workers as ``python -m benchmarks.policies`` on the 13
development tasks; money to the hit as a share of no pruning's (median over the runs that
hit). A measurement of what a predictor would buy, not a policy: the oracle reads the
answers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import lcbench
from benchmarks.policies import publish, run_metrics
from hpsearch.pruning.cost_aware import Board, CostAwarePolicy
from hpsearch.pruning.cost_aware_pruner import CostAwarePruner
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.none import NoPruning
from hpsearch.simulate import simulate

#: The floors (see the module docstring), by name.
FLOORS = ("screen", "screen, idle")

#: The epochs at which the score now is compared with the oracle as a forecast.
CHECK_EPOCHS = (2, 5, 10)


class OracleRankPolicy(CostAwarePolicy):
    """:class:`CostAwarePolicy` whose cut ranks on the true final plus a persistent
    error (see the module docstring); ``finals`` and ``errors`` are in score units
    (sign-adjusted: higher is better), by trial."""

    def __init__(self, mode: str, max_epochs: int, finals: np.ndarray, errors: np.ndarray,
                 aggressiveness: float = 1.0):
        super().__init__(mode, max_epochs, aggressiveness=aggressiveness)
        self.finals, self.errors = finals, errors

    def rank_key(self, board: Board, trial: int, epoch: int) -> float | None:
        if epoch not in board.scores.get(trial, {}):
            return None
        left = max(0.0, 1.0 - epoch / self.max_epochs)
        return float(self.finals[trial] + left * self.errors[trial])

    def rank_keys(self, board: Board, epoch: int) -> list[float]:
        left = max(0.0, 1.0 - epoch / self.max_epochs)
        return [float(self.finals[t] + left * self.errors[t]) for t in board.trials_at[epoch]]


class ScreenPolicy(NoPruning):
    """The *screen* floor: stops after its first epoch every configuration not in
    ``hits`` (the trials whose true final hits); the others train to the end."""

    name = "screen"

    def __init__(self, hits: set[int]):
        self.hits = hits

    def on_result(self, trial: int, epoch: int, value: float) -> Verdict:
        if trial in self.hits:
            return CONTINUE
        return Verdict(Decision.STOP, "screen: will not hit")


def hit_trials(pool: lcbench.Pool) -> set[int]:
    """The configurations of ``pool`` whose true final is a hit."""
    finals, best = pool.finals(), pool.best_final()
    return {i for i, v in enumerate(finals) if pool.objective.hits(v, best)}


def idle_floor(pool: lcbench.Pool, order) -> float:
    """The *screen, idle* floor in busy seconds: min over the configurations j that hit
    of the first epochs of those before j in ``order`` plus j's whole curve (with its
    start-up, as every start pays it)."""
    hits = hit_trials(pool)
    looked = 0.0
    best = float("inf")
    for trial in order:
        curve = pool.curves[trial]
        if trial in hits:
            best = min(best, looked + curve.startup_s + curve.cum_time_s[-1])
        looked += curve.startup_s + curve.epoch_s(1)
        if looked >= best:
            break
    return best


def _iqr(values: np.ndarray) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1) or float(values.max() - values.min()) or 1.0


def errors_for(pool: lcbench.Pool, seed: int, sigma: float) -> np.ndarray:
    """Each configuration's persistent forecast error in score units (seeded)."""
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    spread = _iqr(sign * pool.finals())
    z = np.random.default_rng([seed, 14]).standard_normal(len(pool.curves))
    return sigma * spread * z


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable")
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable")
    return float(np.corrcoef(ra, rb)[0, 1])


def forecast_quality(pool: lcbench.Pool, seed: int, sigmas) -> dict:
    """Spearman of the score at each of CHECK_EPOCHS, and of the noisy oracle there at
    each sigma, with the true final (every configuration of the pool)."""
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    finals = sign * pool.finals()
    max_epochs = max(c.epochs for c in pool.curves)
    out = {}
    for epoch in CHECK_EPOCHS:
        now = sign * np.array([c.values[min(epoch, c.epochs) - 1] for c in pool.curves])
        out[("score", epoch)] = spearman(now, finals)
        for sigma in sigmas:
            left = max(0.0, 1.0 - epoch / max_epochs)
            out[(sigma, epoch)] = spearman(finals + left * errors_for(pool, seed, sigma),
                                           finals)
    return out


def variants(sigmas, knobs) -> list[tuple]:
    """(ranking, aggressiveness): "score" (the policy) and each sigma, at each knob."""
    return [(ranking, knob) for ranking in ("score", *sigmas) for knob in knobs]


def timing(pool: lcbench.Pool, result) -> dict:
    """When the first configuration that hits started, as a share of the time to the
    hit (``waited``); None for a run that did not hit."""
    hitting = hit_trials(pool)
    hits = [(t, trial) for trial, t in result.completed.items() if trial in hitting]
    if not hits:
        return {"waited": None}
    t_hit, trial = min(hits)
    started = min(seg.start_s for seg in result.segments if seg.trial == trial)
    return {"waited": started / t_hit if t_hit else 0.0}


def run(objective: str, sigmas, knobs, seeds, data, n: int, workers: int, log=print,
        tasks=lcbench.DEV_TASKS) -> dict:
    """Per variant (:func:`variants`): hits, runs, money to the hit (x none, each run
    that hit), and the forecast quality figures averaged over pools."""
    variants_ = variants(sigmas, knobs)
    results = {v: {"hits": 0, "runs": 0, "x_none": [], "x_oracle": [], "waited": [],
                   "busy": []} for v in variants_}
    quality: dict = {}
    floors = {name: {"hits": 0, "runs": 0, "x_none": [], "x_oracle": []}
              for name in FLOORS}
    for task in tasks:
        for seed in seeds:
            pool = lcbench.load_pool(task, n, seed, data, objective)
            for key, value in forecast_quality(pool, seed, sigmas).items():
                quality.setdefault(key, []).append(value)
            _run_pool(task, seed, pool, n, workers, variants_, results, floors, log)
    return {"results": results, "floors": floors,
            "quality": {k: statistics.mean(v) for k, v in quality.items()}}


def _run_pool(task: str, seed: int, pool: lcbench.Pool, n: int, workers: int,
              variants_: list, results: dict, floors: dict, log) -> None:
    """One pool: no pruning (the yardstick), the two floors, then every variant, added to
    ``floors`` and ``results``."""
    from benchmarks.peers import make

    order = list(np.random.default_rng([seed, 1]).permutation(n))
    max_epochs = max(c.epochs for c in pool.curves)

    def sim(policy):
        result = simulate(pool.curves, order, workers, policy, params=pool.configs)
        return {**run_metrics(pool, result, 1.0, workers), **timing(pool, result)}

    base = sim(make("none", max_epochs=max_epochs, n_trials=n, seed=seed,
                    mode=pool.objective.mode))
    _add_floors(floors, base, sim(ScreenPolicy(hit_trials(pool))), idle_floor(pool, order),
                pool.curves[pool.best()].cum_time_s[-1])
    for variant in variants_:
        m = sim(_variant_policy(variant, pool, n, seed, max_epochs))
        r = results[variant]
        r["runs"] += 1
        if m["hit"] and base["hit"]:
            r["hits"] += 1
            r["x_none"].append(m["money_to_hit"] / base["money_to_hit"])
            r["x_oracle"].append(m["x_oracle"])
            r["waited"].append(m["waited"])
            r["busy"].append(m["money_to_hit"] / m["money_to_hit_fixed"])
        ranking, knob = variant
        log(f"{task:18s} seed {seed} {str(ranking):6s} a{knob:g} hit {str(m['hit']):5s}")


def _add_floors(floors: dict, base: dict, screen: dict, idle_s: float,
                oracle_s: float) -> None:
    """Count one pool's two floors (screened, and its idle bound) against no pruning."""
    for name, hit, money, x_oracle in (
            ("screen", screen["hit"], screen["money_to_hit"], screen["x_oracle"]),
            ("screen, idle", idle_s < float("inf"), idle_s / 3600, idle_s / oracle_s)):
        f = floors[name]
        f["runs"] += 1
        if hit and base["hit"]:
            f["hits"] += 1
            f["x_none"].append(money / base["money_to_hit"])
            f["x_oracle"].append(x_oracle)


def _variant_policy(variant: tuple, pool: lcbench.Pool, n: int, seed: int, max_epochs: int):
    """The policy of a variant: the score's cut at its aggressiveness, or the rank cut on
    an oracle of the finals with the variant's error."""
    from benchmarks.peers import make

    ranking, knob = variant
    if ranking == "score":
        return make(f"cost_aware-a{knob:g}", max_epochs=max_epochs, n_trials=n, seed=seed,
                    mode=pool.objective.mode)
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    rule = OracleRankPolicy(pool.objective.mode, max_epochs, sign * pool.finals(),
                            errors_for(pool, seed, ranking), knob)
    return lambda accountant, rule=rule: CostAwarePruner(rule, accountant)


def table(objective: str, sigmas, knobs, measured: dict) -> str:
    res, q = measured["results"], measured["quality"]

    def med(values):
        return "-" if not values else f"{statistics.median(values):.2f}"

    lines = [f"Objective `{objective}`: the rank cut on the score now (the policy) and on "
             "the true final with a persistent error of sigma x the IQR of the pool's "
             "finals (shrinking to 0 at the last epoch).", "",
             "| ranking | Spearman with the final at epoch "
             + " / ".join(map(str, CHECK_EPOCHS)) + " | "
             + " | ".join(f"aggressiveness {k:g}: hits, x none, x oracle, waited" for k in knobs)
             + " |", "|---|---|" + "---|" * len(knobs)]
    for ranking in ("score", *sigmas):
        name = "score now (the policy)" if ranking == "score" else f"oracle, sigma {ranking:g}"
        rho = " / ".join(f"{q[(ranking, e)]:.2f}" for e in CHECK_EPOCHS)
        cells = []
        for knob in knobs:
            r = res[(ranking, knob)]
            cells.append(f"{r['hits']}/{r['runs']}, {med(r['x_none'])}, {med(r['x_oracle'])}, "
                         f"{med(r['waited'])}")
        lines.append(f"| {name} | {rho} | " + " | ".join(cells) + " |")
    busy = [b for r in res.values() for b in r["busy"]]
    lines += ["", "waited: the share of the time to the hit that passed before the "
              "configuration that hit was started (median over the runs that hit). Workers "
              f"were busy {min(busy):.0%}-{max(busy):.0%} of the time before the hit in "
              "every run that hit, so the money to the hit is about the workers x the "
              "time to it." if busy else ""]
    floors = measured.get("floors")
    if floors:
        lines += ["", "Floors with a perfect forecast after one epoch (every configuration "
                  "looked at for one epoch, in the same order):", "",
                  "| floor | hits | x none (median) | x none (min-max) | x oracle (median) |",
                  "|---|---|---|---|---|"]
        for name in FLOORS:
            f = floors[name]
            spread = (f"{min(f['x_none']):.2f}-{max(f['x_none']):.2f}" if f["x_none"]
                      else "-")
            lines.append(f"| {name} | {f['hits']}/{f['runs']} | {med(f['x_none'])} | "
                         f"{spread} | {med(f['x_oracle'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", default="acc", choices=sorted(lcbench.OBJECTIVES))
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    parser.add_argument("--aggressiveness", type=float, nargs="+", default=[1.0, 2.0, 4.0],
                        help="the policy's knob, for every ranking")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--tasks", nargs="+", default=list(lcbench.DEV_TASKS),
                        help="tasks (default: the 13 development tasks)")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/rank_bound.md"))
    args = parser.parse_args(argv)
    if any(k <= 0 for k in args.aggressiveness):
        print(f"error: --aggressiveness: must be > 0 (got {args.aggressiveness})",
              file=sys.stderr)
        return 2
    if any(s < 0 for s in args.sigmas):
        print(f"error: --sigmas: must be >= 0 (got {args.sigmas})", file=sys.stderr)
        return 2
    if error := lcbench.data_error(args.data):
        print(error, file=sys.stderr)
        return 2
    started = time.perf_counter()
    measured = run(args.objective, args.sigmas, args.aggressiveness, args.seeds, args.data,
                   args.n, args.workers, tasks=args.tasks)
    text = table(args.objective, args.sigmas, args.aggressiveness, measured)
    publish(args.out, text)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
