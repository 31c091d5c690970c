"""The Ray Tune backend: Ray's events in, the search core's decisions out.

Three thin objects plug :class:`~hpsearch.core.search.SearchCore` into a Tuner, and they
decide nothing themselves:

* :class:`CoreSearcher` (Tune's ``Searcher``): a free slot asks the core what to start;
* :class:`CoreScheduler` (Tune's ``FIFOScheduler``): every result goes to the core, whose
  CONTINUE / STOP / PAUSE becomes Tune's string; it also runs the node watchdog;
* :class:`CoreCallback` (Tune's ``Callback``): starts, ends and errors go to the core,
  each classified once (:func:`classify_end`), and the progress line ticks.

A pause is the core's, not Tune's: the attempt stops and the core later hands the same
trial out again, a new Ray trial that resumes from the trial's newest checkpoint, exactly
as a preempted trial does. Tune's own PAUSE is never used, so what runs next is always
the core's choice, and the simulator does the same.

Ray Tune trials are *attempts*: each start of a study trial (first, after a preemption,
a failure, a pause, a driver restart) is a new Ray trial; :class:`Attempts` maps them.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from hpsearch import keys
from hpsearch.core.ports import EpochReport
from hpsearch.core.search import SearchCore
from hpsearch.core.starts import StartKind
from hpsearch.pruning.decisions import Decision
from hpsearch.errors import EXIT_CONFIG, HpsearchError
from hpsearch.core.placement import avoid_selector
from hpsearch.recovery.faults import disk_full_cause
from hpsearch.recovery.preemption import preemption_reason, unreachable
from hpsearch.recovery.storage import StorageUnreachable

log = logging.getLogger(__name__)

#: The one place Decision meets Ray's strings (a pause stops the attempt: see above).
TO_RAY = {
    Decision.CONTINUE: TrialScheduler.CONTINUE,
    Decision.STOP: TrialScheduler.STOP,
    Decision.PAUSE: TrialScheduler.STOP,
}


class _Inert:
    """Tune pickles its experiment now and then (searcher, callbacks, stopper);
    hpsearch never restores from it (a continued run rebuilds from the study), so these
    objects pickle as empty shells."""

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class Attempts(_Inert):
    """Ray trial id <-> study trial number, for the attempts alive now."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def bind(self, trial_id: str, number: int) -> None:
        self._numbers[trial_id] = number

    def number(self, trial_id: str) -> int | None:
        return self._numbers.get(trial_id)

    def release(self, trial_id: str) -> int | None:
        """Forget an attempt that is gone; return its trial number."""
        return self._numbers.pop(trial_id, None)


class CoreSearcher(_Inert, Searcher):
    """Hands out what the core starts next, as a Tune trial config.

    The config is the trial's params plus ``hps_trial_number``, ``hps_seed`` and, where
    nodes declare kinds, ``hps_spot_node``.
    """

    def __init__(self, core: SearchCore, attempts: Attempts, metric: str, mode: str,
                 study_attrs: Callable[[int, dict], None]):
        super().__init__(metric=metric, mode=mode)
        self.core, self.attempts, self.study_attrs = core, attempts, study_attrs

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        start = self.core.next_start()
        if start.kind is StartKind.FINISHED:
            return Searcher.FINISHED
        if start.kind is StartKind.WAIT:
            return None
        self.attempts.bind(trial_id, start.number)
        self.study_attrs(start.number, {keys.ATTR_RAY_TRIAL_ID: trial_id})
        config = {**start.params, keys.TRIAL_NUMBER: start.number, keys.TRIAL_SEED: start.seed}
        if start.spot is not None:
            config[keys.SPOT_NODE] = start.spot
        return config

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        pass  # the callback tells the core, with the error's text


