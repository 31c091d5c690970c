"""Spot against on-demand on the digits example, with simulated preemptions.

The example search runs for real, twice per seed, side by side in one process and one
Ray session: on demand, and on spot with simulated preemptions that really kill trial
processes (SIGKILL, a Poisson rate per trial-hour; the trials restart from their
checkpoints). Both are priced as AWS g4dn.xlarge (a CPU trial pays 1 of its 4 vCPUs).
The digits trials last seconds, so the rate is compressed accordingly (hundreds per
trial-hour) to preempt a good share of them; what is measured per preemption holds at
any rate.

Figures: money on spot (wasted work included) against on demand; preemptions and the
share of trials preempted; progress lost per preemption (seconds of work since the last
checkpoint, and epochs); time from the kill until the trial reports its next epoch.

    python -m benchmarks.spot_digits [--seeds 0 1 2] [--rate 400]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, local_ray

SPACE = ROOT / "search_spaces" / "digits_mlp.yaml"
INSTANCE = "aws:g4dn.xlarge"


def preemption_figures(run_dir: Path) -> list[dict]:
    """Per preemption: work lost (s) and the time until the trial's next report (s)."""
    events = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    out, last_checkpoint, killed_at = [], {}, {}
    for event in events:
        if "trial" not in event:
            continue  # the ledger's header and alive events
        trial = event["trial"]
        if event["event"] == "open":
            last_checkpoint[trial] = event["start_s"]
        elif event["event"] == "checkpoint":
            if trial in killed_at:
                out.append({"lost_s": killed_at[trial][1],
                            "resume_s": event["at_s"] - killed_at.pop(trial)[0]})
            last_checkpoint[trial] = event["at_s"]
        elif event["event"] == "close" and event["outcome"] == "preempted":
            killed_at[trial] = (event["at_s"], event["at_s"] - last_checkpoint[trial])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rate", type=float, default=400.0,
                        help="simulated preemptions per trial-hour (default 400)")
    args = parser.parse_args(argv)
    ray = local_ray()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for kind in ("on-demand", "spot"):
                rows.append(run_one(seed, kind, args.rate, Path(tmp) / f"{kind}-{seed}"))
                r = rows[-1]
                print(f"seed {seed} {kind:9s} spent {r['spent']:.6f} USD (wasted "
                      f"{r['wasted']:.6f}) best {r['best']:.4f} complete "
                      f"{r['complete']}/{r['trials']} preemptions {r['preemptions']}",
                      flush=True)
    ray.shutdown()
    print_table(rows, args.seeds, args.rate)
    return 0


def run_one(seed: int, kind: str, rate: float, run_dir: Path) -> dict:
    """Run the example once (``kind``: ``on-demand`` or ``spot`` with ``rate`` simulated
    preemptions per trial-hour) into ``run_dir``; its row of figures."""
    import optuna

    import hpsearch

    overrides = [f"search.seed={seed}", f"pricing.instance={INSTANCE}"]
    if kind == "spot":
        overrides += ["pricing.spot=true", f"preemption.simulate.rate_per_hour={rate}",
                      "preemption.simulate.signal=kill"]
    result = hpsearch.run(SPACE, overrides, run_dir=run_dir, emit=None)
    trials = optuna.load_study(study_name=result.study.study_name,
                               storage=result.storage_url).trials
    preempted = [t for t in trials if t.user_attrs.get("preemptions")]
    lost_epochs = [e - r for t in preempted
                   for e, r in zip([t.user_attrs["epochs"]],
                                   t.user_attrs.get("resumed_from_epochs", []))]
    figures = preemption_figures(run_dir)
    wasted = sum(t.user_attrs.get("wasted_cost", 0.0) for t in trials)
    return {
        "seed": seed, "kind": kind, "spent": result.spent, "wasted": wasted,
        "best": result.best_trial.value if result.best_trial else float("nan"),
        "complete": sum(t.state.name == "COMPLETE" for t in trials),
        "trials": len(trials),
        "preemptions": sum(t.user_attrs.get("preemptions", 0) for t in trials),
        "preempted_share": len(preempted) / len(trials),
        "lost_s": [f["lost_s"] for f in figures],
        "resume_s": [f["resume_s"] for f in figures],
        "lost_epochs": lost_epochs,
    }


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_table(rows: list[dict], seeds: list[int], rate: float) -> None:
    """The Markdown table of spot against on-demand, medians over the seeds."""
    med = _median
    spot = [r for r in rows if r["kind"] == "spot"]
    base = {r["seed"]: r for r in rows if r["kind"] == "on-demand"}
    ratio = med([r["spent"] / base[r["seed"]]["spent"] for r in spot])
    lost = [x for r in spot for x in r["lost_s"]]
    resume = [x for r in spot for x in r["resume_s"]]
    print()
    print("| | on-demand | spot + preemptions |")
    print("|---|---|---|")
    print(f"| money (median, x on-demand) | 1.00 | {ratio:.2f} |")
    print(f"| wasted share of spot money | - | "
          f"{med([r['wasted'] / r['spent'] for r in spot]):.3f} |")
    print(f"| trials complete | {sum(b['complete'] for b in base.values())}/"
          f"{sum(b['trials'] for b in base.values())} | "
          f"{sum(r['complete'] for r in spot)}/{sum(r['trials'] for r in spot)} |")
    print(f"| preemptions (trials preempted) | 0 | {sum(r['preemptions'] for r in spot)} "
          f"({med([r['preempted_share'] for r in spot]):.0%} of trials, median) |")
    print(f"| work lost per preemption (median / max, s) | - | {med(lost):.2f} / "
          f"{max(lost, default=float('nan')):.2f} |")
    print(f"| kill to next reported epoch (median / max, s) | - | {med(resume):.2f} / "
          f"{max(resume, default=float('nan')):.2f} |")
    print(f"| best val_acc (median) | {med([b['best'] for b in base.values()]):.4f} | "
          f"{med([r['best'] for r in spot]):.4f} |")
    print(f"\nseeds {seeds}; {INSTANCE}, spot at {rate:g} simulated preemptions "
          f"per trial-hour (SIGKILL), checkpoint every epoch")


if __name__ == "__main__":
    sys.exit(main())
