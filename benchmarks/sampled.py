"""A sampler in the loop: new trials proposed by one of hpsearch's samplers from what the
study has seen (TPE, the default; ``curve``, the curve-aware sampler), or the fixed order
recorded in a real study (what an earlier study, read as a prior, holds).

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

The curve sampler (:class:`hpsearch.adapters.optuna.curve_sampler.CurveSampler`) rates
candidates instead of proposing a point: its candidates are the pool's configurations
not tried yet (a random sample of the space, as its own random candidates are), so its
proposal is one of them. One planner serves every ask, as in a real run's study.

What this measures that the fixed order cannot: how much sooner the configuration that
hits is started when the sampler learns from the policy's evidence (full curves for no
pruning, partial ones for the pruners), i.e. the sampler's share of the money to the hit.
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping, Sequence

import numpy as np

from hpsearch import keys
from hpsearch.trials import TrialState
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


#: What proposes a study's new trials: TPE, the curve sampler, or a fixed order.
STUDY_SAMPLERS = ("tpe", "curve", "order")


class SampledStudy(MemoryStudy):
    """A :class:`~hpsearch.core.ports.MemoryStudy` recorded in a real in-memory Optuna
    study, whose new trials are proposed by ``sampler`` (reseeded per ask as a real run
    does) and mapped to the nearest untried configuration of the pool.

    Args:
        params: The pool's configurations (trial numbers are their indices).
        space: Each hyperparameter's range (:func:`pool_space`).
        mode: ``max`` or ``min`` (the study's direction).
        seed: The search seed.
        sampler: One of :data:`STUDY_SAMPLERS`.
        prior: Earlier studies (Optuna studies) the curve sampler starts from.
        max_epochs: Epochs of a full trial (the curve sampler's).
        order: The pool's order for ``sampler="order"``.
    """

    def __init__(self, params: Sequence[Mapping[str, Any]], space: Space, mode: str,
                 seed: int, sampler: str = "tpe", prior: Sequence[Any] = (),
                 max_epochs: int = 52, order: Sequence[int] | None = None):
        import optuna

        if sampler not in STUDY_SAMPLERS:
            raise ValueError(f"sampler: one of {', '.join(STUDY_SAMPLERS)} (got {sampler!r})")
        super().__init__(params, seed=0)
        self.sampler = sampler
        self.fixed = list(order if order is not None else range(len(params)))
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
        self.epoch_times: dict[int, list[float]] = {}
        #: CPU seconds each proposal took (this process's, on a shared machine's load
        #: as on an idle one): the sampler's cost per decision.
        self.decision_s: list[float] = []
        self.planner = None
        if sampler == "curve":
            from hpsearch.adapters.optuna.curve_sampler import (dimensions,
                                                                prior_from_studies)
            from hpsearch.model.planner import Planner

            self.planner = Planner(dimensions(self.distributions()), max_epochs,
                                   seed=seed, candidates=self._untried)
            self.planner.model.prior = prior_from_studies(prior, self.planner, max_epochs)

    def distributions(self) -> dict[str, Any]:
        """The space as Optuna distributions."""
        from optuna.distributions import FloatDistribution

        return {name: FloatDistribution(low, high, log=log)
                for name, (low, high, log) in self.space.items()}

    def _untried(self, seed: int) -> list[dict[str, float]]:
        return [{name: float(self.params[i][name]) for name in self.names
                 if name in self.params[i]} for i in np.flatnonzero(self.untried)]

    def _sampler(self, seed: int):
        from hpsearch.adapters.optuna.samplers import tpe_sampler

        if self.sampler == "curve":
            from hpsearch.adapters.optuna.curve_sampler import CurveSampler

            return CurveSampler(self.distributions(), seed=seed, planner=self.planner)
        return tpe_sampler(seed)

    def resume_chooser(self):
        """The curve sampler's resume chooser over this study (None for another
        sampler), reading it as a real run's reads its own, its trials named by their
        pool index."""
        if self.planner is None:
            return None
        from hpsearch.adapters.optuna.samplers import CurveResumeChooser

        return _Timed(CurveResumeChooser(self.planner, self.optuna, self.search_seed,
                                         number=lambda n: self.trials[n].number),
                      self.decision_s)

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

        from hpsearch.adapters.optuna.samplers import sampler_seed

        if not self.untried.any():
            raise IndexError("SampledStudy: no configuration left")
        if self.sampler == "order":
            number = next(i for i in self.fixed if self.untried[i])
        else:
            started = time.process_time()
            self.optuna.sampler = self._sampler(
                sampler_seed(self.search_seed, len(self.optuna.get_trials(deepcopy=False))))
            proposal = self.optuna.ask()
            point = self._suggest(proposal)
            self.decision_s.append(time.process_time() - started)
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
            # Measured epoch times, as a real run's study keeps them (what
            # benchmarks/eips.py predicts a candidate's cost from).
            times = self.epoch_times.setdefault(report.number, [])
            if report.epoch_s > 0 and report.epoch == len(times) + 1:
                times.append(report.epoch_s)
                trial.set_user_attr(keys.ATTR_EPOCH_TIMES, list(times))
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


class _Timed:
    """A resume chooser whose every call's CPU seconds are appended to ``into`` (a
    decision of the sampler's model, as a proposal is)."""

    def __init__(self, chooser, into: list[float]):
        self.chooser, self.into = chooser, into

    def choose(self, paused, fresh):
        started = time.process_time()
        try:
            return self.chooser.choose(paused, fresh)
        finally:
            self.into.append(time.process_time() - started)
