"""The samplers that propose hpsearch's trials: Optuna's, seeded per ask from the study's
history (:func:`make_sampler`), and the view of the study they read: a trial hpsearch
paused is, to a sampler, a trial pruned where it paused (:class:`EndedEarlyAsPruned`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import warnings
from typing import TYPE_CHECKING, Any, Container, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import keys
from hpsearch.trials import TrialState as TState

if TYPE_CHECKING:
    from hpsearch.spec.config import Config


def sampler_seed(seed: int, n_trials: int) -> int:
    """The seed of the sampler that proposes a trial when the study holds ``n_trials``."""
    return (seed * 1_000_003 + n_trials * 2_654_435_761 + 12_345) % (2**31 - 1)


@contextlib.contextmanager
def accepting_experimental(feature: str):
    """Silence Optuna's ExperimentalWarning about ``feature`` only, only in this block."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f".*{re.escape(feature)}",
                                category=optuna.exceptions.ExperimentalWarning)
        yield


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its ``study.stop()`` on an exhausted grid: that call
    raises outside ``study.optimize``; hpsearch caps ``search.n_trials`` at the grid's
    size instead (see :mod:`hpsearch.spec.config`)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_sampler(config: Config, n_trials: int,
                 planner: Any = None) -> optuna.samplers.BaseSampler:
    """The sampler that proposes the next trial of a study holding ``n_trials`` trials.

    Seeded from ``search.seed`` and ``n_trials``, so the same history gives the same
    proposal in any session; every sampler keeps the rest of its state in the study
    (TPE and random: the trials; CMA-ES: its optimizer in trial attributes; QMC: its
    sequence position; grid: the visited points), which is why one built per ask
    continues where the last left off.

    Args:
        config: The run's config (``search.sampler``, ``search.seed``, the space).
        n_trials: Trials in the study before this ask, in any state.
        planner: The curve sampler's planner (:func:`curve_planner`; it keeps its model
            between asks, and the study keeps what the model was fitted on).
    """
    search, space = config.search, config.space
    seed = sampler_seed(search.seed, n_trials)
    if search.sampler == "curve":
        from hpsearch.adapters.optuna.curve_sampler import CurveSampler

        return CurveSampler(space.to_optuna(), seed=seed,
                            planner=planner or curve_planner(config))
    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if search.sampler == "cmaes":
        # Categorical and conditional params go to its independent (random) sampler;
        # the README says so, so the per-param warning would only be noise.
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if search.sampler == "qmc":
        with accepting_experimental("QMCSampler"):
            return optuna.samplers.QMCSampler(
                scramble=True, seed=search.seed, warn_independent_sampling=False,
                independent_sampler=optuna.samplers.RandomSampler(seed=seed))
    if search.sampler == "grid":
        return _GridSampler(space.grid(), seed=search.seed)
    return tpe_sampler(seed, space.is_conditional)


def curve_planner(config: Config, prior: Sequence[Any] = ()) -> Any:
    """The curve sampler's planner for a run: its space, epochs and seed, and ``prior``
    (earlier studies, :func:`hpsearch.adapters.optuna.results.load_prior`)."""
    from hpsearch.adapters.optuna.curve_sampler import dimensions, prior_from_studies
    from hpsearch.model.planner import Planner

    planner = Planner(dimensions(config.space.to_optuna()), config.max_epochs,
                      seed=config.search.seed)
    planner.model.prior = prior_from_studies(prior, planner, config.max_epochs)
    return planner


