"""Benchmark: how the curve sampler chooses new configurations, four other ways, and
what a hit asks of any of them.

Each row is ``cost_aware`` searching the 13 development tasks with the curve sampler
proposing among each pool's untried configurations, as ``python -m benchmarks.policies
--sampler curve --policies cost_aware`` runs it (4 workers, on demand; money against
random search without pruning). The variants change only how a candidate is valued:

* ``ei`` (shipped): expected improvement over the incumbent's standing, from the model's
  calibrated plausible finals.
* ``thompson``: Thompson sampling, the usual acquisition for a batch of parallel
  workers: each proposal draws one tree of the forest (a random function the model
  finds plausible) and takes the candidate it rates best, so parallel proposals spread.
* ``fresh-forest``: a second forest fitted only on the rows that see nothing of their
  curve (the rows the question about a new configuration asks), so splits on a seen
  standing never mix a new configuration with trials that stood at the median.
* ``random-start``: proposals at random (as Optuna's samplers start) until the forest's
  spread is calibrated on its own out-of-bag rows; the shipped planner proposes from the
  first reported epoch on.
* ``left-behind``: a trial closed short of the last epoch (paused, pruned, stopped)
  gives rows at the last epoch too, standing behind every finished trial there, as the
  model's standings already count it; without them the last epoch's rows are only the
  survivors', all near the top.

Before the table, the command prints what a hit asks of any proposal rule, from the
shipped sampler's runs: how many configurations of a pool are hits (within 0.5 pp of
its best final accuracy, 2% of its best loss), the position among the started
configurations of the first that is one, and the money spent per configuration started
before it (in durations of the best configuration's training); ``x oracle`` is about
``workers + that cost x the position``.

With ``--ceiling`` it runs no search and prints where the first hit would start if every
started configuration's whole curve were known before the next proposal (no pruning, no
partial curves): the shipped planner's model, a Gaussian process and random proposals,
one at a time and ``--workers`` at a time (:func:`full_information`). What full
information buys is the most any proposal rule on that model could gain from knowing
more; what proposing in parallel costs shows beside it.

    python -m benchmarks.proposals --objective acc|loss [--variants ei thompson ...]
        [--seeds 0 1 2 3 4] [--ceiling]

A measurement, not a sampler: docs/curve_sampler.md says what it found.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import lcbench, sampled
from benchmarks.policies import fmt, run_all, summarise
from hpsearch.model.forest import Forest
from hpsearch.model.freeze_thaw import (CurveModel, expected_improvement, features,
                                        grid, trial_rows)
from hpsearch.model.planner import Planner
from hpsearch.model.standing import normal_scores


class ThompsonPlanner(Planner):
    """Values each candidate by one tree's forecast of its final standing (the tree
    drawn per proposal)."""

    def value(self, fitted, xs: np.ndarray) -> np.ndarray:
        rows = np.array([features(x, 0, 0.0, None, self.max_epochs, self.max_epochs)
                         for x in xs], dtype=float)
        trees = fitted.forest.tree_predictions(rows)
        draw = np.random.default_rng([self.seed, len(fitted.trials)]).integers(len(trees))
        # Shifted to be positive: the rating down next to a pending trial multiplies it.
        return trees[draw] - trees[draw].min() + 1e-9


class FreshForestPlanner(Planner):
    """Values each candidate by expected improvement from a forest fitted only on the
    rows that see nothing of their curve (refitted with the model's forest)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._fresh: tuple[Any, Forest] | None = None

    def value(self, fitted, xs: np.ndarray) -> np.ndarray:
        if self._fresh is None or self._fresh[0] is not fitted.forest:
            self._fresh = (fitted.forest, self._fit_fresh(fitted))
        rows = np.array([features(x, 0, 0.0, None, self.max_epochs, self.max_epochs)
                         for x in xs], dtype=float)
        return expected_improvement(self._fresh[1].plausible(rows), fitted.reference())

    def _fit_fresh(self, fitted) -> Forest:
        points = grid(self.max_epochs)
        X, y, groups = [], [], []
        for t in fitted.trials:
            rows, targets = trial_rows(t.x, fitted.z.get(t.number, {}), points,
                                       self.max_epochs)
            for row, target in zip(rows, targets):
                if row[len(t.x)] == 0.0:  # the epoch seen: none
                    X.append(row)
                    y.append(target)
                    groups.append(t.number)
        return Forest.fit(np.array(X, dtype=float), np.array(y, dtype=float),
                          np.array(groups), seed=self.seed * 7919 + len(fitted.trials))


class LeftBehindModel(CurveModel):
    """The curve model with a closed trial's rows at the last epoch: it stands there
    behind every finished trial (tied with the others that left)."""

    def _fit_forest(self, trials, z, ordinal):
        last = self.max_epochs
        finished = sum(1 for t in trials if last in t.scores)
        closed = [t for t in trials if not t.open and t.scores and t.last_epoch < last]
        if finished and closed:
            behind = float(normal_scores(np.array(
                [len(closed) / 2 / (finished + len(closed))]))[0])
            z = {n: dict(s) for n, s in z.items()}
            for t in closed:
                z[t.number][last] = behind
        return super()._fit_forest(trials, z, ordinal)


class LeftBehindPlanner(Planner):
    """The shipped planner on :class:`LeftBehindModel`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model = LeftBehindModel(self.max_epochs, self.model.prior, self.seed)


class RandomStartPlanner(Planner):
    """The shipped planner, proposing nothing (the sampler draws at random) until the
    forest's spread is calibrated on its own out-of-bag rows (forest.MIN_CALIBRATION
    trials): before that its expected improvement rests on an uncalibrated spread."""

    def propose(self, trials, seed):
        fitted = self.model.fit(trials)
        if fitted is None or not len(fitted.forest.residuals):
            return None
        return super().propose(trials, seed)


VARIANTS = {"ei": Planner, "thompson": ThompsonPlanner,
            "fresh-forest": FreshForestPlanner, "left-behind": LeftBehindPlanner,
            "random-start": RandomStartPlanner}


def variant_study(planner_class: type) -> type:
    """A :class:`benchmarks.sampled.SampledStudy` whose curve sampler proposes with a
    ``planner_class`` planner."""

    class VariantStudy(sampled.SampledStudy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.planner is None or planner_class is Planner:
                return
            shipped = self.planner
            self.planner = planner_class(shipped.dims, shipped.max_epochs,
                                         prior=shipped.model.prior, seed=shipped.seed,
                                         candidates=shipped.candidates)

    return VariantStudy


def measure(objective: str, variant: str, seeds, tasks, data, n: int,
            workers: int) -> tuple[dict[str, Any], list[dict]]:
    """``cost_aware``'s figures with the curve sampler valuing candidates as ``variant``,
    and its rows."""
    rows, _ = run_all(tasks, seeds, ["cost_aware"], n, workers, data,
                      log=lambda *a, **k: None, objective=objective, sampler="curve",
                      study_class=variant_study(VARIANTS[variant]))
    return summarise(rows, ["cost_aware"])[0], rows


def anatomy(rows: list[dict], objective: str, seeds, tasks, data, n: int,
            workers: int) -> dict[str, float]:
    """What a hit asks: hit configurations per pool, the first one's position among
    those started, and the money per configuration started before it (oracle
    durations), each the median over ``rows`` (runs that hit)."""
    per_pool = [int(sum(pool.objective.hits(f, pool.best_final()) for f in pool.finals()))
                for pool in (lcbench.load_pool(task, n, seed, data, objective)
                             for task in tasks for seed in seeds)]
    hit = [r for r in rows if r["hit"] and r["hit_started"]]
    return {"per_pool": statistics.median(per_pool),
            "single": sum(1 for k in per_pool if k == 1) / len(per_pool),
            "position": statistics.median(r["hit_started"] for r in hit),
            "cost": statistics.median(workers * r["hit_start_x_oracle"] / r["hit_started"]
                                      for r in hit)}


#: ``--ceiling``: how each full-information search proposes (see :func:`full_information`).
CEILING_MODELS = ("forest", "gp", "random")


def full_information(pool: lcbench.Pool, how: str, batch: int, seed: int,
                     declared: sampled.Space | None = None) -> int:
    """The position (1-based) at which the first hit configuration of ``pool`` is started
    when every proposal knows the whole curve of each configuration started before its
    batch: no pruning and no partial curves, what any proposal rule on that model could
    at best know. Proposals come ``batch`` at a time, each knowing the batch's earlier
    ones are pending (``batch`` = the workers: what parallel workers cost in positions).

    ``how``: ``forest``, the shipped planner (its model and expected improvement, a
    pending configuration rated down as in a run); ``gp``, a Gaussian process on the
    finals' normal scores (scikit-learn: Matern 5/2 with a length scale per dimension, a
    noise term; expected improvement; a batch is its ``batch`` best candidates), the
    model freeze-thaw BO and DyHPO build on; ``random``. Each starts at random until
    its model has two configurations to learn from. ``len(pool) + 1`` when none hits.
    """
    from hpsearch.adapters.optuna.curve_sampler import dimensions
    from hpsearch.model.standing import TrialCurve
    from optuna.distributions import FloatDistribution

    if how not in CEILING_MODELS:
        raise ValueError(f"how: one of {', '.join(CEILING_MODELS)} (got {how!r})")
    n = len(pool.configs)
    space = sampled.pool_space(pool.configs, declared)
    params = [{name: float(c[name]) for name in space if name in c} for c in pool.configs]
    untried = np.ones(n, dtype=bool)
    planner = Planner(dimensions({name: FloatDistribution(low, high, log=log)
                                  for name, (low, high, log) in space.items()}),
                      max(c.epochs for c in pool.curves), seed=seed,
                      candidates=lambda _: [params[i] for i in np.flatnonzero(untried)])
    x = np.array([planner.encode(p) for p in params], dtype=float)
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    best = pool.best_final()
    hit = np.array([pool.objective.hits(f, best) for f in pool.finals()])
    rng = np.random.default_rng([seed, 99])
    order: list[int] = []
    known: list[TrialCurve] = []
    finals = sign * pool.finals()
    pending: list[TrialCurve] = []

    def start(index: int) -> None:
        untried[index] = False
        order.append(index)
        pending.append(TrialCurve(index, tuple(x[index]), {}, open=True))

    while untried.any() and not hit[order].any():
        pending = []
        if how == "forest":  # one at a time, each knowing the batch's earlier ones
            for _ in range(min(batch, int(untried.sum()))):
                start(_proposals(how, planner, known + pending, x, finals, order,
                                 untried, 1, rng)[0])
        else:
            for index in _proposals(how, planner, known, x, finals, order, untried,
                                    batch, rng):
                start(index)
        known += [TrialCurve(t.number, t.x, {e + 1: sign * v for e, v in
                                             enumerate(pool.curves[t.number].values)})
                  for t in pending]
    return next((k + 1 for k, i in enumerate(order) if hit[i]), n + 1)


def _proposals(how, planner, known, x, finals, order, untried, k, rng) -> list[int]:
    """The next ``k`` configurations (pool indices) ``how`` proposes."""
    free = np.flatnonzero(untried)
    learned = [t for t in known if t.scores]
    if how == "random" or len(learned) < 2:
        return [int(i) for i in rng.choice(free, size=min(k, len(free)), replace=False)]
    if how == "forest":
        proposal = planner.propose(known, seed=len(order))
        if proposal is None:
            return [int(rng.choice(free))]
        wanted = planner.encode(proposal.params)
        return [int(free[np.argmin(((x[free] - np.array(wanted)) ** 2).sum(axis=1))])]
    from scipy.stats import norm, rankdata
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    seen = np.array([t.number for t in learned])
    y = normal_scores((rankdata(finals[seen]) - 0.5) / len(seen))
    kernel = (ConstantKernel(1.0, (1e-2, 1e2))
              * Matern(np.full(x.shape[1], 0.5), (1e-2, 1e2), nu=2.5)
              + WhiteKernel(1e-2, (1e-6, 1.0)))
    with warnings.catch_warnings():  # a length scale at its bound: a flat dimension
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=1,
                                      random_state=0).fit(x[seen], y)
    mean, sd = gp.predict(x[free], return_std=True)
    sd = np.maximum(sd, 1e-9)
    z = (mean - y.max()) / sd
    gain = (mean - y.max()) * norm.cdf(z) + sd * norm.pdf(z)
    return [int(free[i]) for i in np.argsort(-gain)[:k]]


def ceiling(objective: str, seeds, tasks, data, n: int, workers: int,
            models=CEILING_MODELS) -> list[dict[str, Any]]:
    """:func:`full_information` over the pools: per model and batch (1 and ``workers``),
    the median and mean position of the first hit started and the share of pools where
    it is within the first 10% of the pool."""
    pools = [(lcbench.load_pool(task, n, seed, data, objective), seed,
              lcbench.task_space(task, data)) for task in tasks for seed in seeds]
    out = []
    for how in models:
        for batch in dict.fromkeys((1, workers)):
            positions = [full_information(pool, how, batch, seed, declared)
                         for pool, seed, declared in pools]
            out.append({"how": how, "batch": batch,
                        "median": statistics.median(positions),
                        "mean": float(np.mean(positions)),
                        "early": sum(p <= n / 10 for p in positions) / len(positions)})
    return out


def print_ceiling(args) -> int:
    """``--ceiling``: the :func:`ceiling` table."""
    print(f"first hit configuration started with full information, {args.objective}, "
          f"tasks {' '.join(args.tasks)}, seeds {' '.join(map(str, args.seeds))}, pools "
          f"of {args.n}\n\n| proposals | proposed at a time | position: median | mean | "
          f"within the first {args.n // 10} |\n|---|---|---|---|---|", flush=True)
    try:
        for row in ceiling(args.objective, args.seeds, args.tasks, args.data, args.n,
                           args.workers):
            print(f"| {row['how']} | {row['batch']} | {row['median']:g} | "
                  f"{row['mean']:.1f} | {row['early']:.0%} |", flush=True)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="How the curve sampler values new "
                                                 "configurations, and four other ways.")
    parser.add_argument("--objective", choices=sorted(lcbench.OBJECTIVES), default="acc")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        default=list(VARIANTS))
    parser.add_argument("--tasks", nargs="+", default=list(lcbench.DEV_TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=200, help="configurations per pool")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    parser.add_argument("--ceiling", action="store_true",
                        help="instead of the runs: where the first hit would start with "
                             "full information (every started configuration's whole "
                             "curve known), one at a time and --workers at a time")
    args = parser.parse_args(argv)
    if args.ceiling:
        return print_ceiling(args)
    unit = "pp" if lcbench.OBJECTIVES[args.objective].mode == "max" else "%"
    lines = [f"cost_aware with the curve sampler, {args.objective}, tasks "
             f"{' '.join(args.tasks)}, seeds {' '.join(map(str, args.seeds))}, pools of "
             f"{args.n}, {args.workers} workers, on demand",
             "",
             "| proposals | hits | money to the hit (x random search) | x oracle | "
             "mean regret | first hit configuration started (position, median) |",
             "|---|---|---|---|---|---|"]
    try:
        for variant in args.variants:
            s, rows = measure(args.objective, variant, args.seeds, args.tasks, args.data,
                              args.n, args.workers)
            if variant == "ei":
                a = anatomy(rows, args.objective, args.seeds, args.tasks, args.data,
                            args.n, args.workers)
                print(f"hit configurations per pool: median {a['per_pool']:g} (exactly "
                      f"one in {a['single']:.0%} of pools); the first started: position "
                      f"{a['position']:g}; money per configuration started before it: "
                      f"{a['cost']:.2f} oracle durations (x oracle about {args.workers} "
                      f"+ {a['cost']:.2f} x position = "
                      f"{args.workers + a['cost'] * a['position']:.1f})", flush=True)
            lines.append(f"| {variant} | {s['hits']}/{s['runs']} | {fmt(s['x_none_order'])} "
                         f"| {fmt(s['x_oracle'], 1)} | {fmt(s['regret_mean'], 3)} {unit} | "
                         f"{fmt(s['hit_started'], 0)} |")
            print(lines[-1], flush=True)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
