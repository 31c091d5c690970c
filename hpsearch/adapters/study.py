"""The Optuna bridge: the study is the system of record of every trial.

:class:`StudyRecorder` owns the mapping between Ray Tune trial ids and Optuna trials and
is the only writer of the study: it asks for configurations, reports one intermediate
value per epoch (a resumed trial re-sends epochs; duplicates are dropped), and tells the
final state: COMPLETE, PRUNED (stopped by a pruning policy, with the reason) or FAIL
(with the error text). Ray's own ``OptunaSearch`` is not used: it records stopped trials
as COMPLETE and cannot be restored safely.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import gpuuse, keys
from hpsearch.config import Config
from hpsearch.decisions import StopRecord
from hpsearch.errors import ConfigError

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

#: Trial states that count as finished.
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """Open an Optuna RDB storage (SQLite waits on a dashboard's read lock, not fails)."""
    engine_kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number`` in a run seeded with ``seed`` (stable, well spread)."""
    return (seed * 2_654_435_761 + number * 40_503 + 1) % (2**31 - 1)


def _sampler(config: Config, n_existing: int) -> optuna.samplers.BaseSampler:
    # A continued run must not replay the first run's random draws: mix in the history.
    seed = config.search.seed if n_existing == 0 else trial_seed(config.search.seed, n_existing)
    if config.search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def existing_study_config(url: str, name: str) -> dict[str, Any] | None:
    """Return the config recorded in study ``name`` at ``url``, or None if there is none."""
    storage = make_storage(url)
    try:
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        for summary in summaries:
            if summary.study_name == name:
                return dict(summary.user_attrs.get(keys.ATTR_CONFIG) or {})
        return None
    finally:
        storage.remove_session()
        storage.engine.dispose()


def existing_study_record(url: str, name: str) -> tuple[dict[str, Any], set[int]] | None:
    """The user attributes of study ``name`` at ``url`` and the numbers of its trials that
    were billed (a ``cost`` attribute above 0), or None if there is no such study."""
    storage = make_storage(url)
    try:
        for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
            if summary.study_name == name:
                study_id = storage.get_study_id_from_name(name)
                billed = {t.number for t in storage.get_all_trials(study_id, deepcopy=False)
                          if isinstance(t.user_attrs.get(keys.ATTR_COST), (int, float))
                          and t.user_attrs[keys.ATTR_COST] > 0}
                return dict(summary.user_attrs), billed
        return None
    finally:
        storage.remove_session()
        storage.engine.dispose()


def check_compatible(previous: dict[str, Any], config: Config) -> None:
    """Raise ConfigError if ``config`` cannot continue a study recorded with ``previous``."""
    current = config.to_dict()
    for key in ("space", "objective", "trainable"):
        if key in previous and previous[key] != current[key]:
            raise ConfigError(
                key,
                f"differs from the existing study '{config.name}' "
                f"({previous[key]!r}); use another --run-dir or name to start afresh",
                current[key],
            )


def _suggest_missing(trial: optuna.trial.Trial, distributions: dict[str, Any],
                     have: dict[str, Any]) -> None:
    """Suggest the params of ``distributions`` that ``trial`` does not have yet."""
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    for name, dist in distributions.items():
        if name in have:
            continue
        if isinstance(dist, FloatDistribution):
            trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
        elif isinstance(dist, IntDistribution):
            trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
        elif isinstance(dist, CategoricalDistribution):
            trial.suggest_categorical(name, dist.choices)
        else:
            raise TypeError(f"{name}: unsupported distribution {dist!r}")


@dataclass
class _Live:
    trial: optuna.trial.Trial
    steps: set[int] = field(default_factory=set)
    resumed_from: list[int] = field(default_factory=list)
    last_epoch: int = 0
    last_value: float | None = None
    stop: StopRecord | None = None
    node: str | None = None
    nodes: list[str] = field(default_factory=list)
    oom_steps: list[str] = field(default_factory=list)
    gpu_ids: str | None = None
    gpu_uses: dict[str, gpuuse.GpuUse] = field(default_factory=dict)


class StudyRecorder:
    """Creates or continues the run's study and writes every trial into it.

    Thread-safe: Ray Tune calls the searcher, the scheduler and callbacks from its
    controller thread, but a lock keeps the mapping consistent if that ever changes.
    """

    def __init__(self, config: Config, storage_url: str):
        self.config = config
        self.storage_url = storage_url
        self.storage = make_storage(storage_url)
        direction = "maximize" if config.objective.mode == "max" else "minimize"
        existing = [s for s in optuna.get_all_study_summaries(self.storage, False)
                    if s.study_name == config.name]
        n_existing = existing[0].n_trials if existing else 0
        self.study = optuna.create_study(
            storage=self.storage,
            study_name=config.name,
            direction=direction,
            sampler=_sampler(config, n_existing),
            load_if_exists=True,
        )
        if self.study.direction.name.lower() != direction:
            raise ConfigError(
                "objective.mode",
                f"the existing study '{config.name}' is {self.study.direction.name.lower()}d",
                config.objective.mode,
            )
        self.study.set_user_attr(keys.ATTR_CONFIG, config.to_dict())
        from hpsearch import __version__

        self.study.set_user_attr(keys.ATTR_HPSEARCH_VERSION, __version__)
        self._distributions = config.space.to_optuna()
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self.stops: dict[str, StopRecord] = {}

    # -- pickling: Ray Tune saves its searcher, scheduler and callbacks with the experiment

    def __getstate__(self) -> dict[str, Any]:
        live = {
            rid: (v.trial.number, sorted(v.steps), v.last_epoch, v.last_value, v.stop,
                  list(v.resumed_from))
            for rid, v in self._live.items()
        }
        return {"config": self.config, "storage_url": self.storage_url, "live": live,
                "stops": self.stops}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.storage_url = state["storage_url"]
        self.storage = make_storage(self.storage_url)
        self.study = optuna.load_study(study_name=self.config.name, storage=self.storage)
        self._distributions = self.config.space.to_optuna()
        self._lock = threading.Lock()
        self.stops = dict(state["stops"])
        self._live = {}
        study_id = self.study._study_id
        for rid, (number, steps, last_epoch, last_value, stop, resumed) in state["live"].items():
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, number)
            trial = optuna.trial.Trial(self.study, trial_id)
            self._live[rid] = _Live(trial, set(steps), resumed, last_epoch, last_value, stop)

    # -- bookkeeping across sessions ----------------------------------------------------

    def finished_count(self) -> int:
        """Trials of the study in a finished state (COMPLETE, PRUNED or FAIL)."""
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    # -- one trial's life -------------------------------------------------------------

    def ask(self, ray_trial_id: str) -> tuple[int, dict[str, Any], int]:
        """Start an Optuna trial for a new Ray trial; return (number, params, seed)."""
        with self._lock:
            trial = self.study.ask(self._distributions)
            seed = trial_seed(self.config.search.seed, trial.number)
            trial.set_user_attr(keys.ATTR_RAY_TRIAL_ID, ray_trial_id)
            trial.set_user_attr(keys.ATTR_SEED, seed)
            self._live[ray_trial_id] = _Live(trial)
            return trial.number, dict(trial.params), seed

    def resume(self, ray_trial_id: str, number: int) -> tuple[int, dict[str, Any], int]:
        """Attach a new Ray attempt to the unfinished Optuna trial ``number`` (a restart
        after a preemption or failure, or a trial left by a stopped driver)."""
        with self._lock:
            study_id = self.study._study_id
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, number)
            frozen = self.storage.get_trial(trial_id)
            trial = optuna.trial.Trial(self.study, trial_id)
            if set(self._distributions) - set(frozen.params):
                # The driver died while Optuna was suggesting them: suggest the rest now
                # (an enqueued trial gets its fixed values) rather than run with defaults.
                _suggest_missing(trial, self._distributions, frozen.params)
                frozen = self.storage.get_trial(trial_id)
            trial.set_user_attr(keys.ATTR_RAY_TRIAL_ID, ray_trial_id)
            steps = set(frozen.intermediate_values)
            last = max(steps) if steps else 0
            live = _Live(trial, steps, list(frozen.user_attrs.get(keys.ATTR_RESUMED_FROM, [])),
                         last, frozen.intermediate_values.get(last),
                         nodes=list(frozen.user_attrs.get(keys.ATTR_NODES, [])))
            earlier = gpuuse.from_attrs(frozen.user_attrs)
            if earlier is not None:  # the GPU figures of its earlier attempts
                live.gpu_uses["earlier"] = earlier
            self._live[ray_trial_id] = live
            seed = int(frozen.user_attrs.get(keys.ATTR_SEED,
                                             trial_seed(self.config.search.seed, number)))
            return number, dict(frozen.params), seed

    def _pop(self, ray_trial_id: str, attrs: dict[str, Any] | None) -> _Live | None:
        """Remove a live attempt and write its attributes (the caller holds the lock)."""
        live = self._live.pop(ray_trial_id, None)
        if live is None:
            return None
        for key, value in (attrs or {}).items():
            live.trial.set_user_attr(key, value)
        live.trial.set_user_attr(keys.ATTR_EPOCHS, live.last_epoch)
        return live

    def detach(self, ray_trial_id: str, attrs: dict[str, Any] | None = None) -> int | None:
        """Forget a Ray attempt without ending its Optuna trial (it will be restarted);
        return the trial number."""
        with self._lock:
            live = self._pop(ray_trial_id, attrs)
            return None if live is None else live.trial.number

    def unfinished_numbers(self) -> list[int]:
        """Trials of the study still RUNNING (left by this or an earlier driver)."""
        return [t.number for t in self.study.get_trials(deepcopy=False,
                                                        states=(TrialState.RUNNING,))]

    def attr(self, number: int, key: str, default: Any = None) -> Any:
        """A user attribute of trial ``number`` as stored."""
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number)
        return self.storage.get_trial(trial_id).user_attrs.get(key, default)

    def prune_waiting(self, number: int, stop: StopRecord) -> None:
        """End a trial that waited for a restart as PRUNED (e.g. the budget closed)."""
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number)
        trial = optuna.trial.Trial(self.study, trial_id)
        trial.set_user_attr(keys.ATTR_STOP_REASON, f"{stop.policy}: {stop.reason}")
        if self.storage.get_trial(trial_id).intermediate_values:
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)

    def fail_waiting(self, number: int, reason: str) -> None:
        """End a trial that waited for a restart as FAIL with ``reason``."""
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number)
        trial = optuna.trial.Trial(self.study, trial_id)
        trial.set_user_attr(keys.ATTR_ERROR, reason)
        self.study.tell(trial, state=TrialState.FAIL)

    def number(self, ray_trial_id: str) -> int | None:
        live = self._live.get(ray_trial_id)
        return None if live is None else live.trial.number

    def report(self, ray_trial_id: str, result: dict[str, Any]) -> None:
        """Record the objective of one epoch (once per epoch, whatever Ray re-sends)."""
        with self._lock:
            live = self._live.get(ray_trial_id)
            metric = self.config.objective.metric
            if live is None or keys.EPOCH not in result or metric not in result:
                return
            epoch = int(result[keys.EPOCH])
            value = float(result[metric])
            start = int(result.get(keys.START_EPOCH, 0))
            if start > 0 and start not in live.resumed_from:
                live.resumed_from.append(start)
                live.trial.set_user_attr(keys.ATTR_RESUMED_FROM, list(live.resumed_from))
            oom = result.get(keys.OOM_STEPS)
            if oom and oom != live.oom_steps:
                live.oom_steps = list(oom)
                live.trial.set_user_attr(keys.ATTR_OOM_STEPS, live.oom_steps)
            gpus = result.get(keys.GPU_IDS)
            if gpus and gpus != live.gpu_ids:
                live.gpu_ids = gpus
                live.trial.set_user_attr(keys.ATTR_GPU_IDS, gpus)
            use = gpuuse.from_result(result)
            if use is not None:
                # Each process (attempt) reports its own figures so far; the trial's are
                # those of every attempt combined.
                live.gpu_uses[str(result.get(keys.ATTEMPT, ""))] = use
                combined = gpuuse.combine(live.gpu_uses.values())
                for name, figure in gpuuse.to_attrs(combined).items():
                    live.trial.set_user_attr(name, figure)
            node = result.get(keys.NODE_ID)
            if node and node != live.node:
                live.node = node
                live.nodes.append(node)
                live.trial.set_user_attr(keys.ATTR_NODE, node)
                live.trial.set_user_attr(keys.ATTR_NODES, list(live.nodes))
            for past, past_value in result.get(keys.HISTORY) or ():
                # Epochs a stopped driver never recorded, restored from the checkpoint.
                if int(past) not in live.steps and int(past) < epoch:
                    live.trial.report(float(past_value), step=int(past))
                    live.steps.add(int(past))
            if epoch in live.steps:
                return
            live.trial.report(value, step=epoch)
            live.steps.add(epoch)
            if epoch >= live.last_epoch:
                live.last_epoch, live.last_value = epoch, value

    def frozen(self, ray_trial_id: str) -> FrozenTrial:
        """The current record of a live trial (for Optuna pruners)."""
        live = self._live[ray_trial_id]
        return self.storage.get_trial(live.trial._trial_id)

    def mark_stopped(self, ray_trial_id: str, stop: StopRecord) -> None:
        """Remember that a policy stopped this trial, so it ends PRUNED with the reason."""
        with self._lock:
            live = self._live.get(ray_trial_id)
            if live is None or live.stop is not None:
                return
            live.stop = stop
            self.stops[ray_trial_id] = stop
            live.trial.set_user_attr(keys.ATTR_STOP_REASON, f"{stop.policy}: {stop.reason}")
            if stop.predicted_final is not None:
                live.trial.set_user_attr(keys.ATTR_PREDICTED_FINAL, stop.predicted_final)
            if stop.saved_cost is not None:
                live.trial.set_user_attr(keys.ATTR_SAVED_COST, stop.saved_cost)

    def set_attrs(self, ray_trial_id: str, attrs: dict[str, Any]) -> None:
        """Set user attributes of a live trial (e.g. its money so far)."""
        with self._lock:
            live = self._live.get(ray_trial_id)
            if live is None:
                return
            for key, value in attrs.items():
                live.trial.set_user_attr(key, value)

    def stop_of(self, ray_trial_id: str) -> StopRecord | None:
        live = self._live.get(ray_trial_id)
        return None if live is None else live.stop

    def complete(self, ray_trial_id: str, last_result: dict[str, Any] | None,
                 attrs: dict[str, Any] | None = None) -> TrialState | None:
        """Tell the final state of a trial that ended without error; return it.

        ``attrs`` (e.g. its final money) are set before the state is told.
        """
        if last_result:
            self.report(ray_trial_id, last_result)
        with self._lock:
            live = self._pop(ray_trial_id, attrs)
            if live is None:
                return None
            if live.last_value is None:
                live.trial.set_user_attr(keys.ATTR_ERROR, "trial ended without reporting an epoch")
                self.study.tell(live.trial, state=TrialState.FAIL)
                return TrialState.FAIL
            if live.stop is not None:
                self.study.tell(live.trial, state=TrialState.PRUNED)
                return TrialState.PRUNED
            if math.isnan(live.last_value):
                metric = self.config.objective.metric
                live.trial.set_user_attr(keys.ATTR_ERROR, f"final {metric} is NaN")
                self.study.tell(live.trial, state=TrialState.FAIL)
                return TrialState.FAIL
            self.study.tell(live.trial, live.last_value)
            return TrialState.COMPLETE

    def fail(self, ray_trial_id: str, error: str,
             attrs: dict[str, Any] | None = None) -> TrialState | None:
        """Tell FAIL for a trial that raised, with its error text as a user attribute."""
        with self._lock:
            live = self._pop(ray_trial_id, attrs)
            if live is None:
                return None
            live.trial.set_user_attr(keys.ATTR_ERROR, error[:2000])
            self.study.tell(live.trial, state=TrialState.FAIL)
            return TrialState.FAIL

    def unfinished(self) -> list[str]:
        """Ray trial ids asked for but not yet told."""
        return list(self._live)

    def latest(self) -> dict[str, tuple[int, int, float | None]]:
        """``{ray_trial_id: (number, last epoch, last value)}`` of the live trials."""
        with self._lock:
            return {k: (v.trial.number, v.last_epoch, v.last_value) for k, v in self._live.items()}

    def close(self) -> None:
        self.storage.remove_session()
        self.storage.engine.dispose()