class CurveResumeChooser:
    """The curve sampler's planner as the cost-aware policy's resume chooser
    (:class:`~hpsearch.pruning.cost_aware_pruner.ResumeChooser`): it reads ``study`` as
    the sampler does, and rates new configurations with the candidates the next ask would.

    Args:
        planner: The planner the sampler proposes with (its last forest is asked).
        study: The run's study.
        search_seed: ``search.seed`` (the next proposal's seed derives from it).
        number: Maps the policy's trial numbers to the study's (the benchmark's pool
            indices); identity in a run.
    """

    def __init__(self, planner: Any, study: optuna.Study, search_seed: int,
                 number: Any = None):
        self.planner, self.study, self.search_seed = planner, study, search_seed
        self.number = number or (lambda n: n)

    def choose(self, paused: Sequence[int], fresh: bool) -> Any:
        from hpsearch.adapters.optuna.curve_sampler import planner_curves, proposal_seed

        planner, study = self.planner, self.study
        trials = study.get_trials(deepcopy=False)
        curves = planner_curves(planner, trials, study.direction.name == "MAXIMIZE")
        n = len(trials)  # the next trial's number
        numbers = {self.number(p): p for p in paused}
        choice = planner.choose_resume(curves, list(numbers), fresh,
                                       proposal_seed(sampler_seed(self.search_seed, n), n))
        if choice is not None and choice.trial is not None:
            return dataclasses.replace(choice, trial=numbers[choice.trial])
        return choice


def tpe_sampler(seed: int, conditional: bool = False) -> optuna.samplers.BaseSampler:
    """hpsearch's default sampler: Optuna's TPE, seeded, with ``constant_liar`` (trials
    still running count as the worst so far, so parallel workers do not all propose the
    same point), reading the study through :class:`EndedEarlyAsPruned`."""
    # group=True lets TPE model each set of params that occur together (a conditional
    # space) jointly instead of falling back to independent sampling.
    with accepting_experimental("``group``"):
        return EndedEarlyAsPruned(optuna.samplers.TPESampler(
            seed=seed, constant_liar=True, multivariate=conditional, group=conditional))


#: Lifecycle states of a trial that stopped training before its last epoch and may train
#: on later: Optuna keeps it RUNNING, since a finished trial cannot be reopened.
ENDED_EARLY = (TState.PAUSED.value, TState.BUDGET_STOPPED.value)


class StudyAsSampled:
    """A study as a sampler reads it: a trial of :data:`ENDED_EARLY` appears PRUNED at
    the last epoch it reported. Everything else is the study's own."""

    def __init__(self, study: optuna.Study):
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        out = []
        for trial in self._study._get_trials(deepcopy=deepcopy, states=None,
                                             use_cache=use_cache):
            if (trial.state is TrialState.RUNNING
                    and trial.user_attrs.get(keys.ATTR_LIFECYCLE) in ENDED_EARLY):
                trial = copy.copy(trial)
                trial.state = TrialState.PRUNED
            if states is None or trial.state in states:
                out.append(trial)
        return out

    def get_trials(self, deepcopy: bool = True,
                   states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class EndedEarlyAsPruned(optuna.samplers.BaseSampler):
    """A sampler that sees a paused (or budget-stopped) trial as a pruned one.

    hpsearch leaves such a trial RUNNING in the study (``lifecycle: paused``): it may
    resume, and Optuna cannot reopen a finished trial. A sampler would read it as a trial
    still running: TPE with ``constant_liar`` counts it among the worst whatever its
    curve says, and does not count it among the ``n_startup_trials`` it needs before it
    stops sampling at random. Under ``cost_aware``, which pauses most trials and finishes
    few, TPE then sampled at random for most of a search. Read as PRUNED at the epoch it
    paused after (what it is, to a sampler: a trial ended early with a partial curve),
    it ranks among the pruned trials by how far it got and its value there, as Optuna's
    own pruned trials do. Trials still training stay RUNNING.

    Args:
        inner: The sampler that proposes (every call is passed on, with the study seen
            through :class:`StudyAsSampled`).
    """

    def __init__(self, inner: optuna.samplers.BaseSampler):
        self.inner = inner

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(StudyAsSampled(study), trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(StudyAsSampled(study), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(StudyAsSampled(study), trial, param_name,
                                             param_distribution)

    def before_trial(self, study, trial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
