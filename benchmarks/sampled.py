"""A sampler in the loop: new trials proposed by hpsearch's default sampler from what the
study has seen, instead of a fixed random order.

The benchmark's pools are fixed (200 configurations with known curves), so a proposal
is mapped to the nearest configuration of the pool not tried yet (in the unit cube of
the space: each hyperparameter scaled to [0, 1] over its range, on a log scale where the
space is). The study is a real in-memory Optuna study that sees what a real run's study
sees (:class:`hpsearch.adapters.optuna.study.StudyRecorder`): one intermediate value per
epoch, COMPLETE with the final value, PRUNED for a stop, and a paused trial left
RUNNING with ``lifecycle: paused`` (Optuna cannot reopen a finished trial), which the
sampler reads as pruned where it paused
(:class:`hpsearch.adapters.optuna.samplers.EndedEarlyAsPruned`). The proposal itself is told FAIL (TPE ignores failed trials) and the
pool's configuration is then asked as an enqueued trial, so the study holds the
hyperparameters that were trained.

What this measures that the fixed order cannot: how much sooner the configuration that
hits is started when the sampler learns from the policy's evidence (full curves for no
pruning, partial ones for the pruners), i.e. the sampler's share of the money to the hit.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from hpsearch import keys
from hpsearch.core.lifecycle import TrialState
from hpsearch.core.ports import EpochReport, MemoryStudy

#: A hyperparameter's range: (low, high, log scale).
Space = Mapping[str, tuple[float, float, bool]]


def pool_space(configs: Sequence[Mapping[str, Any]],
               declared: Space | None = None) -> dict[str, tuple[float, float, bool]]:
    """The space the sampler proposes in: ``declared`` (the benchmark's space, e.g. the
    LCBench surrogate's), widened to hold every configuration of the pool; for a
    hyperparameter it does not declare, the pool's own range (log if every value is
    positive and the range spans more than a factor of 10)."""
    out: dict[str, tuple[float, float, bool]] = {}
    names = sorted({k for c in configs for k, v in c.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for name in names:
        values = [float(c[name]) for c in configs if name in c]
        low, high = min(values), max(values)
        if declared and name in declared:
            d_low, d_high, log = declared[name]
            out[name] = (min(low, d_low), max(high, d_high), log)
        else:
            out[name] = (low, high, low > 0 and high > 10 * low)
    if not out:
        raise ValueError("sampler: the pool's configurations have no numeric "
                         "hyperparameters to propose in")
    return out


class SampledStudy(MemoryStudy):
    """A :class:`~hpsearch.core.ports.MemoryStudy` whose new trials are proposed by TPE
    (:func:`hpsearch.adapters.optuna.samplers.tpe_sampler`, reseeded per ask as a real run
    does) and mapped to the nearest untried configuration of the pool.

    Args:
        params: The pool's configurations (trial numbers are their indices).
        space: Each hyperparameter's range (:func:`pool_space`).
        mode: ``max`` or ``min`` (the study's direction).
        seed: The search seed.
    """

    def __init__(self, params: Sequence[Mapping[str, Any]], space: Space, mode: str,
                 seed: int):
        import optuna

        super().__init__(params, seed=0)
        self.space = dict(space)
        self.search_seed = seed
        self.names = sorted(self.space)
        self.units = np.array([[self._unit(name, float(c.get(name, self.space[name][0])))
                                for name in self.names] for c in self.params])
        self.untried = np.ones(len(self.params), dtype=bool)
        self.order = []  # pool indices in the order proposed (:attr:`left` counts the pool)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna.create_study(direction="maximize" if mode == "max"
                                          else "minimize")
        self.trials: dict[int, Any] = {}  # pool index -> its Optuna trial

    def _unit(self, name: str, value: float) -> float:
        low, high, log = self.space[name]
        if log:
            low, high, value = math.log(low), math.log(high), math.log(max(value, low))
        return 0.0 if high <= low else (value - low) / (high - low)

    def _suggest(self, trial) -> dict[str, float]:
        return {name: trial.suggest_float(name, low, high, log=log)
                for name, (low, high, log) in self.space.items()}

    @property
    def left(self) -> int:
        return int(self.untried.sum())

    def ask(self) -> tuple[int, dict[str, Any], int]:
        import optuna

        from hpsearch.adapters.optuna.samplers import sampler_seed, tpe_sampler

        if not self.untried.any():
            raise IndexError("SampledStudy: no configuration left")
        self.optuna.sampler = tpe_sampler(
            sampler_seed(self.search_seed, len(self.optuna.trials)))
        proposal = self.optuna.ask()
        point = self._suggest(proposal)
        self.optuna.tell(proposal, state=optuna.trial.TrialState.FAIL)
        unit = np.array([self._unit(name, point[name]) for name in self.names])
        distance = ((self.units - unit) ** 2).sum(axis=1)
        distance[~self.untried] = np.inf
        number = int(np.argmin(distance))
        self.untried[number] = False
        self.optuna.enqueue_trial({name: float(self.params[number][name])
                                   for name in self.names if name in self.params[number]})
        trial = self.optuna.ask()
        self._suggest(trial)
        self.trials[number] = trial
        self.order.append(number)
        self.next = len(self.order)
        self.states[number] = TrialState.RUNNING
        return number, dict(self.params[number]), self.seed

    def record_epoch(self, report: EpochReport) -> None:
        trial = self.trials[report.number]
        if report.epoch not in self.values.get(report.number, {}):
            trial.report(float(report.value), report.epoch)
        super().record_epoch(report)

    def set_attrs(self, number: int, attrs: Mapping[str, Any]) -> None:
        """Keep ``attrs``; the lifecycle state also on the Optuna trial (as a real run's
        study does: the sampler reads a paused trial by it)."""
        super().set_attrs(number, attrs)
        trial = self.trials.get(number)
        if keys.ATTR_LIFECYCLE in attrs and trial is not None and number not in self.finals:
            trial.set_user_attr(keys.ATTR_LIFECYCLE, attrs[keys.ATTR_LIFECYCLE])

    def finish(self, number: int, state: TrialState, value: float | None,
               attrs: Mapping[str, Any]) -> None:
        import optuna

        from hpsearch.adapters.optuna.study import TOLD

        super().finish(number, state, value, attrs)
        told = TOLD.get(state)
        if told is optuna.trial.TrialState.COMPLETE:
            self.optuna.tell(self.trials[number], value)
        elif told is not None:
            self.optuna.tell(self.trials[number], state=told)
