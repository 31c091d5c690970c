"""Replay recorded learning curves through the real hpsearch path on Ray Tune.

The replay backend runs ``hpsearch.run`` unchanged (Optuna study, sampler, Ray Tune
scheduling, the pruning policy, the accountant and ledger) but each trial, instead of
training, reports a recorded curve epoch by epoch. Time is simulated and faithful to
concurrency: a clock actor lets a trial report its next epoch only when that epoch's end
is the earliest pending event of all running trials, and only once every worker that
should be busy holds a trial, so the order of reports follows the curves' epoch times on
W workers, not this machine's speed. Nothing sleeps. The ledger bills on that clock.

:func:`crosscheck` runs a small pool both ways (this path and :mod:`hpsearch.simulate`)
and compares which trials were stopped, at which epoch, and the money spent.

    python -m benchmarks.replay [--task fashion-mnist] [--n 16] [--workers 2]
        [--policies cost_aware ray-asha]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import lcbench, peers
from hpsearch import keys
from hpsearch.simulate import Curve, simulate

POLICY_CONFIG = {"cost_aware": {"policy": "cost_aware"},
                 "ray-asha": {"policy": "asha", "min_epochs": 1, "reduction_factor": 3},
                 "none": {"policy": "none"}}


class SimClock:
    """The simulated clock (a Ray actor): grants epoch ends in time order.

    Args:
        workers: Trials running at once.
        to_start: Trials that will start in all (the clock waits for each to register
            while a worker is free, so none falls behind).
    """

    def __init__(self, workers: int, to_start: int):
        self.workers = workers
        self.to_start = to_start
        #: Epochs each study trial has reported: a resumed attempt (after a pause)
        #: replays from the next one, as a trial resumed from its checkpoint trains.
        self.done: dict[int, int] = {}
        self.now = 0.0
        self.pending: dict[str, tuple[float, int] | None] = {}
        self.sequence = 0
        #: Trials Tune holds to run (PENDING or RUNNING) at its last step's end.
        self.live = 0
        #: Step ends still to see after a trial ended before Tune has asked the search
        #: for what the freed worker runs (that step's end, then the next one's).
        self.stale = 0
        #: Epoch ends granted to each running trial, and those the driver has seen
        #: (its result processed): nothing moves while a granted one is unseen, and with
        #: a worker free, not before Tune has asked the search again (a paused trial may
        #: be resumed on what that result showed, at that instant, as in the simulator).
        self.granted: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.changed = asyncio.Condition()

    async def register(self, trial: str) -> float:
        async with self.changed:
            self.pending[trial] = None
            self.to_start -= 1
            self.changed.notify_all()
            return self.now

    async def unregister(self, trial: str) -> None:
        async with self.changed:
            self.pending.pop(trial, None)
            self.granted.pop(trial, None)
            self.seen.pop(trial, None)
            # A worker is free: nothing moves until Tune has asked the search what it
            # runs next (a new trial or a paused one resumed), as the simulator does at
            # the same instant.
            self.stale = 2
            self.changed.notify_all()

    async def result_seen(self, trial: str) -> None:
        async with self.changed:
            if trial in self.granted:
                self.seen[trial] = self.seen.get(trial, 0) + 1
                if len(self.pending) < self.workers:
                    self.stale = 2
            self.changed.notify_all()

    async def step_end(self, live: int) -> None:
        async with self.changed:
            self.stale = max(0, self.stale - 1)
            self.live = live
            self.changed.notify_all()

    def _ready(self, trial: str) -> bool:
        busy = min(self.workers, len(self.pending) + max(0, self.to_start))
        if len(self.pending) < busy or any(v is None for v in self.pending.values()):
            return False
        if any(self.seen.get(t, 0) < n for t, n in self.granted.items()):
            return False  # the driver has not seen every result granted yet
        if self.stale or len(self.pending) < min(self.workers, self.live):
            return False  # an attempt Tune will start has not registered yet
        return min(self.pending, key=lambda k: self.pending[k]) == trial

    async def wait_until(self, trial: str, t: float) -> float:
        """Block until ``t`` is the earliest pending event; then the clock shows ``t``."""
        async with self.changed:
            self.pending[trial] = (t, self.sequence)
            self.sequence += 1
            self.changed.notify_all()
            await self.changed.wait_for(lambda: self._ready(trial))
            self.now = max(self.now, t)
            self.pending[trial] = None
            self.granted[trial] = self.granted.get(trial, 0) + 1
            return self.now

    def time(self) -> float:
        return self.now

    def epochs_done(self, number: int) -> int:
        return self.done.get(number, 0)

    def reported(self, number: int, epoch: int) -> None:
        self.done[number] = max(self.done.get(number, 0), epoch)


def replay(config: dict[str, Any], clock_name: str, curves: list[Curve], metric: str) -> None:
    """Report a recorded curve, epoch by epoch, on the simulated clock; a resumed attempt
    (the trial paused earlier) goes on from the epoch after its last report."""
    import ray
    from ray import tune

    clock = ray.get_actor(clock_name)
    curve = curves[int(config["config_id"])]
    number = int(config.get(keys.TRIAL_NUMBER, -1))
    trial = tune.get_context().get_trial_id()
    start = ray.get(clock.register.remote(trial))
    done = ray.get(clock.epochs_done.remote(number))
    before = curve.cum_time_s[done - 1] if done else 0.0
    for epoch in range(done + 1, curve.epochs + 1):
        now = ray.get(clock.wait_until.remote(
            trial, start + curve.cum_time_s[epoch - 1] - before))
        ray.get(clock.reported.remote(number, epoch))
        tune.report({
            metric: curve.values[epoch - 1],
            keys.EPOCH: epoch,
            keys.EPOCH_TIME_S: curve.epoch_s(epoch),
            keys.TRIAL_TIME_S: now - start,
            keys.START_EPOCH: done,
        })


class ReplayBackend:
    """Trials replay ``curves``; the ledger bills on the simulated clock."""

    def __init__(self, curves: list[Curve], workers: int, trials: int):
        import ray
        from ray.tune import Callback

        name = f"hps-sim-clock-{id(self)}"
        self.clock_actor = ray.remote(SimClock).options(name=name, num_cpus=0).remote(
            workers, trials)
        self.name = name
        self.curves = curves
        actor = self.clock_actor

        class Unregister(Callback):
            def on_trial_complete(self, iteration, trials, trial, **info):
                ray.get(actor.unregister.remote(trial.trial_id))

            on_trial_error = on_trial_complete

            def on_trial_result(self, iteration, trials, trial, result, **info):
                ray.get(actor.result_seen.remote(trial.trial_id))

            def on_step_end(self, iteration, trials, **info):
                live = sum(1 for t in trials if t.status in ("PENDING", "RUNNING"))
                ray.get(actor.step_end.remote(live))

        self._callbacks = [Unregister()]

    def check(self, config) -> None:
        pass

    def trainable(self, spec):
        name, curves, metric = self.name, self.curves, spec.config.objective.metric

        def trainable(config: dict[str, Any], spec: Any = None) -> None:
            replay(config, name, curves, metric)

        return trainable

    def clock(self) -> float:
        import ray

        return ray.get(self.clock_actor.time.remote())

    def callbacks(self) -> list:
        return self._callbacks


def ray_path(pool: lcbench.Pool, order: list[int], workers: int, policy: str,
             run_dir: Path, starts: int | None = None) -> dict:
    """Run the pool through hpsearch.run on Ray with the replay backend (``starts``:
    the attempts the clock waits for, default one per trial; a policy that pauses and
    resumes starts some trials again)."""
    import optuna

    import hpsearch

    n = len(order)
    max_epochs = max(c.epochs for c in pool.curves)
    run_dir.mkdir(parents=True)
    study = optuna.create_study(storage=f"sqlite:///{run_dir / 'optuna.db'}",
                                study_name="replay", direction="maximize")
    for config_id in order:
        study.enqueue_trial({"config_id": int(config_id)})
    cfg = {
        "name": "replay",
        "trainable": "benchmarks.replay:replay",
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "max_epochs": max_epochs,
        "space": {"config_id": {"type": "categorical", "choices": list(range(len(pool.curves)))}},
        "search": {"sampler": "random", "n_trials": n, "concurrency": workers, "seed": 0},
        "resources": {"cpu": 0.01},
        "pruning": POLICY_CONFIG[policy],
        "pricing": {"price_per_hour": 1.0, "currency": "USD"},
    }
    backend = ReplayBackend(pool.curves, workers, n if starts is None else starts)
    result = hpsearch.run(cfg, run_dir=run_dir, emit=None, backend=backend)
    stopped = {}
    for t in result.study.get_trials():
        config_id = int(t.params["config_id"])
        if t.state.name == "PRUNED":
            stopped[config_id] = max(t.intermediate_values)
    busy = 0.0
    opened: dict[int, float] = {}
    for line in (run_dir / "ledger.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "open":
            opened[event["trial"]] = event["start_s"]
        elif event["event"] == "close":
            busy += event["at_s"] - opened.pop(event["trial"])
    return {"stopped": stopped, "busy_s": busy, "spent": result.spent, "kept": result.kept}


def sim_path(pool: lcbench.Pool, order: list[int], workers: int, policy: str) -> dict:
    max_epochs = max(c.epochs for c in pool.curves)
    # The Ray path's space is one categorical config_id: the policy sees the same params.
    result = simulate(pool.curves, order, workers,
                      peers.make(policy, max_epochs=max_epochs, n_trials=len(order), seed=0),
                      params=[{"config_id": i} for i in range(len(pool.curves))])
    stopped = {t: e for t, e in result.epochs_done.items() if t not in result.completed}
    return {"stopped": stopped, "busy_s": result.busy_s(), "starts": len(result.starts)}


def crosscheck(task: str, seed: int, n: int, workers: int, policy: str,
               data: Path | None, run_dir: Path) -> dict:
    """Both paths on one small pool; returns both outcomes and whether they agree."""
    pool = lcbench.load_pool(task, n, seed, data)
    order = [int(i) for i in np.random.default_rng([seed, 1]).permutation(n)]
    # The clock waits for one attempt per trial: were it to wait for the simulation's
    # resumes too, a Ray path that resumed fewer would hang instead of disagreeing.
    on_ray = ray_path(pool, order, workers, policy, run_dir)
    in_sim = sim_path(pool, order, workers, policy)
    agree = (on_ray["stopped"] == in_sim["stopped"]
             and abs(on_ray["busy_s"] - in_sim["busy_s"]) <= 1e-6 * max(1.0, in_sim["busy_s"]))
    return {"task": task, "policy": policy, "ray": on_ray, "sim": in_sim, "agree": agree}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", nargs="+", default=["cost_aware", "ray-asha"])
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir())
    args = parser.parse_args(argv)
    from benchmarks.common import local_ray

    ray = local_ray()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies:
            out = crosscheck(args.task, args.seed, args.n, args.workers, policy, args.data,
                             Path(tmp) / policy)
            ok &= out["agree"]
            print(f"{policy}: agree={out['agree']}  stopped (config: epoch) ray "
                  f"{out['ray']['stopped']} sim {out['sim']['stopped']}  busy seconds ray "
                  f"{out['ray']['busy_s']:.1f} sim {out['sim']['busy_s']:.1f}")
    ray.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
