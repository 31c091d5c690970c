"""Benchmark: the rank cut on the curve model's forecast instead of the score now.

Issue 30 asks one model to answer which configuration to start *and* which trial to
train on. The curve sampler's model (:mod:`hpsearch.model.freeze_thaw`) forecasts a
trial's final standing from its hyperparameters and its curve so far; ``cost_aware``'s
cut ranks trials on their score now (plus a capped bonus for still improving). This
module measures whether the model's forecast is the better ranking, two ways:

*Forecast quality* (``python -m benchmarks.model_cut``): on each pool, ``--finished``
configurations (a seeded random draw) are trained to the end and every other one is
seen up to epoch 1, 2, 5 and 10; the model is fitted on those curves and forecasts each
partial trial's final standing. Against the true finals: the Spearman rank correlation,
the share of the pool's best 5% of the partial trials that a cut keeping the top 30%
keeps, and the share of the partial trials ranked ahead of the best of them, for the
model and for the score now. With ``--prior loto-full`` the model also
reads an exhaustive earlier study of every other development task (leave one task out):
the evidence from earlier studies that docs/benchmarks.md named as what a better
forecast would need.

*The policy* (``python -m benchmarks.policies --sampler curve --policies cost_aware
cost_aware-model-a1 cost_aware-model-a1.5``): :class:`ModelRankPolicy` is
``cost_aware`` as shipped (schedule, leader and cost rules, guard, pauses and resumes)
whose cut ranks, once two trials have finished, on the model's forecast of each trial's
final standing (the model refitted on the board whenever its points have grown by
:data:`REFIT_GROWTH`, with the curve sampler's prior under ``--prior``); ``-aX`` sets
the aggressiveness knob.

A measurement, not a policy: docs/curve_sampler.md says what it found.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks import lcbench
from benchmarks.rank_bound import spearman
from benchmarks.sampled import pool_space
from hpsearch.model.encoding import Dimension, encode
from hpsearch.model.freeze_thaw import CurveModel, Prior, _before, features, grid
from hpsearch.model.standing import TrialCurve, standing_of, standings
from hpsearch.pruning.cost_aware import MIN_FINISHED, Board, CostAwarePolicy

#: The model is refitted on the board when its points (trial x epoch) have grown by this
#: share (the curve sampler's own refit rule, :data:`~hpsearch.model.freeze_thaw.REFIT_GROWTH`,
#: is 0.2; a cut asks about every epoch, so it refits four times as often).
REFIT_GROWTH = 0.05
#: The epochs the forecast is measured at, and the shares of the quality check.
QUALITY_EPOCHS = (1, 2, 5, 10)
TOP_SHARE, KEPT_SHARE = 0.05, 0.30


class ModelRankPolicy(CostAwarePolicy):
    """:class:`CostAwarePolicy` whose cut ranks on the curve model's forecast final
    standing once :data:`MIN_FINISHED` trials have finished (before that, on the score
    now, as shipped). Hyperparameters are read from the predictor's record of them
    (the pruner adds every trial's params), placed as the predictor places them, or,
    given the curve sampler's ``planner`` with a prior, read with that prior and placed
    as the planner places them (as the prior's trials are)."""

    def __init__(self, mode: str, max_epochs: int, aggressiveness: float = 1.0,
                 planner=None):
        super().__init__(mode, max_epochs, aggressiveness=aggressiveness)
        self.model = CurveModel(max_epochs, seed=0)
        #: With a prior, the curve sampler's planner: its prior, and its encoding of
        #: hyperparameters (which the prior's trials are in).
        self.planner = planner if planner is not None and len(planner.model.prior) else None
        if self.planner is not None:
            self.model.prior = self.planner.model.prior
        self._points = 0
        self._fitted = None
        self._trials: list[TrialCurve] = []
        self._z: dict[int, dict[int, float]] = {}
        self._memo: dict[tuple[int, int], float] = {}

    def _x(self, trial: int) -> tuple[float, ...]:
        ranks = self.predictor.hyperparameters
        params = ranks.params.get(trial, {})
        if self.planner is not None:
            return self.planner.encode(params)
        return tuple(ranks._place(name, float(params[name])) if name in ranks._ranges
                     else 0.0 for name in sorted(params))

    def _refresh(self, board: Board) -> None:
        points = sum(len(v) for v in board.at_epoch.values())
        if self._fitted is not None and points < (1 + REFIT_GROWTH) * self._points:
            return
        self._points = points
        self._trials = [TrialCurve(t, self._x(t), dict(s),
                                   t not in board.stopped_at and t not in board.finished)
                        for t, s in board.scores.items() if s]
        self._fitted = self.model.fit(self._trials)
        self._z = standings(self._trials)
        self._memo = {}

    def _standing(self, board: Board, trial: int, epoch: int) -> float | None:
        """``trial``'s standing at ``epoch`` among the trials of the last refresh."""
        if epoch not in board.scores[trial]:
            return None
        known = self._z.get(trial, {}).get(epoch)
        if known is not None:
            return known
        return standing_of(board.scores[trial][epoch], epoch, self._trials, exclude=trial)

    def forecasts(self, board: Board, trials: list[int], epoch: int) -> list[float]:
        """The model's mean forecast final standing of each of ``trials`` seen at
        ``epoch`` (memoised per fit)."""
        self._refresh(board)
        missing = [t for t in trials if (t, epoch) not in self._memo]
        if missing:
            prev = _before(grid(self.max_epochs), epoch)
            rows = [features(self._x(t), epoch, self._standing(board, t, epoch),
                             self._standing(board, t, prev) if prev else None,
                             self.max_epochs, self.max_epochs) for t in missing]
            means = self._fitted.forest.tree_predictions(np.array(rows, dtype=float))
            for t, m in zip(missing, means.mean(axis=0)):
                self._memo[(t, epoch)] = float(m)
        return [self._memo[(t, epoch)] for t in trials]

    def _on_model(self, board: Board) -> bool:
        return len(board.finished) >= MIN_FINISHED

    def rank_key(self, board: Board, trial: int, epoch: int) -> float | None:
        if epoch not in board.scores.get(trial, {}):
            return None
        if not self._on_model(board):
            return super().rank_key(board, trial, epoch)
        return self.forecasts(board, [trial], epoch)[0]

    def rank_keys(self, board: Board, epoch: int) -> list[float]:
        if not self._on_model(board):
            return super().rank_keys(board, epoch)
        return self.forecasts(board, list(board.trials_at[epoch]), epoch)


def model_cut_policy(policy: str, max_epochs: int, mode: str, study=None):
    """``cost_aware-model-aX``: a function of the run's accountant (as
    :func:`benchmarks.peers.make` returns for ``cost_aware``); its model reads the prior
    of ``study``'s curve sampler, if it has one (``--prior``)."""
    from hpsearch.pruning.cost_aware_pruner import CostAwarePruner

    try:
        knob = float(policy.rsplit("-a", 1)[1])
    except ValueError:
        raise ValueError(f"--policies: {policy!r}: cost_aware-model-aX needs a number X "
                         f"(the aggressiveness), e.g. cost_aware-model-a1.5") from None

    def with_accountant(accountant):
        pruner = CostAwarePruner(ModelRankPolicy(mode, max_epochs, knob,
                                                 getattr(study, "planner", None)),
                                 accountant)
        pruner.name = policy
        return pruner

    return with_accountant


# -- forecast quality --------------------------------------------------------------------

def encoded(pool: lcbench.Pool, declared) -> list[tuple[float, ...]]:
    """Each configuration of ``pool`` as the model reads it (each hyperparameter on its
    space's range, log where the space says so): the ``declared`` hyperparameters where
    given (so that every task's configurations line up for a prior), else every numeric
    one of the pool."""
    space = pool_space(pool.configs, declared)
    dims = [Dimension(name, *space[name]) for name in sorted(declared or space)]
    return [encode(dims, config) for config in pool.configs]


def quality(pool: lcbench.Pool, seed: int, finished: int, x, prior: Prior | None = None
            ) -> dict:
    """Spearman and top-share recall of the score now and of the model's forecast (from
    the pool's curves and ``prior``), at each of QUALITY_EPOCHS, over the trials not
    drawn to finish (see the module)."""
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    finals = sign * pool.finals()
    max_epochs = max(c.epochs for c in pool.curves)
    order = np.random.default_rng([seed, 30]).permutation(len(pool.curves))
    done, partial = order[:finished], order[finished:]
    truth = finals[partial]
    top = set(np.argsort(-truth)[:max(1, round(TOP_SHARE * len(partial)))].tolist())
    kept = max(1, round(KEPT_SHARE * len(partial)))
    best = int(np.argmax(truth))
    whole = whole_study(pool, x, max_epochs)
    out = {}
    for epoch in QUALITY_EPOCHS:
        trials = [whole[i] for i in done]
        trials += [TrialCurve(int(i), x[i], {e: v for e, v in whole[i].scores.items()
                                             if e <= epoch}, open=True) for i in partial]
        fitted = CurveModel(max_epochs, prior, seed=seed).fit(trials)
        model = fitted.final([(x[i], epoch, int(i)) for i in partial]).mean(axis=1)
        now = np.array([sign * pool.curves[i].values[min(epoch, pool.curves[i].epochs) - 1]
                        for i in partial])
        for name, ranking in (("score", now), ("model", model)):
            out[(name, "spearman", epoch)] = spearman(ranking, truth)
            keeps = set(np.argsort(-ranking)[:kept].tolist())
            out[(name, "recall", epoch)] = len(top & keeps) / len(top)
            # Where the best of them is placed: the share ranked ahead of it.
            out[(name, "ahead", epoch)] = float((ranking > ranking[best]).mean())
    return out


def whole_study(pool: lcbench.Pool, x, max_epochs: int) -> list[TrialCurve]:
    """``pool`` as a study that trained every configuration to the end, each curve's
    scores sign-adjusted and its epochs put on ``max_epochs`` (the pool's longest curve
    ends there), as the model reads a study's trials."""
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    scale = max_epochs / max(c.epochs for c in pool.curves)
    return [TrialCurve(i, x[i], {max(1, round((e + 1) * scale)): sign * v
                                 for e, v in enumerate(curve.values)})
            for i, curve in enumerate(pool.curves)]


def loto_prior(task: str, objective: str, n: int, data, declared, max_epochs: int,
               cache: dict) -> Prior:
    """Leave one task out: an exhaustive earlier study of every other development task
    (its pool at :data:`benchmarks.priors.PRIOR_SEED`), as ``--prior loto-full``."""
    from benchmarks.priors import PRIOR_SEED

    studies = []
    for other in lcbench.DEV_TASKS:
        if other == task:
            continue
        if other not in cache:
            pool = lcbench.load_pool(other, n, PRIOR_SEED, data, objective)
            cache[other] = (pool, encoded(pool, declared))
        pool, x = cache[other]
        studies.append(whole_study(pool, x, max_epochs))
    return Prior(studies)


def run_quality(objective: str, finished: int, seeds, data, n: int, tasks,
                prior: str = "none", log=print) -> dict:
    """:func:`quality` averaged over tasks x seeds (``prior``: none, or loto-full:
    :func:`loto_prior`)."""
    declared = lcbench.declared_space(data) if data else None
    sums: dict = {}
    cache: dict = {}
    for task in tasks:
        for seed in seeds:
            pool = lcbench.load_pool(task, n, seed, data, objective)
            x = encoded(pool, declared if task != "synthetic" else None)
            earlier = (loto_prior(task, objective, n, data, declared,
                                  max(c.epochs for c in pool.curves), cache)
                       if prior == "loto-full" else None)
            for key, value in quality(pool, seed, finished, x, earlier).items():
                sums.setdefault(key, []).append(value)
        log(f"{task} done")
    return {key: statistics.mean(values) for key, values in sums.items()}


def markdown(results: dict, args) -> str:
    lines = [f"Forecast quality, {args.objective}, prior {args.prior}: {args.finished} of "
             f"{args.n} configurations finished, the rest seen up to the epoch (tasks: "
             f"{', '.join(args.tasks)}; seeds {' '.join(map(str, args.seeds))}).", "",
             "| ranking | " + " | ".join(f"Spearman e{e}" for e in QUALITY_EPOCHS) + " | "
             + " | ".join(f"best {TOP_SHARE:.0%} in top {KEPT_SHARE:.0%}, e{e}"
                          for e in QUALITY_EPOCHS) + " | "
             + " | ".join(f"ranked ahead of the best, e{e}" for e in QUALITY_EPOCHS) + " |",
             "|---|" + "---|" * (3 * len(QUALITY_EPOCHS))]
    for name in ("score", "model"):
        cells = [f"{results[(name, 'spearman', e)]:.2f}" for e in QUALITY_EPOCHS]
        cells += [f"{results[(name, 'recall', e)]:.2f}" for e in QUALITY_EPOCHS]
        cells += [f"{results[(name, 'ahead', e)]:.0%}" for e in QUALITY_EPOCHS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The curve model's forecast as the cut's "
                                                 "ranking: its quality against the score now.")
    parser.add_argument("--objective", choices=sorted(lcbench.OBJECTIVES), default="acc")
    parser.add_argument("--finished", type=int, default=20,
                        help="configurations per pool trained to the end (default 20)")
    parser.add_argument("--tasks", nargs="+", default=list(lcbench.DEV_TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n", type=int, default=200, help="configurations per pool")
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    parser.add_argument("--prior", choices=("none", "loto-full"), default="none",
                        help="the model's prior: none, or loto-full: an exhaustive earlier "
                             "study of every other development task")
    args = parser.parse_args(argv)
    if args.prior != "none" and "synthetic" in args.tasks:
        print("error: --prior loto-full: needs the LCBench tasks (not synthetic)",
              file=sys.stderr)
        return 2
    if not 2 <= args.finished < args.n:
        print(f"error: --finished: between 2 and --n - 1 (got {args.finished})",
              file=sys.stderr)
        return 2
    try:
        results = run_quality(args.objective, args.finished, args.seeds, args.data,
                              args.n, args.tasks, args.prior)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
