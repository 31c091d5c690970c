"""Benchmark: how much each constant of the cost-aware policy matters.

Every constant that shapes a decision (in :mod:`hpsearch.pruning.cost_aware` and
:mod:`hpsearch.pruning.predictor`) is set to half and to double its value in turn (a
share of a schedule or a tail of an interval: halved or doubled, capped where it must
be), and the policy benchmark is run again: the same pools, orders and workers as
``python -m benchmarks.policies``, on the development tasks, for each objective. Quoted
per setting: hits over runs and the median money to the hit (x no pruning's), beside the
defaults' figures. A constant whose halving and doubling move neither figure much is
not fitted; one that moves them is a real choice, and the table says which way.

    python -m benchmarks.sensitivity [--objectives acc loss] [--seeds 0 1 2 3 4]
        [--only NAME ...] [--out benchmarks/results/sensitivity.md]

The constants are changed in this process only (module attributes, restored after
each run); nothing is written to the package.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import lcbench
from benchmarks.policies import publish, run_all, summarise
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


def measure(objective: str, seeds, data, n: int, workers: int) -> dict:
    rows, _ = run_all(lcbench.DEV_TASKS, seeds, ["none", "cost_aware"], n, workers, data,
                      log=lambda *a, **k: None, objective=objective)
    s = summarise(rows, ["cost_aware"])[0]
    return {"hits": s["hits"], "runs": s["runs"], "x_none": s["x_none"],
            "calibration": s["calibration"]}


def fmt(m: dict) -> str:
    x = "-" if m["x_none"] is None else f"{m['x_none']:.2f}x"
    return f"{m['hits']}/{m['runs']} at {x}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="+", default=["acc", "loss"],
                        choices=sorted(lcbench.OBJECTIVES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", nargs="+", help="constants to vary (default all)")
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sensitivity.md"))
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {v[1] for v in VARIANTS}
    if unknown:
        print(f"error: --only: unknown constant(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    if error := lcbench.data_error(args.data):
        print(error, file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if not args.only or v[1] in args.only]
    lines = ["| constant | default | " + " | ".join(
        f"{o}: default | {o}: half | {o}: double" for o in args.objectives) + " |",
        "|---|---|" + "---|---|---|" * len(args.objectives)]
    base = {}
    for objective in args.objectives:
        base[objective] = measure(objective, args.seeds, args.data, args.n, args.workers)
        print(f"defaults, {objective}: {fmt(base[objective])}", flush=True)
    for module, name, half, double in variants:
        default = getattr(module, name)
        cells = []
        for objective in args.objectives:
            cells.append(fmt(base[objective]))
            for change in (half, double):
                started = time.perf_counter()
                setattr(module, name, change(default))
                try:
                    m = measure(objective, args.seeds, args.data, args.n, args.workers)
                finally:
                    setattr(module, name, default)
                cells.append(fmt(m))
                print(f"{module.__name__.rsplit('.', 1)[1]}.{name} = {change(default)!r} "
                      f"({objective}): {fmt(m)} [{time.perf_counter() - started:.0f} s]",
                      flush=True)
        lines.append(f"| `{name}` | `{default!r}` | " + " | ".join(cells) + " |")
    text = (f"Cost-aware policy, each constant at half and double its value: hits and median "
            f"money to the hit (x none), 13 development tasks, seeds "
            f"{' '.join(map(str, args.seeds))}, pools of {args.n}, {args.workers} workers.\n\n"
            + "\n".join(lines) + "\n")
    publish(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
