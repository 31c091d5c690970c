"""The curve sampler's CPU cost per decision, against the budget the issue set for it.

    python -m benchmarks.curve_cost [--trials 50 100 200] [--dims 7] [--epochs 52]
                                    [--prior-studies 12] [--repeats 3]

A decision is one proposal: the forest refitted when the study's evidence has grown
(:data:`hpsearch.model.freeze_thaw.REFIT_GROWTH`), then every candidate rated. For each
study size the benchmark measures, in CPU seconds of this process (``time.process_time``:
the same on a loaded machine as on an idle one, unlike wall time), a proposal that
refits (the worst case: every trial's whole curve, ``--epochs`` epochs each) and one that
reuses the last forest (most decisions), with no prior and with a prior of
``--prior-studies`` earlier studies of the same size (partial curves, as a cost_aware
search keeps them). The budget: 5% of a 1-minute epoch on 2 cores, i.e. 3 s per decision.

The curves are synthetic (a quadratic optimum in the unit cube, saturating curves with
noise): the cost depends on the number of trials, epochs and dimensions, not on what
the curves say. Prints one line per case and the largest share of the budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

#: The issue's budget per decision: 5% of a 1-minute epoch.
BUDGET_S = 0.05 * 60.0


def synthetic_trials(n: int, dims: int, epochs: int, partial: bool,
                     rng: np.random.Generator) -> list:
    """``n`` trials of a ``dims``-dimensional space: full curves of ``epochs`` epochs, or
    (``partial``) each cut at a random epoch."""
    from hpsearch.model.standing import TrialCurve

    out = []
    for number in range(n):
        x = rng.random(dims)
        quality = -float(((x - 0.3) ** 2).sum())
        last = int(rng.integers(1, epochs + 1)) if partial else epochs
        scores = {e: quality * (1 - np.exp(-e / 8)) + float(rng.normal(0, 0.01))
                  for e in range(1, last + 1)}
        out.append(TrialCurve(number, tuple(x), scores, False))
    return out


def measure(n: int, dims: int, epochs: int, prior_studies: int, repeats: int,
            seed: int = 0) -> dict:
    """Median CPU seconds of a refitting proposal and of one that reuses the forest."""
    from hpsearch.model.encoding import Dimension
    from hpsearch.model.freeze_thaw import Prior
    from hpsearch.model.planner import Planner

    rng = np.random.default_rng(seed)
    space = [Dimension(f"x{i}") for i in range(dims)]
    prior = Prior([synthetic_trials(n, dims, epochs, True, rng)
                   for _ in range(prior_studies)])
    trials = synthetic_trials(n, dims, epochs, False, rng)
    refit, reuse = [], []
    for k in range(repeats):
        planner = Planner(space, epochs, prior=prior, seed=k)
        started = time.process_time()
        planner.propose(trials, seed=2 * k)
        refit.append(time.process_time() - started)
        started = time.process_time()
        planner.propose(trials, seed=2 * k + 1)
        reuse.append(time.process_time() - started)
        assert planner.model.fits == 1  # the second proposal reused the forest
    return {"trials": n, "prior_trials": len(prior), "refit_s": statistics.median(refit),
            "reuse_s": statistics.median(reuse)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--dims", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=52)
    parser.add_argument("--prior-studies", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.trials) < 1 or args.dims < 1 or args.epochs < 1 or args.repeats < 1:
        print("error: --trials, --dims, --epochs and --repeats must be >= 1", file=sys.stderr)
        return 2
    from hpsearch.model.forest import Forest
    from hpsearch.model.freeze_thaw import MAX_PRIOR_TRIALS

    # scikit-learn's first import is not a decision's cost.
    Forest.fit(np.zeros((4, 2)), np.zeros(4), np.arange(4), seed=0, n_trees=1)
    worst = 0.0
    print(f"{args.dims} dimensions, {args.epochs} epochs; CPU seconds per decision "
          f"(median of {args.repeats}); budget {BUDGET_S:.1f} s")
    for n in args.trials:
        for studies in (0, args.prior_studies):
            row = measure(n, args.dims, args.epochs, studies, args.repeats)
            worst = max(worst, row["refit_s"])
            used = min(row["prior_trials"], MAX_PRIOR_TRIALS)
            print(f"{n:4d} trials, prior {row['prior_trials']:5d} trials ({used} used): "
                  f"refit + proposal "
                  f"{row['refit_s']:.3f} s ({row['refit_s'] / BUDGET_S:.1%} of the budget), "
                  f"proposal on the last forest {row['reuse_s']:.3f} s", flush=True)
    print(f"largest: {worst:.3f} s = {worst / BUDGET_S:.1%} of the budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
