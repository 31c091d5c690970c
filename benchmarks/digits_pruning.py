"""The digits example under each pruning policy: money spent and best accuracy.

A real demonstration, not the policy benchmark (that replays real learning curves with
simulated time, see ``benchmarks/policies.py`` when it exists): the example search of
``search_spaces/digits_mlp.yaml`` runs for real, on this machine's CPUs, once per policy
and seed, all in one process and one Ray session, side by side. Money is the ledger's
(billed trial time x the local-cpu price); the figures to quote are the ratios to
``none`` on the same seed.

    python -m benchmarks.digits_pruning [--seeds 0 1 2] [--policies none asha cost_aware]
"""

from __future__ import annotations

import argparse
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
                rows.append({
                    "seed": seed, "policy": policy, "spent": result.spent,
                    "currency": result.currency,
                    "best": result.best_trial.value if result.best_trial else float("nan"),
                    "pruned": sum(t.state == TrialState.PRUNED for t in trials),
                    "epochs": sum(len(t.intermediate_values) for t in trials),
                    "wall_s": time.perf_counter() - started,
                })
                r = rows[-1]
                print(f"seed {seed} {policy:10s} spent {r['spent']:.6f} {r['currency']} "
                      f"best {r['best']:.4f} pruned {r['pruned']:2d} epochs {r['epochs']:3d} "
                      f"wall {r['wall_s']:.0f} s", flush=True)
    ray.shutdown()

    base = {r["seed"]: r for r in rows if r["policy"] == "none"}
    print()
    print("| policy | spent (x none) | best val_acc | pruned trials | epochs trained |")
    print("|---|---|---|---|---|")
    for policy in args.policies:
        mine = [r for r in rows if r["policy"] == policy]
        ratio = (statistics.median(r["spent"] / base[r["seed"]]["spent"] for r in mine)
                 if base else float("nan"))
        print(f"| {policy} | {ratio:.2f}x | {statistics.median(r['best'] for r in mine):.4f} | "
              f"{statistics.median(r['pruned'] for r in mine):g} | "
              f"{statistics.median(r['epochs'] for r in mine):g} |")
    print(f"\nmedians over seeds {args.seeds}; 16 trials x 20 epochs, 2 at a time, "
          f"money = billed trial time x the local-cpu price")
    return 0


if __name__ == "__main__":
    sys.exit(main())
