"""Earlier studies of the same space, for the curve sampler's prior: leave one task out.

A task's prior is one earlier study of every other task (the development tasks and the
tasks of the run, but not the task searched): a search of a 200-configuration pool at
seed :data:`PRIOR_SEED` (another pool, another order than any measured seed), recorded in
a real Optuna study as a run's study records it, and read back by the same function that
reads ``search.prior`` (:func:`hpsearch.adapters.optuna.curve_sampler.prior_from_studies`).
``loto`` records what an hpsearch user would have kept: a ``cost_aware`` search in a
random order (mostly partial curves: paused and pruned trials, a few finished);
``loto-full`` an exhaustive one (every configuration trained to the end, as a study
without pruning holds).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from benchmarks import lcbench, peers, sampled
from hpsearch.simulate import simulate

#: The seed of every prior study's pool and order (the measured seeds are 0-9).
PRIOR_SEED = 1000
#: ``--prior``: the policy each earlier study was searched with (None: no prior).
PRIORS = {"none": None, "loto": "cost_aware", "loto-full": "none"}


class LeaveOneTaskOut:
    """The prior of each task: one earlier study of every other task (see the module).

    Args:
        tasks: The run's tasks (the development tasks are added).
        n: Configurations per pool.
        data: The benchmark data folder.
        objective: ``acc`` or ``loss``.
        policy: The policy the earlier studies were searched with.
        workers: Their workers.
        log: Where progress goes.
    """

    def __init__(self, tasks: Sequence[str], n: int, data: Any, objective: str,
                 policy: str, workers: int = 4, log: Callable[[str], None] = print):
        synthetic = [t for t in tasks if t == "synthetic"]
        others = [t for t in tasks if t != "synthetic"]
        self.tasks = list(dict.fromkeys(([*lcbench.DEV_TASKS, *others] if data else [])
                                        + synthetic))
        self.n, self.data, self.objective = n, data, objective
        self.policy, self.workers, self.log = policy, workers, log
        self._studies: dict[tuple[str, int], Any] = {}

    def __call__(self, task: str) -> list[Any]:
        """The earlier studies ``task``'s search starts from (Optuna studies)."""
        if task == "synthetic":
            # Synthetic pools share a generator, not a task: other seeds stand in.
            return [self.study("synthetic", PRIOR_SEED + k) for k in range(4)]
        return [self.study(t, PRIOR_SEED) for t in self.tasks
                if t != task and t != "synthetic"]

    def study(self, task: str, seed: int):
        """The earlier study of ``task`` (searched once, then kept)."""
        key = (task, seed)
        if key not in self._studies:
            pool = lcbench.load_pool(task, self.n, seed, self.data, self.objective)
            order = list(np.random.default_rng([seed, 1]).permutation(self.n))
            space = sampled.pool_space(pool.configs, lcbench.task_space(task, self.data))
            study = sampled.SampledStudy(pool.configs, space, pool.objective.mode, seed,
                                         "order", order=order)
            epochs = max(c.epochs for c in pool.curves)
            policy = peers.make(self.policy, max_epochs=epochs, n_trials=self.n, seed=seed,
                                mode=pool.objective.mode, metric=pool.objective.metric)
            simulate(pool.curves, order, self.workers, policy, params=pool.configs,
                     study=study)
            self._studies[key] = study.optuna
            self.log(f"prior: searched {task} (seed {seed}, {self.policy}) for the others")
        return self._studies[key]
