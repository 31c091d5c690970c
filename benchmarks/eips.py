"""Benchmark: the curve sampler's proposal by expected improvement per predicted second
(EIps, Snoek et al. 2012) instead of expected improvement.

Issue 30 asks new configurations to be ranked on "expected improvement per unit of money
to the next decision". A new configuration's own cost is not known before it runs, and
on the development pools its epoch time varies widely (a pool's 90th percentile is about
5x its 10th; the command prints it first), so EIps needs a forecast of it. :class:`CostPlanner` predicts a candidate's
seconds per epoch from the measured epoch times of its :data:`NEIGHBOURS` nearest tried
configurations (encoded hyperparameters, inverse-distance weights, in log seconds) and
divides the planner's expected improvement by that prediction to the power ``alpha``
(1: per second; 0.5: half way; 0: the shipped planner). Each row is ``cost_aware``
searching the 13 development tasks with the curve sampler proposing among each pool's
untried configurations, as ``python -m benchmarks.policies --sampler curve --policies
cost_aware`` runs it (4 workers, on demand; money against random search without
pruning):

    python -m benchmarks.eips --objective acc|loss [--alphas 0 0.5 1] [--seeds 0 1 2 3 4]

A measurement, not a sampler: docs/curve_sampler.md says what it found.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks import lcbench, sampled
from benchmarks.policies import fmt, run_all, summarise
from hpsearch.model.planner import Planner

#: Tried configurations a candidate's epoch time is predicted from, and the distance
#: (encoded units) below which a neighbour counts as the candidate itself.
NEIGHBOURS = 8
DISTANCE_FLOOR = 0.02


def predicted_epoch_s(known: Sequence[tuple[Sequence[float], float]],
                      xs: np.ndarray) -> np.ndarray:
    """Seconds per epoch of each encoded candidate of ``xs``: the inverse-distance
    weighted mean, in log seconds, of its :data:`NEIGHBOURS` nearest ``known``
    (encoded configuration, measured seconds per epoch); 1 for each with fewer than two
    known."""
    if len(known) < 2:
        return np.ones(len(xs))
    X = np.array([x for x, _ in known], dtype=float)
    y = np.log([s for _, s in known])
    d = np.sqrt(((xs[:, None, :] - X[None, :, :]) ** 2).mean(axis=2))
    nearest = np.argsort(d, axis=1)[:, :min(NEIGHBOURS, len(known))]
    w = 1.0 / (np.take_along_axis(d, nearest, axis=1) + DISTANCE_FLOOR)
    return np.exp((w * y[nearest]).sum(axis=1) / w.sum(axis=1))


class CostPlanner(Planner):
    """The curve sampler's planner rating a candidate by its expected improvement over
    its predicted seconds per epoch to the power ``alpha``.

    Args:
        alpha: The power (0: the shipped planner).
        epoch_s: A study trial's measured seconds per epoch (None: not measured yet).
    """

    def __init__(self, *args, alpha: float, epoch_s: Callable[[int], float | None],
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha = alpha
        self.epoch_s = epoch_s

    def value(self, fitted, xs: np.ndarray) -> np.ndarray:
        gains = super().value(fitted, xs)
        if not self.alpha:
            return gains
        known = [(t.x, s) for t in fitted.trials if (s := self.epoch_s(t.number))]
        return gains / predicted_epoch_s(known, xs) ** self.alpha


def cost_study(alpha: float) -> type:
    """A :class:`benchmarks.sampled.SampledStudy` whose curve sampler proposes with a
    :class:`CostPlanner` of ``alpha``, reading the epoch times the study measured."""

    class CostStudy(sampled.SampledStudy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.planner is None:
                return
            shipped = self.planner
            self.planner = CostPlanner(shipped.dims, shipped.max_epochs, seed=shipped.seed,
                                       candidates=shipped.candidates, alpha=alpha,
                                       epoch_s=self._epoch_s)
            self.planner.model.prior = shipped.model.prior

        def _epoch_s(self, number: int) -> float | None:
            index = next((i for i, t in self.trials.items() if t.number == number), None)
            times = self.epoch_times.get(index) or []
            return statistics.median(times[1:] or times) if times else None

    return CostStudy


def pool_epoch_times(objective: str, seeds, tasks, data, n: int) -> dict[str, float]:
    """How a pool's seconds per epoch spread (its 90th percentile over its 10th) and
    where its best configuration's stand (over the pool's median), each the median over
    the pools of ``tasks`` x ``seeds``: what a discount for cost would act on."""
    spreads, best = [], []
    for task in tasks:
        for seed in seeds:
            pool = lcbench.load_pool(task, n, seed, data, objective)
            epoch_s = np.array([c.cum_time_s[-1] / len(c.cum_time_s) for c in pool.curves])
            top = pool.best()
            spreads.append(float(np.percentile(epoch_s, 90) / np.percentile(epoch_s, 10)))
            best.append(float(epoch_s[top] / np.median(epoch_s)))
    return {"spread": statistics.median(spreads), "best": statistics.median(best),
            "best_q1": float(np.percentile(best, 25)),
            "best_q3": float(np.percentile(best, 75))}


def measure(objective: str, alpha: float, seeds, tasks, data, n: int,
            workers: int) -> dict[str, Any]:
    """``cost_aware``'s figures with the curve sampler proposing by EI per predicted
    second to the power ``alpha``."""
    rows, _ = run_all(tasks, seeds, ["cost_aware"], n, workers, data,
                      log=lambda *a, **k: None, objective=objective, sampler="curve",
                      study_class=cost_study(alpha))
    return summarise(rows, ["cost_aware"])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The curve sampler's proposals by "
                                                 "expected improvement per predicted second.")
    parser.add_argument("--objective", choices=sorted(lcbench.OBJECTIVES), default="acc")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.5, 1.0],
                        help="powers of the predicted epoch time (0: the shipped planner)")
    parser.add_argument("--tasks", nargs="+", default=list(lcbench.DEV_TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=200, help="configurations per pool")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    args = parser.parse_args(argv)
    if bad := [a for a in args.alphas if not 0.0 <= a <= 4.0]:
        print(f"error: --alphas: each between 0 and 4 (got {bad[0]:g})", file=sys.stderr)
        return 2
    unit = "pp" if lcbench.OBJECTIVES[args.objective].mode == "max" else "%"
    lines = [f"cost_aware with the curve sampler, {args.objective}, tasks "
             f"{' '.join(args.tasks)}, seeds {' '.join(map(str, args.seeds))}, pools of "
             f"{args.n}, {args.workers} workers, on demand",
             "",
             "| alpha | hits | money to the hit (x random search) | x oracle | mean regret | "
             "hit started after (oracle durations) |",
             "|---|---|---|---|---|---|"]
    try:
        e = pool_epoch_times(args.objective, args.seeds, args.tasks, args.data, args.n)
        print(f"seconds per epoch, median over the pools: 90th percentile / 10th "
              f"{e['spread']:.1f}; the best configuration's / the pool's median "
              f"{e['best']:.2f} (interquartile {e['best_q1']:.2f}-{e['best_q3']:.2f})",
              flush=True)
        for alpha in args.alphas:
            s = measure(args.objective, alpha, args.seeds, args.tasks, args.data, args.n,
                        args.workers)
            lines.append(f"| {alpha:g} | {s['hits']}/{s['runs']} | {fmt(s['x_none_order'])} "
                         f"| {fmt(s['x_oracle'], 1)} | {fmt(s['regret_mean'], 3)} {unit} | "
                         f"{fmt(s['hit_start_x_oracle'])} |")
            print(lines[-1], flush=True)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
