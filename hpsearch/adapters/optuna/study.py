"""The Optuna bridge: the study is the system of record of every trial.

:class:`StudyRecorder` is the only writer of the study and the search core's
:class:`~hpsearch.core.ports.StudyPort`: it asks for configurations, reports one
intermediate value per epoch (a resumed trial re-sends epochs; duplicates are dropped),
keeps each trial's facts as user attributes, and tells the final state the core decided:
COMPLETE, PRUNED (stopped by a pruning policy or the budget, with the reason) or FAIL
(with the error text). Ray's own ``OptunaSearch`` is not used: it records stopped trials
as COMPLETE and cannot be restored safely.

Sampling is define-by-run (``study.ask()``, then :meth:`Space.suggest`), so conditional
params are left out of trials where they are inactive. Each ask uses a sampler seeded
from ``search.seed`` and the number of trials already in the study (QMC and grid keep
``search.seed`` itself, their sequence's seed), so the proposal depends only on the
study's history: a search stopped and continued proposes what the uninterrupted one
would have.
"""

from __future__ import annotations

import logging
import reprlib
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpsearch import keys
from hpsearch.recovery import checkpoint_usage
from hpsearch.report import gpuuse
from hpsearch.spec.config import Config
from hpsearch.core.ports import EpochReport
from hpsearch.trials import TrialHistory, TrialState as TState
from hpsearch.errors import ConfigError
from hpsearch.adapters.optuna.samplers import (CurveResumeChooser, accepting_experimental,
                                               curve_planner, make_sampler)

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


#: Config keys a continued study must keep: its trials were sampled, trained and judged
#: with them.
COMPATIBLE_KEYS = ("space", "objective", "trainable", "max_epochs")

_short = reprlib.Repr()
_short.maxlist = _short.maxdict = 6
_short.maxstring = _short.maxother = 60


def differences(before: Any, now: Any, path: str = "") -> list[str]:
    """What changed from ``before`` to ``now`` (plain data), one phrase per leaf:
    ``lr.high was 0.1, now 0.5``, ``momentum added``, ``opt.choices[1] was 'sgd', now
    'rmsprop'``."""
    def at(key: Any) -> str:
        return f"{path}.{key}" if path else str(key)

    if isinstance(before, dict) and isinstance(now, dict):
        out = [f"{at(k)} removed" for k in before if k not in now]
        for k, value in now.items():
            if k not in before:
                out.append(f"{at(k)} added")
            else:
                out.extend(differences(before[k], value, at(k)))
        return out
    if isinstance(before, list) and isinstance(now, list) and before != now:
        if len(before) != len(now):
            return [f"{path or 'value'} has {len(now)} item(s), was {len(before)}"]
        i = next(i for i, (b, n) in enumerate(zip(before, now)) if b != n)
        return differences(before[i], now[i], f"{path}[{i}]")
    if before != now:
        return [f"{path or 'value'} was {_short.repr(before)}, now {_short.repr(now)}"]
    return []


def check_compatible(previous: dict[str, Any], config: Config) -> None:
    """Raise ConfigError if ``config`` cannot continue a study recorded with ``previous``.

    The space, objective, trainable and ``max_epochs`` must be those the study was run
    with; the error names the keys that differ (at most three, then a count).
    """
    current = config.to_dict()
    for key in COMPATIBLE_KEYS:
        if key not in previous:
            continue
        scalar = not isinstance(current[key], dict)
        changed = differences(previous[key], current[key], key if scalar else "")
        if not changed:
            continue
        shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more"
                                          if len(changed) > 3 else "")
        why = (": its trials were trained, and are compared, over that many epochs"
               if key == "max_epochs" else "")
        raise ConfigError(
            key,
            f"differs from the existing study '{config.name}' ({shown}){why}; use another "
            "--run-dir or name to start afresh",
        )


@dataclass
class _Handle:
    """The study's side of one trial this session writes to."""

    trial_id: int
    steps: set[int] = field(default_factory=set)
    resumed_from: list[int] = field(default_factory=list)
    epoch_times: list[float] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    oom_steps: list[str] = field(default_factory=list)
    gpu_ids: str | None = None
    gpu_uses: dict[str, gpuuse.GpuUse] = field(default_factory=dict)
    #: Each attempt's checkpoint figures ("earlier": those of earlier sessions).
    ckpt_uses: dict[str, checkpoint_usage.CheckpointUse] = field(default_factory=dict)


