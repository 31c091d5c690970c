"""hpsearch's curve-aware sampler as a plain Optuna sampler (:class:`CurveSampler`), and
the study as its model reads it (:func:`study_curves`).

The sampler proposes the configuration whose expected improvement over the incumbent is
best under the model of curves (:mod:`hpsearch.model`), fitted on every trial's
intermediate values (partial curves included) and, with ``prior``, on earlier studies of
the same space. It works in any Optuna study (``study.optimize`` with ``trial.report``,
or ``ask``/``tell``), with or without intermediate values (then each trial is one point
at its last step), and inside hpsearch (``search.sampler: curve``), where the study's
recorder keeps one planner between asks and the cost-aware policy asks the same planner
which paused trial to resume (:class:`~hpsearch.adapters.optuna.samplers.CurveResumeChooser`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution,
                                  FloatDistribution, IntDistribution)
from optuna.trial import FrozenTrial, TrialState

from hpsearch import keys
from hpsearch.trials import TrialState as TState
from hpsearch.model.encoding import Dimension
from hpsearch.model.freeze_thaw import FitState, Prior
from hpsearch.model.planner import Planner
from hpsearch.model.standing import TrialCurve

#: Lifecycle states of a RUNNING Optuna trial that stopped training (it may resume):
#: behind the trials that train on, not open.
ENDED_EARLY = (TState.PAUSED.value, TState.BUDGET_STOPPED.value)


def dimensions(space: Mapping[str, BaseDistribution]) -> list[Dimension]:
    """The model's dimensions of Optuna distributions (sorted by name)."""
    out = []
    for name, dist in sorted(space.items()):
        if isinstance(dist, CategoricalDistribution):
            out.append(Dimension(name, choices=tuple(dist.choices)))
        elif isinstance(dist, IntDistribution):
            out.append(Dimension(name, float(dist.low), float(dist.high), dist.log,
                                 integer=True, step=None if dist.log else float(dist.step)))
        elif isinstance(dist, FloatDistribution):
            out.append(Dimension(name, dist.low, dist.high, dist.log, step=dist.step))
        else:
            raise ValueError(f"{name}: cannot model a {type(dist).__name__}")
    return out


def trial_curve(trial: FrozenTrial, planner: Planner, sign: float,
                max_epochs: int) -> TrialCurve | None:
    """One Optuna trial as the model reads it (None: failed, or waiting to start).

    Its intermediate values are its curve; a COMPLETE trial's value is its score at
    ``max_epochs`` (a study without intermediate values is one point per trial). A
    RUNNING trial is open unless hpsearch paused it (``lifecycle`` attribute)."""
    if trial.state in (TrialState.FAIL, TrialState.WAITING):
        return None
    scores = {int(step): sign * float(v) for step, v in trial.intermediate_values.items()
              if v is not None and v == v}
    if trial.state is TrialState.COMPLETE and trial.value is not None:
        scores.setdefault(max_epochs, sign * float(trial.value))
    running = (trial.state is TrialState.RUNNING
               and trial.user_attrs.get(keys.ATTR_LIFECYCLE) not in ENDED_EARLY)
    return TrialCurve(trial.number, planner.encode(trial.params), scores, running)


def study_curves(trials: Sequence[FrozenTrial], planner: Planner, maximize: bool,
                 max_epochs: int, exclude: int | None = None,
                 cache: dict | None = None) -> list[TrialCurve]:
    """Every trial of a study (but ``exclude``, the one being sampled) as the model
    reads it. ``cache`` (trial number -> its curve and what it was read from) keeps the
    curves of trials that did not change since the last read."""
    sign = 1.0 if maximize else -1.0
    out = []
    for trial in trials:
        if trial.number == exclude:
            continue
        key = (trial.state, len(trial.intermediate_values), trial.value,
               trial.user_attrs.get(keys.ATTR_LIFECYCLE))
        held = cache.get(trial.number) if cache is not None else None
        if held is not None and held[0] == key:
            curve = held[1]
        else:
            curve = trial_curve(trial, planner, sign, max_epochs)
            if cache is not None:
                cache[trial.number] = (key, curve)
        if curve is not None:
            out.append(curve)
    return out


@dataclass(frozen=True)
class EarlierStudy:
    """An earlier study read for a prior (its storage may be closed since).

    Attributes:
        name: Its name.
        trials: Its trials.
        maximize: Its direction.
        max_epochs: The epochs of its full trials (its config's, else its longest curve).
    """

    name: str
    trials: Sequence[FrozenTrial]
    maximize: bool
    max_epochs: int

    @classmethod
    def of(cls, study: optuna.Study) -> "EarlierStudy":
        trials = study.get_trials(deepcopy=False)
        config = study.user_attrs.get(keys.ATTR_CONFIG) or {}
        epochs = config.get("max_epochs") if isinstance(config, dict) else None
        if not isinstance(epochs, int) or epochs < 1:
            epochs = max((max(t.intermediate_values, default=1) for t in trials), default=1)
        return cls(study.study_name, trials, study.direction.name == "MAXIMIZE", epochs)


def prior_from_studies(studies: Sequence[optuna.Study | EarlierStudy], planner: Planner,
                       max_epochs: int) -> Prior:
    """Earlier studies as the model's prior, each in its own direction, its epochs put on
    this study's scale (its last epoch is this study's ``max_epochs``: a standing at the
    end means the same whatever the curves' length)."""
    out = []
    for study in studies:
        earlier = study if isinstance(study, EarlierStudy) else EarlierStudy.of(study)
        curves = study_curves(earlier.trials, planner, earlier.maximize, earlier.max_epochs)
        if earlier.max_epochs != max_epochs:
            scale = max_epochs / earlier.max_epochs
            curves = [TrialCurve(c.number, c.x, {max(1, round(e * scale)): v
                                                 for e, v in sorted(c.scores.items())},
                                 c.open) for c in curves]
        out.append(curves)
    return Prior(out)