def epoch_report(number: int, result: dict[str, Any], metric: str) -> EpochReport | None:
    """The core's view of one Tune result, or None if it carries no epoch."""
    if keys.EPOCH not in result or metric not in result:
        return None
    return EpochReport(
        number=number, epoch=int(result[keys.EPOCH]), value=float(result[metric]),
        epoch_s=float(result.get(keys.EPOCH_TIME_S, 0.0)),
        trial_time_s=(float(result[keys.TRIAL_TIME_S]) if keys.TRIAL_TIME_S in result
                      else None),
        start_epoch=int(result.get(keys.START_EPOCH, 0)),
        checkpoint_epoch=(int(result[keys.CHECKPOINT_EPOCH])
                          if keys.CHECKPOINT_EPOCH in result else None),
        node=result.get(keys.NODE_ID),
        history=tuple((int(e), float(v)) for e, v in result.get(keys.HISTORY) or ()),
        result=result)


class CoreScheduler(_Inert, FIFOScheduler):
    """Sends every result to the core and runs the node watchdog."""

    def __init__(self, core: SearchCore, attempts: Attempts, metric: str, placement=None):
        super().__init__()
        self.core, self.attempts, self.metric_name = core, attempts, metric
        self.placement = placement

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        number = self.attempts.number(trial.trial_id)
        report = None if number is None else epoch_report(number, result, self.metric_name)
        if report is None:
            return TrialScheduler.CONTINUE
        return TO_RAY[self.core.reported(report)]

    def choose_trial_to_run(self, tune_controller):
        if self.placement is not None and self.placement.active:
            # A trial waiting for a node kind that is gone is taken off the queue here.
            for trial, requeue, reason in self.placement.watch_pending(
                    tune_controller.get_trials()):
                number = self.attempts.release(trial.trial_id)
                if number is not None:
                    self.core.moved(number, reason, requeue)
                trial.init_local_path()  # Tune's result grid wants every trial's folder
                tune_controller.stop_trial(trial)
        return super().choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        return f"hpsearch {self.core.policy.name}"


def _load_error(trial: Any) -> tuple[BaseException | None, str]:
    """The trial's pickled error and text trace, read where the controller wrote them.

    The controller writes both next to the trial's *local* results before it calls
    the callbacks; ``Trial.get_pickled_error`` reads the synced copy, not there yet.
    """
    import cloudpickle

    error, text = None, ""
    path = trial.pickled_error_file
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                error = cloudpickle.load(f)
        except Exception:  # an exception that cannot be unpickled here
            error = None
    path = trial.error_file
    if path and os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    return error, text


def is_setup_error(error: BaseException | None) -> bool:
    """Whether a trial's error means every trial would fail the same way because the
    input is wrong: the trainable's contract broken
    (:class:`~hpsearch.errors.TrialSetupError`) or a config error found inside the
    trial (both exit code 2)."""
    return isinstance(error, HpsearchError) and error.exit_code == EXIT_CONFIG


def error_summary(trial: Any) -> tuple[str, bool, str]:
    """Why a Ray trial failed: one line, whether it was a setup error, and the whole
    error text (where a lost node shows)."""
    error, text = _load_error(trial)
    if error is not None:
        cause = getattr(error, "cause", None) or error
        setup = is_setup_error(cause)
        lines = str(cause).strip().splitlines()
        line = lines[-1] if lines else ""
        line = line if setup else f"{type(cause).__name__}: {line.strip()}".rstrip(": ")
        return line, setup, f"{type(cause).__name__}: {cause}\n{error}"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1].strip() if lines else "unknown error"), False, text


