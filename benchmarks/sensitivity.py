"""Benchmark: how much each constant of the cost-aware policy, and of the curve sampler,
matters.

Every constant that shapes a decision (in :mod:`hpsearch.pruning.cost_aware` and
:mod:`hpsearch.pruning.predictor`) is set to half and to double its value in turn (a
share of a schedule or a tail of an interval: halved or doubled, capped where it must
be), and the policy benchmark is run again: the same pools, orders and workers as
``python -m benchmarks.policies``, on the development tasks, for each objective. Quoted
per setting: hits over runs and the median money to the hit (x no pruning's), beside the
defaults' figures. A constant whose halving and doubling move neither figure much is
not fitted; one that moves them is a real choice, and the table says which way.

With ``--sampler curve`` the constants are the curve sampler's (:mod:`hpsearch.model`)
and ``cost_aware`` searches with the curve sampler proposing among each pool's untried
configurations, as ``python -m benchmarks.policies --sampler curve`` does: hits, money
to the hit (x random search without pruning) and x oracle. The pool chooses the
candidates there, so the constants that make candidates over a continuous space
(:data:`CANDIDATE_VARIANTS`) are measured on a synthetic one instead (:func:`toy_search`):
the best final value found after a fixed number of trials, below the known optimum.

With ``--prior loto`` (curve sampler only) every search starts from a leave-one-task-out
prior, as ``python -m benchmarks.policies --prior loto`` builds it, and the prior's
constants (:data:`PRIOR_VARIANTS`) are varied too.

    python -m benchmarks.sensitivity [--sampler order|curve] [--prior none|loto]
        [--objectives acc loss] [--seeds 0 1 2 3 4] [--only NAME ...]
        [--out benchmarks/results/sensitivity.md]

The constants are changed in this process only (module attributes, restored after
each run); nothing is written to the package.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import lcbench
from benchmarks import priors as priors_mod
from benchmarks.policies import publish, run_all, summarise
from hpsearch.model import forest, freeze_thaw, planner
from hpsearch.pruning import cost_aware, predictor


def _shares(schedule, factor):
    return tuple((x, min(1.0, share * factor)) for x, share in schedule)


def _tails(interval, factor):
    low = min(0.5, interval[0] * factor)
    return (low, 1.0 - low)


#: (module, name, half, double): how each constant is halved and doubled.
VARIANTS: list[tuple[Any, str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (cost_aware, "ABSOLUTE_SCHEDULE", lambda v: _shares(v, 0.5), lambda v: _shares(v, 2)),
    (cost_aware, "RELATIVE_SCHEDULE", lambda v: _shares(v, 0.5), lambda v: _shares(v, 2)),
    (cost_aware, "EARLY_SHARPNESS", lambda v: 1 + (v - 1) / 2, lambda v: 1 + (v - 1) * 2),
    (cost_aware, "SHARPNESS_FADE", lambda v: (v[0] // 2, v[1] // 2),
     lambda v: (v[0] * 2, v[1] * 2)),
    (cost_aware, "IMPROVEMENT_BONUS", lambda v: v / 2, lambda v: v * 2),
    (cost_aware, "SLOPE_EPOCHS", lambda v: max(1, v // 2), lambda v: v * 2),
    (cost_aware, "BONUS_CAP", lambda v: v / 2, lambda v: v * 2),
    (cost_aware, "FINISH_SHARE", lambda v: v / 2, lambda v: v * 2),
    (cost_aware, "MIN_PEERS", lambda v: max(1, v // 2), lambda v: v * 2),
    (cost_aware, "MIN_FINISHED", lambda v: max(1, v // 2), lambda v: v * 2),
    (cost_aware, "GUARD_OPTIMISM", lambda v: v / 2, lambda v: v * 2),
    (cost_aware, "GUARD_FROM", lambda v: max(1, v // 2), lambda v: v * 2),
    (cost_aware, "COST_FULL_FROM", lambda v: v // 2, lambda v: v * 2),
    (cost_aware, "COST_FACTOR_RANGE", lambda v: (v[0] ** 0.5, v[1] ** 0.5),
     lambda v: (v[0] ** 2, v[1] ** 2)),
    (predictor, "MIN_NEIGHBOURS", lambda v: max(1, v // 2), lambda v: v * 2),
    (predictor, "HP_WEIGHT", lambda v: v / 2, lambda v: v * 2),
    (predictor, "SLOPE_EPOCHS", lambda v: max(1, v // 2), lambda v: v * 2),
    (predictor, "INTERVAL", lambda v: _tails(v, 0.5), lambda v: _tails(v, 2)),
]


def _ratio(v, factor):
    return round(1 + (v - 1) * factor, 6)


#: The curve sampler's constants that the pool benchmark exercises (the model and how
#: it is refitted and read), halved and doubled as above (a ratio's excess over 1).
MODEL_VARIANTS: list[tuple[Any, str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (forest, "N_TREES", lambda v: v // 2, lambda v: v * 2),
    (forest, "MIN_LEAF", lambda v: max(1, v // 2), lambda v: v * 2),
    (forest, "MIN_CALIBRATION", lambda v: max(1, v // 2), lambda v: v * 2),
    (forest, "N_SAMPLES", lambda v: v // 2, lambda v: v * 2),
    (freeze_thaw, "GRID_RATIO", lambda v: _ratio(v, 0.5), lambda v: _ratio(v, 2)),
    (freeze_thaw, "REFIT_GROWTH", lambda v: v / 2, lambda v: v * 2),
    (freeze_thaw, "MIN_OWN_CALIBRATION", lambda v: max(1, v // 2), lambda v: v * 2),
    (planner, "PENDING_RADIUS", lambda v: v / 2, lambda v: v * 2),
]

#: The prior's constants: they act only on a search with a prior (``--prior loto``:
#: each task's prior is an earlier study of every other task, built once and shared by
#: every setting, so only how the model reads it changes).
PRIOR_VARIANTS: list[tuple[Any, str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (freeze_thaw, "PRIOR_WEIGHT", lambda v: v / 2, lambda v: v * 2),
    (freeze_thaw, "MAX_PRIOR_TRIALS", lambda v: v // 2, lambda v: v * 2),
    (freeze_thaw, "PRIOR_PER_TREE", lambda v: v // 2, lambda v: v * 2),
]

#: The curve sampler's constants that make candidates over a continuous space (a pool
#: replaces them in the pool benchmark): measured with :func:`toy_search`.
CANDIDATE_VARIANTS: list[tuple[Any, str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (planner, "N_RANDOM", lambda v: v // 2, lambda v: v * 2),
    (planner, "N_LOCAL_CENTRES", lambda v: v // 2, lambda v: v * 2),
    (planner, "N_LOCAL_EACH", lambda v: v // 2, lambda v: v * 2),
    (planner, "LOCAL_STEP", lambda v: v / 2, lambda v: v * 2),
]

#: The synthetic search of :func:`toy_search`: its epochs, trials and seeds.
TOY_EPOCHS, TOY_TRIALS, TOY_SEEDS = 8, 30, tuple(range(8))
#: Its optimum (in unit coordinates of the four parameters) and each one's weight.
TOY_OPTIMUM = (0.62, 0.3, 0.15, 0.8)
TOY_WEIGHTS = (1.0, 0.6, 0.3, 0.15)


def toy_search(seed: int, trials: int | None = None, sampler: str = "curve") -> float:
    """How far below the optimum (1.0) the best final value of a curve-sampler search of
    ``trials`` trials (default :data:`TOY_TRIALS`) lands, on a synthetic four-parameter
    space (a learning rate on a log scale, three on linear ones, one optimum off the
    centre, curves that rise to a ceiling set by the distance to it, reported each
    epoch). ``sampler``: ``curve``, or for scale ``random`` or ``tpe`` (Optuna's).
    Deterministic per seed."""
    import optuna

    from hpsearch.adapters.optuna.curve_sampler import CurveSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial) -> float:
        u = (math.log10(trial.suggest_float("lr", 1e-5, 1.0, log=True)) / 5 + 1,
             trial.suggest_float("momentum", 0.0, 1.0),
             trial.suggest_float("dropout", 0.0, 1.0),
             trial.suggest_float("width", 0.0, 1.0))
        ceiling = 1.0 - sum(w * (a - b) ** 2 for w, a, b in zip(TOY_WEIGHTS, u, TOY_OPTIMUM))
        value = 0.0
        for epoch in range(1, TOY_EPOCHS + 1):
            value = ceiling * (1 - math.exp(-0.6 * epoch)) / (1 - math.exp(-0.6 * TOY_EPOCHS))
            trial.report(value, epoch)
        return value

    samplers = {"curve": lambda: CurveSampler(seed=seed, max_epochs=TOY_EPOCHS),
                "random": lambda: optuna.samplers.RandomSampler(seed=seed),
                "tpe": lambda: optuna.samplers.TPESampler(seed=seed)}
    study = optuna.create_study(direction="maximize", sampler=samplers[sampler]())
    study.optimize(objective, n_trials=TOY_TRIALS if trials is None else trials)
    return 1.0 - study.best_value


def measure(objective: str, seeds, data, n: int, workers: int,
            sampler: str = "order", priors=None) -> dict:
    """``cost_aware``'s figures on the development tasks (see the module docstring);
    ``priors``: each task's prior (:class:`benchmarks.priors.LeaveOneTaskOut`)."""
    policies = ["cost_aware"] if sampler == "curve" else ["none", "cost_aware"]
    rows, _ = run_all(lcbench.DEV_TASKS, seeds, policies, n, workers, data,
                      log=lambda *a, **k: None, objective=objective, sampler=sampler,
                      priors=priors)
    s = summarise(rows, ["cost_aware"])[0]
    return {"hits": s["hits"], "runs": s["runs"],
            "x_none": s["x_none_order"] if sampler == "curve" else s["x_none"],
            "x_oracle": s["x_oracle"] if sampler == "curve" else None,
            "calibration": s["calibration"]}


def measure_toy(sampler: str = "curve") -> dict:
    """The median gap to the optimum over :data:`TOY_SEEDS`."""
    return {"gap": statistics.median(toy_search(seed, sampler=sampler)
                                     for seed in TOY_SEEDS)}


def fmt(m: dict) -> str:
    if "gap" in m:
        return f"{m['gap']:.4f}"
    x = "-" if m["x_none"] is None else f"{m['x_none']:.2f}x"
    oracle = "" if m.get("x_oracle") is None else f", {m['x_oracle']:.1f} x oracle"
    return f"{m['hits']}/{m['runs']} at {x}{oracle}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampler", choices=("order", "curve"), default="order",
                        help="order: the policy's constants, the fixed random order "
                             "(default); curve: the curve sampler's constants")
    parser.add_argument("--objectives", nargs="+", default=["acc", "loss"],
                        choices=sorted(lcbench.OBJECTIVES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", nargs="+", help="constants to vary (default all)")
    parser.add_argument("--prior", choices=("none", "loto"), default="none",
                        help="with --sampler curve: loto searches from a leave-one-task-"
                             "out prior (as benchmarks.policies --prior loto) and varies "
                             "the prior's constants too")
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    parser.add_argument("--out", type=Path, default=None,
                        help="default benchmarks/results/sensitivity.md "
                             "(sensitivity_curve.md with --sampler curve)")
    args = parser.parse_args(argv)
    if args.prior != "none" and args.sampler != "curve":
        print("error: --prior: only --sampler curve reads a prior", file=sys.stderr)
        return 2
    pooled = MODEL_VARIANTS if args.sampler == "curve" else VARIANTS
    if args.prior != "none":
        pooled = pooled + PRIOR_VARIANTS
    toy = CANDIDATE_VARIANTS if args.sampler == "curve" else []
    unknown = set(args.only or ()) - {v[1] for v in pooled + toy}
    if unknown:
        print(f"error: --only: unknown constant(s) {sorted(unknown)} for --sampler "
              f"{args.sampler}", file=sys.stderr)
        return 2
    pooled = [v for v in pooled if not args.only or v[1] in args.only]
    toy = [v for v in toy if not args.only or v[1] in args.only]
    if pooled and (error := lcbench.data_error(args.data)):
        print(error, file=sys.stderr)
        return 2
    out = args.out or Path("benchmarks/results/sensitivity"
                           + ("_curve" if args.sampler == "curve" else "") + ".md")

    def vary(module, name, change, measure_it):
        default = getattr(module, name)
        value = change(default)
        if value == default:
            return None  # halving 1 leaves it 1: nothing to measure
        started = time.perf_counter()
        setattr(module, name, value)
        try:
            m = measure_it()
        finally:
            setattr(module, name, default)
        print(f"{module.__name__.rsplit('.', 1)[1]}.{name} = {value!r}: {fmt(m)} "
              f"[{time.perf_counter() - started:.0f} s]", flush=True)
        return m

    def row(module, name, half, double, measures) -> str:
        default = getattr(module, name)
        cells = []
        for base, measure_it in measures:
            cells.append(fmt(base))
            for change in (half, double):
                m = vary(module, name, change, measure_it)
                cells.append("(= default)" if m is None else fmt(m))
        return f"| `{module.__name__.rsplit('.', 1)[1]}.{name}` | `{default!r}` | " + \
            " | ".join(cells) + " |"

    text = ""
    if pooled:
        base, measures = {}, []
        for objective in args.objectives:
            priors = None
            if args.prior != "none":
                priors = priors_mod.LeaveOneTaskOut(
                    lcbench.DEV_TASKS, args.n, args.data, objective,
                    priors_mod.PRIORS[args.prior], args.workers)

            def measure_it(objective=objective, priors=priors):
                return measure(objective, args.seeds, args.data, args.n, args.workers,
                               args.sampler, priors)
            base[objective] = measure_it()
            print(f"defaults, {objective}: {fmt(base[objective])}", flush=True)
            measures.append((base[objective], measure_it))
        lines = ["| constant | default | " + " | ".join(
            f"{o}: default | {o}: half | {o}: double" for o in args.objectives) + " |",
            "|---|---|" + "---|---|---|" * len(args.objectives)]
        lines += [row(*v, measures) for v in pooled]
        what = ("Cost-aware policy" if args.sampler == "order" else
                "Curve sampler (cost_aware searching with it; money x random search "
                "without pruning)")
        if args.prior != "none":
            what += " from a leave-one-task-out prior"
        text += (f"{what}, each constant at half and double its value: hits and median "
                 f"money to the hit, 13 development tasks, seeds "
                 f"{' '.join(map(str, args.seeds))}, pools of {args.n}, "
                 f"{args.workers} workers.\n\n" + "\n".join(lines) + "\n")
    if toy:
        base = measure_toy()
        print(f"defaults, synthetic: {fmt(base)}", flush=True)
        lines = ["| constant | default | default | half | double |", "|---|---|---|---|---|"]
        lines += [row(*v, [(base, measure_toy)]) for v in toy]
        text += ("\n" if text else "") + (
            f"Curve sampler's candidates, each constant at half and double its value: "
            f"median gap of the best final value to the optimum after {TOY_TRIALS} trials "
            f"on a synthetic four-parameter space (benchmarks.sensitivity.toy_search), "
            f"seeds {TOY_SEEDS[0]}-{TOY_SEEDS[-1]}; for scale, random search "
            f"{fmt(measure_toy('random'))}, Optuna's TPE {fmt(measure_toy('tpe'))}.\n\n"
            + "\n".join(lines) + "\n")
    publish(out, text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
