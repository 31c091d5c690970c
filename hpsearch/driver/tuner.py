"""The session's Tuner: how the search core is wired into Ray Tune (searcher, scheduler,
callbacks, the trials' function and resources, Tune's experiment folder)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from hpsearch import keys
from hpsearch.errors import ConfigError
from hpsearch.spec import config as config_mod

log = logging.getLogger("hpsearch")


def _next_session(tune_dir: Path) -> str:
    n = 1
    while (tune_dir / f"session-{n}").exists():
        n += 1
    return f"session-{n}"


def _trial_dirname(trial: Any) -> str:
    """Tune folders named after the Optuna trial: ``trial-0007-<ray id>``."""
    from hpsearch.adapters.trial.runner import trial_name

    return f"{trial_name(int(trial.config.get(keys.TRIAL_NUMBER, -1)))}-{trial.trial_id}"


def trial_spec(config: config_mod.Config, run_path: Path,
               function: Callable[..., Any] | None = None, checkpoint_url: str | None = None,
               storage_probe: Any = None) -> Any:
    """What every trial process of this run is sent (see ``runner.TrialSpec``);
    ``function``: the build function given as an object to ``run(trainable=...)``;
    ``checkpoint_url``: where the trials' stores are (default the run dir's
    ``checkpoints/``); ``storage_probe``: the token a trial reads before it trains."""
    from hpsearch.adapters.trial import runner

    preemption = config.preemption
    rate = preemption.rate_per_hour
    if rate is None:
        rate = preemption.simulate.rate_per_hour
    return runner.TrialSpec(
        config=config,
        log_dir=str(run_path / "logs"),
        checkpoint_url=checkpoint_url or str(run_path / "checkpoints"),
        storage_probe=storage_probe,
        mtbp_s=3600.0 / rate if rate else None,
        trainable_fn=function,
    )


class TunerBuilder:
    """Builds a session's Ray Tune Tuner: the search core behind a searcher, a scheduler
    and a callback, running the backend's trials.

    Args:
        config: The run's config.
        run_path: The run dir (Tune's experiment goes to its ``tune/``).
        backend: How trials run (:class:`~hpsearch.driver.backend.LightningBackend`).
        checkpoints: The run's checkpoint storage
            (:class:`~hpsearch.driver.checkpoints.RunCheckpoints`).
        heartbeat: What runs after each controller step (the money's alive event).
    """

    def __init__(self, config: config_mod.Config, run_path: Path, backend: Any,
                 checkpoints: Any, heartbeat: Callable[[], None]):
        self.config = config
        self.run_path = run_path
        self.backend = backend
        self.checkpoints = checkpoints
        self.heartbeat = heartbeat

    def tuner(self, core, recorder, placement, attempts, progress, concurrency: int):
        """The Tuner: the core behind a searcher, a scheduler and a callback."""
        from ray import tune
        from ray.tune.search import ConcurrencyLimiter

        from hpsearch.adapters.ray.tune import AbortStopper, CoreScheduler, CoreSearcher

        config = self.config
        metric, mode = config.objective.metric, config.objective.mode
        # The limiter Tune would put around the searcher for max_concurrent_trials, held
        # here so the callback can free the slot of an attempt Tune ends untold.
        searcher = ConcurrencyLimiter(
            CoreSearcher(core, attempts, metric, mode, recorder.set_attrs),
            max_concurrent=concurrency)
        callback, injector = self._callback(core, placement, attempts, progress,
                                            searcher.on_trial_complete)
        trainable = self._trainable(placement)
        # Tune's experiment (per-attempt results, error files) stays in the run dir on
        # the driver's disk, even on a cluster without a shared disk: hpsearch never
        # restores from it (a continued run rebuilds from the study, the ledger and the
        # trials' checkpoints), trials report no Tune checkpoints, and the controller
        # that writes it runs here.
        tune_dir = self.run_path / "tune"
        return tune.Tuner(
            trainable,
            param_space={},
            tune_config=tune.TuneConfig(
                metric=metric, mode=mode,
                search_alg=searcher,
                scheduler=CoreScheduler(core, attempts, metric, placement),
                # Restarts are new Ray trials of the same study trial: the core, not
                # this count, says when the session is done.
                num_samples=1_000_000,
                reuse_actors=True,
                trial_dirname_creator=_trial_dirname,
            ),
            run_config=tune.RunConfig(
                name=_next_session(tune_dir),
                storage_path=str(tune_dir),
                verbose=0,
                log_to_file=True,
                stop=AbortStopper(core),
                callbacks=[callback, *self.backend.callbacks(),
                           *([injector] if injector else []),
                           tune.logger.JsonLoggerCallback(), tune.logger.CSVLoggerCallback()],
                # The core restarts trials itself: a preemption must not use up a
                # failure retry, and checkpoints live in the run dir.
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )

    def _trainable(self, placement):
        """The trials' function: the backend's, sent the run's trial spec, asking each
        trial's resources of ``placement``."""
        from ray import tune

        from hpsearch.adapters.ray.tune import trial_resources

        config, checkpoints = self.config, self.checkpoints
        spec = trial_spec(config, self.run_path,
                          getattr(self.backend, "function", None),
                          checkpoint_url=checkpoints.trials_url,
                          storage_probe=(checkpoints.probe.trial_token
                                         if checkpoints.probe is not None else None))
        return tune.with_resources(
            tune.with_parameters(self.backend.trainable(spec), spec=spec),
            trial_resources(placement, {"cpu": config.resources.cpu,
                                        "gpu": config.resources.gpu}),
        )

    def _callback(self, core, placement, attempts, progress, forget):
        """``(the core's Tune callback, the simulated-preemption injector or None)``; the
        callback asks the storage guard about nodes that join (if checkpoints have one)
        and frees an untold attempt's concurrency slot with ``forget``."""
        from hpsearch.adapters.trial import runner
        from hpsearch.adapters.ray.preemption import PreemptionCallback
        from hpsearch.adapters.ray.tune import CoreCallback, node_died
        from hpsearch.recovery.preemption import SimulatedPreemptions

        checkpoints = self.checkpoints
        preemption = self.config.preemption
        simulated = SimulatedPreemptions(preemption.simulate.rate_per_hour,
                                         preemption.simulate.at, self.config.search.seed)
        injector = None
        if simulated.rate_per_hour > 0 or simulated.at:
            injector = PreemptionCallback(simulated, attempts.number, preemption.simulate.signal)

        def note(number: int, trial_id: str) -> dict | None:
            return checkpoints.preempted_note(runner.trial_name(number), trial_id)

        def give_up(reason: str) -> None:
            if core.abort is None:
                core.abort = ConfigError("checkpoint.storage", reason)

        def warn(line: str) -> None:
            progress.emit(line)
            log.warning("%s", line.strip())

        guard = checkpoints.guard(placement, warn, give_up)
        callback = CoreCallback(core, attempts, note, injector, progress.tick,
                                progress.checkpoint_fallback, self.heartbeat,
                                lambda number: checkpoints.trial(runner.trial_name(number)),
                                refused=guard.judge if guard is not None else None,
                                step=guard.poll if guard is not None else None,
                                node_gone=node_died, forget=forget)
        return callback, injector