class CoreCallback(_Inert, Callback):
    """Tells the core when attempts start and end; ticks the progress line.

    How an attempt ended is decided by :func:`hpsearch.recovery.preemption.preemption_reason`
    from the evidence gathered here: a preemption notice in its last result (it
    checkpointed and left), a kill by the simulated-preemption injector, a preemption
    note its process left in its checkpoint folder, or a lost node are preemptions; any
    other error is a failure; the rest is a normal end.

    Args:
        core: The search core.
        attempts: The attempt map shared with the searcher and scheduler.
        preempted_note: ``(number, trial_id) -> note or None``: the note a trial's
            process left when SIGTERM reached it (read from its checkpoint store).
        injector: The simulated-preemption callback (its kills are preemptions), or None.
        tick: Called with the number of running attempts after each controller step.
        fallback: ``(number, rejected, start epoch)``: shown when a restarted trial set
            checkpoints aside (corrupt, or not loadable as data) and resumed earlier.
        heartbeat: Called after each controller step: the ledger's throttled ``alive``
            event, so a driver killed without warning bills what ran until then.
        checkpoint_dir: Trial number -> its checkpoint folder (named when a trial's
            write failed for lack of space and the error names no file).
        refused: ``(node id, reason)``: a trial refused to train on a node that cannot
            reach the checkpoint storage (the trial is placed elsewhere, see
            :class:`~hpsearch.recovery.storage.StorageUnreachable`).
        step: Called after each controller step (the storage guard's poll).
        node_gone: ``node id -> bool``: whether Ray reports that node dead (waiting for
            Ray's health check); asked only when an attempt's error says its process was
            unreachable, which is how a node that vanished can first show.
        forget: Ray trial id -> None: frees the concurrency slot of an attempt Tune
            ended without telling anyone (the limiter's ``on_trial_complete``; see
            :meth:`_untold_errors`).
    """

    def __init__(self, core: SearchCore, attempts: Attempts,
                 preempted_note: Callable[[int, str], dict | None] | None = None,
                 injector: Any = None, tick: Callable[[int], None] | None = None,
                 fallback: Callable[[int, Any, int], None] | None = None,
                 heartbeat: Callable[[], Any] | None = None,
                 checkpoint_dir: Callable[[int], str] | None = None,
                 refused: Callable[[str, str], None] | None = None,
                 step: Callable[[], None] | None = None,
                 node_gone: Callable[[str], bool] | None = None,
                 forget: Callable[[str], None] | None = None):
        self.core, self.attempts = core, attempts
        self.forget = forget
        self.preempted_note = preempted_note
        self.injector = injector
        self.tick = tick
        self.fallback = fallback
        self.heartbeat = heartbeat
        self.checkpoint_dir = checkpoint_dir
        self.refused = refused
        self.step = step
        self.node_gone = node_gone

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        rejected = result.get(keys.CHECKPOINTS_REJECTED)
        number = self.attempts.number(trial.trial_id)
        if rejected and number is not None and self.fallback is not None:
            start = int(result.get(keys.START_EPOCH, 0) or 0)
            for name, reason in rejected:
                log.warning("trial %s: checkpoint %s is corrupt (%s); resumed from epoch %d",
                            number, name, reason, start)
            self.fallback(number, rejected, start)

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        number = self.attempts.number(trial.trial_id)
        if number is not None:
            self.core.started(number)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        number = self.attempts.release(trial.trial_id)
        if number is None:
            return  # taken off the queue by the watchdog, already told
        notice = (trial.last_result or {}).get(keys.PREEMPTED)
        if notice:
            # A notice: the trial checkpointed its last epoch and left; nothing is lost.
            self.core.preempted(number, str(notice), saved=True)
        else:
            self.core.ended(number)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        number = self.attempts.release(trial.trial_id)
        if number is None:
            return
        error, trace = _load_error(trial)
        cause = getattr(error, "cause", None) or error
        if isinstance(cause, StorageUnreachable):
            # It trained nothing: the node is avoided from now on, the trial runs
            # elsewhere (neither a failure nor a preemption).
            if self.refused is not None:
                self.refused(cause.node_id, cause.reason)
            self.core.moved(number, str(cause), requeue=True)
            return
        disk = disk_full_cause(error, trace)
        if disk is not None:
            # A full disk is not the trial's fault: no FAIL, no retry used; the session
            # stops and the next one resumes the trial from its checkpoint.
            where = disk.path or (self.checkpoint_dir(number) if self.checkpoint_dir
                                  else "the run dir")
            self.core.halted(number, where)
            return
        text, setup, full = error_summary(trial)
        evidence = {
            "killed": self.injector.was_killed(trial.trial_id) if self.injector else None,
            "note": self.preempted_note(number, trial.trial_id) if self.preempted_note
            else None,
            "error_text": full}
        reason = None if setup else preemption_reason(**evidence)
        if reason is None and not setup and self._node_gone(trial, full):
            # Asked last: it may wait for Ray's health check.
            reason = preemption_reason(**evidence, node_gone=True)
        if reason:
            self.core.preempted(number, reason)
        else:
            self.core.failed(number, text, setup=setup)

    def _untold_errors(self, trials: list) -> None:
        """Attempts Tune set to ERROR without a callback: back to the core's queue.

        Tune ends an attempt silently when the process it was to reuse cannot take it:
        ``reset_config`` waits ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` for the previous
        trial's thread to end (its stop unwinds through the last checkpoint and
        Lightning's teardown) and on a timeout marks the new attempt ERROR, telling
        neither the searcher nor the callbacks. The core would count that trial live for
        ever and Tune's concurrency limiter its slot taken: the run would wait for a next
        trial that never comes. Such an attempt never ran (a reused process is reset
        before it trains), so the trial is requeued as one taken off a worker's queue
        (:meth:`~hpsearch.core.search.SearchCore.moved`: no failure, no retry used) and
        its slot is freed (``forget``).
        """
        for trial in trials:
            if trial.status != Trial.ERROR:
                continue
            number = self.attempts.release(trial.trial_id)
            if number is None:
                continue  # told already (on_trial_error), or never ours
            text, _, _ = error_summary(trial)
            reason = f"Ray Tune ended attempt {trial.trial_id} before it ran ({text})"
            log.warning("trial %d: %s; it is queued again", number, reason)
            self.core.moved(number, reason, requeue=True)
            if self.forget is not None:
                self.forget(trial.trial_id)

    def _node_gone(self, trial: Trial, error_text: str) -> bool:
        """Whether the node of a trial whose process was unreachable died (a spot node
        taken back shows so when the trial's connection is reset before Ray notices)."""
        if self.node_gone is None or not unreachable(error_text):
            return False
        node = (trial.last_result or {}).get(keys.NODE_ID)
        return bool(node) and self.node_gone(str(node))

    def on_step_end(self, iteration, trials, **info) -> None:
        self._untold_errors(trials)
        if self.heartbeat is not None:
            self.heartbeat()
        if self.step is not None:
            self.step()
        if self.tick is not None:
            self.tick(sum(1 for t in trials if t.status == Trial.RUNNING))


