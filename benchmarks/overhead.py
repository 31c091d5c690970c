"""Per-trial orchestration overhead of ``hpsearch run`` against a plain Optuna loop.

Both sides run the same trivial Lightning work (``benchmarks/trivial.py``: 3 epochs of
3 batches) one trial at a time, with the same sampler and seed:

* **optuna**: ``study.optimize`` in this process, a Lightning ``Trainer`` per trial that
  reports ``val_acc`` to the trial each epoch (how people wire Optuna by hand);
* **hpsearch**: ``hpsearch.run`` on a Ray already started in this process, so each trial
  pays for what hpsearch adds: Ray Tune scheduling, a trial process (reused between
  trials), a checkpoint per epoch and the SQLite study of record.

Each side runs N_SMALL and N_LARGE trials, alternating, ``--repeats`` times. The marginal
cost of one trial is (T(N_LARGE) - T(N_SMALL)) / (N_LARGE - N_SMALL); the fixed cost of a
run is what remains. Medians over repeats; the ratios are the figures to quote (absolute
seconds on a shared 2-core machine are noise). Ray's own start-up (``ray.init``) is
timed once and reported apart.

    python -m benchmarks.overhead [--repeats 3] [--small 2] [--large 10]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

EPOCHS = 3
SPACE = {
    "lr": {"type": "float", "low": 1e-3, "high": 0.5, "log": True},
    "hidden": {"type": "int", "low": 4, "high": 64, "log": True},
}


def _quiet() -> None:
    """Lightning's per-Trainer notices would drown the figures."""
    import warnings

    import pytorch_lightning  # noqa: F401  (sets its loggers' levels on import)

    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def run_optuna(n_trials: int, seed: int) -> float:
    """Wall seconds of a plain Optuna loop over ``n_trials`` trivial trials."""
    import optuna
    import pytorch_lightning as pl

    from benchmarks.trivial import build
    from hpsearch.spec.config import load

    space = load({"name": "x", "trainable": "benchmarks.trivial:build",
                  "objective": {"metric": "val_acc"}, "max_epochs": EPOCHS,
                  "space": SPACE}).space

    class Report(pl.Callback):
        def __init__(self, trial):
            self.trial = trial

        def on_train_epoch_end(self, trainer, module):
            self.trial.report(float(trainer.callback_metrics["val_acc"]),
                              trainer.current_epoch + 1)

    def objective(trial):
        params = space.suggest(trial)  # define-by-run, as hpsearch asks
        pl.seed_everything(seed + trial.number, verbose=False)
        model, data = build(params)
        trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0,
                             callbacks=[Report(trial)])
        trainer.fit(model, datamodule=data)
        return float(trainer.callback_metrics["val_acc"])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        study = optuna.create_study(storage=f"sqlite:///{tmp}/o.db", direction="maximize",
                                    sampler=optuna.samplers.TPESampler(seed=seed))
        study.optimize(objective, n_trials=n_trials)
        return time.perf_counter() - started


def run_hpsearch(n_trials: int, seed: int) -> float:
    """Wall seconds of ``hpsearch.run`` over ``n_trials`` trivial trials, one at a time."""
    import hpsearch

    raw = {"name": "overhead", "trainable": "benchmarks.trivial:build",
           "objective": {"metric": "val_acc", "mode": "max"}, "max_epochs": EPOCHS,
           "space": SPACE,
           "search": {"sampler": "tpe", "n_trials": n_trials, "concurrency": 1, "seed": seed}}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        hpsearch.run(raw, run_dir=Path(tmp) / "run", emit=None)
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", type=int, default=2)
    parser.add_argument("--large", type=int, default=10)
    args = parser.parse_args(argv)
    if args.large <= args.small:
        parser.error("--large must be greater than --small")

    _quiet()
    from benchmarks.common import local_ray

    started = time.perf_counter()
    ray = local_ray()
    ray_init_s = time.perf_counter() - started

    times: dict[tuple[str, int], list[float]] = {}
    runners = {"optuna": run_optuna, "hpsearch": run_hpsearch}
    run_optuna(1, 0)  # warm imports and caches for the in-process side
    for rep in range(args.repeats):
        for n in (args.small, args.large):
            for name, fn in runners.items():
                t = fn(n, seed=rep)
                times.setdefault((name, n), []).append(t)
                print(f"rep {rep} {name:8s} {n:3d} trials: {t:7.2f} s", flush=True)
    ray.shutdown()

    med = {k: statistics.median(v) for k, v in times.items()}
    per_trial, fixed = {}, {}
    for name in runners:
        per_trial[name] = (med[(name, args.large)] - med[(name, args.small)]) / (
            args.large - args.small)
        fixed[name] = med[(name, args.small)] - args.small * per_trial[name]
    print()
    print(f"| side | per trial (s) | fixed per run (s) | {args.large} trials (s) |")
    print("|---|---|---|---|")
    for name in runners:
        print(f"| {name} | {per_trial[name]:.2f} | {fixed[name]:.2f} | "
              f"{med[(name, args.large)]:.2f} |")
    print()
    print(f"per-trial ratio hpsearch/optuna: {per_trial['hpsearch'] / per_trial['optuna']:.2f}x"
          f"  (+{per_trial['hpsearch'] - per_trial['optuna']:.2f} s per trial)")
    print(f"{args.large}-trial run ratio hpsearch/optuna: "
          f"{med[('hpsearch', args.large)] / med[('optuna', args.large)]:.2f}x")
    print(f"ray.init() once per process: {ray_init_s:.2f} s (not in the figures above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