#: How each lifecycle state that ends a trial is told to Optuna. BUDGET_STOPPED is not
#: told: Optuna cannot reopen a finished trial, and a later session with more money
#: resumes it, so it stays RUNNING with ``lifecycle: budget_stopped``.
TOLD = {TState.COMPLETE: TrialState.COMPLETE, TState.PRUNED: TrialState.PRUNED,
         TState.FAILED: TrialState.FAIL}


class StudyRecorder:
    """Creates or continues the run's study and writes every trial into it: the
    :class:`~hpsearch.core.ports.StudyPort` of a real run.

    It decides nothing: :class:`~hpsearch.core.search.SearchCore` tells it what to write.
    Each trial is written through one handle per session; a trial's facts that outlive
    a session (its curve, counters, epoch times, lifecycle state) are user attributes,
    read back by :meth:`histories`.
    """

    def __init__(self, config: Config, storage_url: str, prior: Sequence[Any] = ()):
        self.config = config
        self.storage_url = storage_url
        #: The curve sampler's planner (``search.sampler: curve``), kept between asks;
        #: ``prior``: the earlier studies it starts from (read by the driver).
        self.planner = (curve_planner(config, prior) if config.search.sampler == "curve"
                        else None)
        self.storage = make_storage(storage_url)
        direction = "maximize" if config.objective.mode == "max" else "minimize"
        existing = [s for s in optuna.get_all_study_summaries(self.storage, False)
                    if s.study_name == config.name]
        n_existing = existing[0].n_trials if existing else 0
        self.study = optuna.create_study(
            storage=self.storage,
            study_name=config.name,
            direction=direction,
            sampler=make_sampler(config, n_existing, self.planner),
            load_if_exists=True,
        )
        if self.study.direction.name.lower() != direction:
            raise ConfigError(
                "objective.mode",
                f"the existing study '{config.name}' is {self.study.direction.name.lower()}d",
                config.objective.mode,
            )
        self.study.set_user_attr(keys.ATTR_CONFIG, config.to_dict())
        # The dashboard then labels the objective `val_loss`, not "Objective 0".
        with accepting_experimental("set_metric_names"):
            self.study.set_metric_names([config.objective.metric])
        from hpsearch.version import __version__

        self.study.set_user_attr(keys.ATTR_HPSEARCH_VERSION, __version__)
        self._study_id = self.storage.get_study_id_from_name(config.name)
        self._handles: dict[int, _Handle] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Ray Tune pickles its experiment (callbacks and stopper included) now and then;
        # hpsearch never restores from it (a continued run reads the study), so what it
        # pickles of the recorder is inert.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- the StudyPort ------------------------------------------------------------------

    def ask(self) -> tuple[int, dict[str, Any], int]:
        """Start a new Optuna trial: ``(number, params, seed)``.

        The params are the active ones only (an inactive conditional param is absent);
        the proposal depends on ``search.seed`` and the study's trials, not on the session.
        """
        with self._lock:
            n_trials = len(self.study.get_trials(deepcopy=False))
            self.study.sampler = make_sampler(self.config, n_trials, self.planner)
            trial = self.study.ask()
            params = self.config.space.suggest(trial)
            seed = trial_seed(self.config.search.seed, trial.number)
            trial.set_user_attr(keys.ATTR_SEED, seed)
            self._handles[trial.number] = _Handle(self._trial_id(trial.number))
            return trial.number, params, seed

    def resume(self, number: int) -> tuple[dict[str, Any], int]:
        """The params and seed of unfinished trial ``number``, about to run again."""
        with self._lock:
            handle = self._handles.get(number)
            frozen = self._frozen(number)
            if handle is None:
                attrs = frozen.user_attrs
                handle = self._handles[number] = _Handle(
                    self._trial_id(number), set(frozen.intermediate_values),
                    list(attrs.get(keys.ATTR_RESUMED_FROM, [])),
                    [float(t) for t in attrs.get(keys.ATTR_EPOCH_TIMES, [])],
                    list(attrs.get(keys.ATTR_NODES, [])))
                earlier = gpuuse.from_attrs(attrs)
                if earlier is not None:  # the GPU figures of its earlier attempts
                    handle.gpu_uses["earlier"] = earlier
                saved = checkpoint_usage.from_attrs(attrs)
                if saved is not None:  # what its earlier attempts' checkpoints cost
                    handle.ckpt_uses["earlier"] = saved
            seed = int(frozen.user_attrs.get(keys.ATTR_SEED,
                                             trial_seed(self.config.search.seed, number)))
            params = dict(frozen.params)
            if not self.config.space.contains(params):
                # The driver died while Optuna was suggesting them: suggest the rest now
                # (params it has are returned as they are; an enqueued trial gets its
                # fixed values) rather than let the trial run with defaults, with the
                # sampler its ask had (the study held ``number`` trials then), so the
                # continued run proposes what the uninterrupted one did.
                self.study.sampler = make_sampler(self.config, number, self.planner)
                # Optuna's cached storage writes a param only to a trial it has read
                # with the study's trials (a random sampler reads none: KeyError).
                self.study.get_trials(deepcopy=False)
                params = self.config.space.suggest(
                    optuna.trial.Trial(self.study, self._trial_id(number)))
            return params, seed

    def record_epoch(self, report: EpochReport) -> None:
        """Write one epoch's objective (once per epoch) and what its result carries."""
        with self._lock:
            handle = self._handles[report.number]
            attrs: dict[str, Any] = {keys.ATTR_EPOCHS: max(report.epoch, max(handle.steps,
                                                                              default=0))}
            if report.epoch not in handle.steps:
                self.storage.set_trial_intermediate_value(handle.trial_id, report.epoch,
                                                          float(report.value))
                handle.steps.add(report.epoch)
                if report.epoch_s > 0 and report.epoch == len(handle.epoch_times) + 1:
                    handle.epoch_times.append(report.epoch_s)
                    attrs[keys.ATTR_EPOCH_TIMES] = list(handle.epoch_times)
                if report.startup_s is not None and report.start_epoch == 0:
                    attrs[keys.ATTR_STARTUP_S] = report.startup_s
            attrs.update(self._result_attrs(handle, report))
            for key, value in attrs.items():
                self.storage.set_trial_user_attr(handle.trial_id, key, value)

    def _result_attrs(self, handle: _Handle, report: EpochReport) -> dict[str, Any]:
        """What a result carries beside the objective that the study keeps."""
        result, attrs = report.result, {}
        if report.start_epoch > 0 and report.start_epoch not in handle.resumed_from:
            handle.resumed_from.append(report.start_epoch)
            attrs[keys.ATTR_RESUMED_FROM] = list(handle.resumed_from)
        oom = result.get(keys.OOM_STEPS)
        if oom and list(oom) != handle.oom_steps:
            handle.oom_steps = list(oom)
            attrs[keys.ATTR_OOM_STEPS] = handle.oom_steps
        gpus = result.get(keys.GPU_IDS)
        if gpus and gpus != handle.gpu_ids:
            handle.gpu_ids = gpus
            attrs[keys.ATTR_GPU_IDS] = gpus
        use = gpuuse.from_result(result)
        if use is not None:
            # Each process (attempt) reports its own figures so far; the trial's are
            # those of every attempt combined.
            handle.gpu_uses[str(result.get(keys.ATTEMPT, ""))] = use
            attrs.update(gpuuse.to_attrs(gpuuse.combine(handle.gpu_uses.values())))
        ckpt = checkpoint_usage.from_result(result)
        if ckpt is not None:
            attempt = str(result.get(keys.ATTEMPT, ""))
            handle.ckpt_uses.pop(attempt, None)  # keeps the latest attempt last
            handle.ckpt_uses[attempt] = ckpt
            attrs.update(checkpoint_usage.to_attrs(
                checkpoint_usage.combine(handle.ckpt_uses.values())))
        if report.node and (not handle.nodes or handle.nodes[-1] != report.node):
            handle.nodes.append(report.node)
            attrs[keys.ATTR_NODE] = report.node
            attrs[keys.ATTR_NODES] = list(handle.nodes)
        return attrs

    def resume_chooser(self) -> Any:
        """The curve sampler's resume chooser over this study (None for another
        sampler): what the cost-aware policy asks before it resumes a paused trial."""
        if self.planner is None:
            return None
        return _Locked(CurveResumeChooser(self.planner, self.study, self.config.search.seed),
                       self._lock)

    def set_attrs(self, number: int, attrs: Mapping[str, Any]) -> None:
        """Set user attributes of trial ``number`` (its money, why it stopped, ...)."""
        with self._lock:
            handle = self._handles.get(number)
            trial_id = handle.trial_id if handle is not None else self._trial_id(number)
            for key, value in attrs.items():
                self.storage.set_trial_user_attr(trial_id, key, value)

    def finish(self, number: int, state: TState, value: float | None,
               attrs: Mapping[str, Any]) -> None:
        """Tell trial ``number``'s final state; a BUDGET_STOPPED trial is left unfinished
        (RUNNING, ``lifecycle: budget_stopped``): more money resumes it."""
        self.set_attrs(number, attrs)
        with self._lock:
            self._handles.pop(number, None)
            told = TOLD.get(state)
            if told is None:
                return
            if told is TrialState.COMPLETE:
                self.study.tell(number, value)
            else:
                self.study.tell(number, state=told)

    def histories(self) -> list[TrialHistory]:
        """Every trial of the study, as a continued run rebuilds from."""
        out = []
        for t in self.study.get_trials(deepcopy=False):
            state = _lifecycle_state(t)
            if state is None:
                continue
            attrs = t.user_attrs
            out.append(TrialHistory(
                t.number, state, dict(t.intermediate_values),
                [float(x) for x in attrs.get(keys.ATTR_EPOCH_TIMES, [])],
                attrs.get(keys.ATTR_STARTUP_S),
                int(attrs.get(keys.ATTR_PREEMPTIONS, 0) or 0),
                int(attrs.get(keys.ATTR_FAILURES, 0) or 0), dict(t.params),
                [int(e) for e in attrs.get(keys.ATTR_PAUSED_AT) or []],
                int(attrs.get(keys.ATTR_RESUMES, 0) or 0)))
        return out

    # -- reading -------------------------------------------------------------------------

    def frozen(self, number: int) -> FrozenTrial:
        """The current record of trial ``number`` (what Optuna's pruners read)."""
        return self._frozen(number)

    def _trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def _frozen(self, number: int) -> FrozenTrial:
        return self.storage.get_trial(self._trial_id(number))

    def finished_count(self) -> int:
        """Trials of the study in a finished state (COMPLETE, PRUNED or FAIL)."""
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    def best(self) -> tuple[int, float] | None:
        """The study's best COMPLETE trial as ``(number, value)``, or None (earlier
        sessions' included: what a continued run's progress line starts from)."""
        try:
            best = self.study.best_trial
        except ValueError:  # Optuna's word for "no COMPLETE trial yet"
            return None
        return best.number, best.value

    def attr(self, number: int, key: str, default: Any = None) -> Any:
        """A user attribute of trial ``number`` as stored."""
        return self._frozen(number).user_attrs.get(key, default)

    def close(self) -> None:
        self.storage.remove_session()
        self.storage.engine.dispose()


class _Locked:
    """A resume chooser that reads the study under the recorder's lock (the planner is
    shared with the sampler, which proposes under it)."""

    def __init__(self, chooser: Any, lock: Any):
        self.chooser, self.lock = chooser, lock

    def choose(self, paused, fresh):
        with self.lock:
            return self.chooser.choose(paused, fresh)


def _lifecycle_state(trial: FrozenTrial) -> TState | None:
    """The lifecycle state of a study trial (None for Optuna's WAITING trials)."""
    recorded = trial.user_attrs.get(keys.ATTR_LIFECYCLE)
    if trial.state is TrialState.COMPLETE:
        return TState.COMPLETE
    if trial.state is TrialState.PRUNED:
        # Budget-stopped by a version that told it PRUNED: finished, it cannot resume.
        return TState.PRUNED
    if trial.state is TrialState.FAIL:
        return TState.FAILED
    if trial.state is TrialState.RUNNING:
        unfinished = {TState.PAUSED.value: TState.PAUSED,
                      TState.BUDGET_STOPPED.value: TState.BUDGET_STOPPED}
        return unfinished.get(recorded, TState.RUNNING)
    return None