def proposal_seed(seed: int, number: int) -> int:
    """The seed of the candidates proposed for trial ``number`` by a sampler seeded with
    ``seed``: a function of the study's history only."""
    return (seed * 1_000_003 + number * 7_919 + 17) % (2**31 - 1)


def restored(planner: Planner, trials: Sequence[FrozenTrial], maximize: bool) -> None:
    """Give a planner that has not fitted yet the forest the study's latest fit was (its
    :class:`~hpsearch.model.freeze_thaw.FitState`, kept on the trial it was made for),
    so a continued run proposes what the uninterrupted one would have. Nothing if the
    planner has a forest or the study none."""
    if planner.model.state is not None:
        return
    for trial in sorted(trials, key=lambda t: -t.number):
        text = trial.system_attrs.get(keys.SYSTEM_CURVE_FIT)
        if text:
            curves = study_curves(trials, planner, maximize, planner.max_epochs)
            planner.model.restore(FitState.decode(text), curves)
            return


def planner_curves(planner: Planner, trials: Sequence[FrozenTrial], maximize: bool,
                   exclude: int | None = None) -> list[TrialCurve]:
    """A study's ``trials`` (but ``exclude``) as ``planner`` reads them, its forest first
    restored from the study's latest fit if it has none (:func:`restored`): what a
    proposal and a resume choice are asked on."""
    restored(planner, trials, maximize)
    return study_curves(trials, planner, maximize, planner.max_epochs, exclude=exclude,
                        cache=planner.read_cache)


def _space_of(studies: Sequence[optuna.Study | EarlierStudy]) -> dict[str, BaseDistribution]:
    """The distributions every finished trial of the earlier studies shares."""
    space: dict[str, BaseDistribution] | None = None
    for study in studies:
        trials = study.trials if isinstance(study, EarlierStudy) else study.get_trials(
            deepcopy=False)
        for t in trials:
            if t.state.is_finished() and t.state is not TrialState.FAIL:
                if space is None:
                    space = dict(t.distributions)
                else:
                    space = {k: d for k, d in space.items() if t.distributions.get(k) == d}
    return space or {}


class CurveSampler(optuna.samplers.BaseSampler):
    """Proposes configurations from a model of the study's curves (see the module).

    Args:
        search_space: The distributions it proposes in (default: the intersection
            search space of the study's finished trials, as Optuna's samplers infer it;
            nothing until one finished, so the first trials are random).
        max_epochs: The step of a full trial's last intermediate value (default the
            largest step any trial reported, at least 1).
        prior: Earlier studies of the same space (Optuna studies, :class:`EarlierStudy`)
            or their curves.
        seed: Seeds the candidates, the model and the random start.
        planner: A planner to propose with (hpsearch keeps one between asks, each of
            which makes a new sampler); built from the arguments above if None.
        candidates: Where candidates come from (a function of the proposal's seed)
            instead of random draws over the space.
    """

    def __init__(self, search_space: Mapping[str, BaseDistribution] | None = None, *,
                 max_epochs: int | None = None,
                 prior: Prior | Sequence[optuna.Study | EarlierStudy] | None = None,
                 seed: int | None = None,
                 planner: Planner | None = None,
                 candidates: Callable[[int], Sequence[Mapping[str, Any]]] | None = None):
        self._space = dict(search_space) if search_space is not None else None
        self._max_epochs = max_epochs
        self._prior_arg = prior
        self._seed = 0 if seed is None else int(seed)
        self._candidates = candidates
        self._planner = planner
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._inferred = optuna.search_space.IntersectionSearchSpace()

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        if self._space is not None:
            return dict(self._space)
        space = self._inferred.calculate(study)
        if not space and self._prior_arg is not None and not isinstance(self._prior_arg,
                                                                        Prior):
            # Nothing finished here yet: the space the earlier studies searched.
            space = _space_of(self._prior_arg)
        return space

    def planner_for(self, study, search_space) -> Planner:
        """The planner (built on first use from the search space and the prior)."""
        if self._planner is None:
            max_epochs = self._max_epochs or max(
                (max(t.intermediate_values, default=1)
                 for t in study.get_trials(deepcopy=False)), default=1)
            planner = Planner(dimensions(search_space), max(1, max_epochs), seed=self._seed,
                              candidates=self._candidates)
            prior = self._prior_arg
            if prior is not None and not isinstance(prior, Prior):
                prior = prior_from_studies(prior, planner, planner.max_epochs)
            planner.model.prior = prior or Prior()
            self._planner = planner
        return self._planner

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        if not search_space or "fixed_params" in trial.system_attrs:
            return {}  # nothing to propose in, or an enqueued trial (its params are set)
        planner = self.planner_for(study, search_space)
        curves = planner_curves(planner, study.get_trials(deepcopy=False),
                                study.direction.name == "MAXIMIZE", exclude=trial.number)
        before = planner.model.state
        proposal = planner.propose(curves, proposal_seed(self._seed, trial.number))
        if planner.model.state is not None and planner.model.state is not before:
            # What this fit saw, kept in the study (as CMA-ES keeps its optimizer).
            study._storage.set_trial_system_attr(trial._trial_id, keys.SYSTEM_CURVE_FIT,
                                                 planner.model.state.encode())
        if proposal is None:
            return {}
        return {name: proposal.params[name] for name in search_space
                if proposal.params.get(name) is not None}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._random.sample_independent(study, trial, param_name, param_distribution)
