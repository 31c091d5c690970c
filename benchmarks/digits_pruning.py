"""The digits example under each pruning policy: money spent and best accuracy.

A real demonstration, not the policy benchmark (that replays real learning curves with
simulated time, see ``benchmarks/policies.py`` when it exists): the example search of
``search_spaces/digits_mlp.yaml`` runs for real, on this machine's CPUs, once per policy
and seed, all in one process and one Ray session, side by side. Money is the ledger's
(billed trial time x the local-cpu price); the figures to quote are the ratios to
``none`` on the same seed, and how often a policy ended with no pruning's best value
(the same TPE seed proposes the same first trials; real runs with 2 parallel trials are
not bit-reproducible, so later proposals can differ).

    python -m benchmarks.digits_pruning [--seeds 0 1 2] [--policies none asha cost_aware]
        [--set objective.metric=val_loss --set objective.mode=min]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, local_ray

SPACE = ROOT / "search_spaces" / "digits_mlp.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=["none", "asha", "cost_aware"])
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="extra overrides for every run")
    args = parser.parse_args(argv)

    from optuna.trial import TrialState

    import hpsearch

    ray = local_ray()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for policy in args.policies:
                started = time.perf_counter()
                result = hpsearch.run(
                    SPACE, [f"search.seed={seed}", f"pruning.policy={policy}",
                            *args.overrides],
                    run_dir=Path(tmp) / f"{policy}-{seed}", emit=None)
                trials = result.study.get_trials(deepcopy=False)
                metric = (result.study.metric_names or ["objective"])[0]
                rows.append({
                    "seed": seed, "policy": policy, "spent": result.spent,
                    "sign": -1.0 if result.study.direction.name == "MINIMIZE" else 1.0,
                    "currency": result.currency,
                    "best": result.best_trial.value if result.best_trial else float("nan"),
                    "pruned": sum(t.state == TrialState.PRUNED for t in trials),
                    **pauses(trials),
                    "epochs": sum(len(t.intermediate_values) for t in trials),
                    "wall_s": time.perf_counter() - started,
                })
                r = rows[-1]
                print(f"seed {seed} {policy:10s} spent {r['spent']:.6f} {r['currency']} "
                      f"best {r['best']:.4f} pruned {r['pruned']:2d} paused {r['paused']:2d} "
                      f"resumed {r['resumed']:2d} epochs {r['epochs']:3d} "
                      f"wall {r['wall_s']:.0f} s", flush=True)
    ray.shutdown()
    print()
    print(table(rows, args.policies, metric))
    print(f"\nmedians over seeds {args.seeds}; 16 trials x 20 epochs, 2 at a time, "
          f"money = billed trial time x the local-cpu price; none's best or better = the "
          f"runs that ended with no pruning's best {metric} or a better one, same seed")
    return 0


def pauses(trials) -> dict[str, int]:
    """How many of a run's trials the policy paused (resumed or not), and how many of
    them were resumed (the core records both on each trial)."""
    from hpsearch import keys

    paused = [t for t in trials if t.user_attrs.get(keys.ATTR_PAUSED_AT)]
    return {"paused": len(paused),
            "resumed": sum(bool(t.user_attrs.get(keys.ATTR_RESUMES)) for t in paused)}


def table(rows: list[dict], policies, metric: str) -> str:
    """The markdown table: per policy, medians over seeds of money as a share of no
    pruning's on the same seed, the best value, pruned trials, pauses, resumes and
    epochs, and on how many seeds the policy ended with no pruning's best value or a
    better one (each row's ``sign``: 1 to maximise, -1 to minimise)."""
    base = {r["seed"]: r for r in rows if r["policy"] == "none"}
    lines = [f"| policy | spent (x none) | best {metric} | none's best or better | pruned trials "
             f"| paused (resumed) | epochs trained |", "|---|---|---|---|---|---|---|"]
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy]
        known = [r for r in mine if r["seed"] in base]
        ratio = (statistics.median(r["spent"] / base[r["seed"]]["spent"] for r in known)
                 if known else float("nan"))
        found = sum(r["sign"] * r["best"] >= r["sign"] * base[r["seed"]]["best"]
                    or math.isclose(r["best"], base[r["seed"]]["best"], rel_tol=1e-9)
                    for r in known)
        med = lambda key: statistics.median(r[key] for r in mine)  # noqa: E731
        lines.append(f"| {policy} | {ratio:.2f}x | {med('best'):.4g} | {found}/{len(known)} "
                     f"| {med('pruned'):g} | {med('paused'):g} ({med('resumed'):g}) "
                     f"| {med('epochs'):g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