#: Seconds to wait for Ray to declare a node dead: its health check (every 3 s, dead
#: after 5 misses, by default) takes up to about 20 s after the node went.
NODE_DEATH_WAIT_S = 30.0


def node_died(node_id: str, wait_s: float = NODE_DEATH_WAIT_S,
              list_nodes: Callable[[], list] | None = None,
              clock: Callable[[], float] | None = None,
              sleep: Callable[[float], None] | None = None) -> bool:
    """Whether Ray reports the node ``node_id`` dead (or no longer lists it) within
    ``wait_s`` seconds: the evidence for :class:`CoreCallback`'s ``node_gone``.

    A node that is still alive after ``wait_s`` is alive (the error was the trial's
    own). Blocks the caller (Tune's controller) for at most ``wait_s``, only after an
    attempt failed with an unreachable process.
    """
    import time

    import ray

    if list_nodes is None:
        if node_id == ray.get_runtime_context().get_node_id():
            return False  # the driver's own node: alive while this runs
        list_nodes = ray.nodes
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + wait_s
    while True:
        entry = next((n for n in list_nodes() if str(n.get("NodeID")) == node_id), None)
        if entry is None or not entry.get("Alive"):
            return True
        if clock() >= deadline:
            return False
        sleep(0.5)


def trial_resources(placement: Any, base: dict[str, float]) -> Callable[[dict], Any]:
    """Tune's per-trial resources: the placement's (``base`` plus the node kind), as a
    placement group that avoids the nodes that cannot reach the checkpoint storage."""
    from ray.tune import PlacementGroupFactory
    from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

    per_trial = placement.resources(base)

    def resources(config: dict[str, Any]) -> Any:
        factory = resource_dict_to_pg_factory(per_trial(config))
        selector = avoid_selector(placement.avoid())
        if selector is None:
            return factory
        return PlacementGroupFactory(factory.bundles, strategy=factory.strategy,
                                     bundle_label_selector=[selector] * len(factory.bundles))

    return resources


class AbortStopper(_Inert, Stopper):
    """Stops the whole experiment once the core aborted the session."""

    def __init__(self, core: SearchCore):
        self.core = core

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        core = getattr(self, "core", None)
        return core is not None and (core.abort is not None or core.halt_reason is not None)
