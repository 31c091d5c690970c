"""The trial runner: Lightning training inside a Ray Tune function trainable.

Each epoch the runner reports every logged metric plus ``hps_epoch`` and the epoch's
wall time through ``tune.report``, and when a checkpoint is due (every epoch, every k
epochs by Young/Daly, or on a preemption notice) saves one into the trial's
:class:`~hpsearch.checkpoint.CheckpointStore` under the run dir: weights, optimizer,
Lightning's loop state, the epoch and the RNG states of Python, NumPy and torch. Any
start of the trial (first, after a preemption, after a failure, after the driver was
restarted) resumes from the newest valid checkpoint and continues exactly where it left
off: same batches, same dropout masks, same metrics.

On SIGTERM or an interruption notice the trial finishes its epoch (if the grace allows),
checkpoints, reports ``hps_preempted`` and stops; the driver restarts it.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpsearch import gpuuse, keys
from hpsearch.checkpoint import CheckpointStore, young_daly_epochs
from hpsearch.errors import HpsearchError, TrialSetupError
from hpsearch.oom import OomLadder
from hpsearch.preemption import Notice, NoticePoller, watch_sigterm
from hpsearch.runtime import epoch_estimate


class TrialOutOfMemory(HpsearchError):
    """A trial ran out of GPU memory on every rung of the OOM ladder."""


#: File name of the Lightning checkpoint inside each stored checkpoint.
CHECKPOINT_FILE = "trial.ckpt"
log = logging.getLogger("hpsearch.trial")


@dataclass(frozen=True)
class TrialSpec:
    """What every trial of a run shares (sent once to the trial processes).

    Attributes:
        trainable: ``package.module:function`` import path.
        metric: The objective metric the trainable must log.
        max_epochs: Epochs to train unless stopped.
        cpu: CPUs reserved per trial (sets torch's thread count).
        gpu: GPUs reserved per trial (> 0 trains on CUDA).
        log_dir: Folder for ``trial-<number>.log`` (the trial's log records); None or
            unreachable from the trial's node: no file.
        price_per_hour: Price of one trial-hour, for the expected cost to finish.
        checkpoint_dir: Folder holding ``trial-NNNN/`` checkpoint stores (shared by
            every node; None keeps no checkpoints).
        mode: The objective's direction (which checkpoint is the best).
        keep_last: Newest checkpoints kept per trial.
        every_epochs: Epochs between checkpoints; None = Young/Daly (needs ``mtbp_s``).
        mtbp_s: Mean seconds between preemptions expected; None = none expected.
        notice_url: Metadata URL polled for an interruption notice, or None.
        notice_poll_s: Seconds between polls.
        grace_s: After a notice or SIGTERM, seconds left to finish the epoch.
        oom_ladder: Rungs climbed after CUDA out-of-memory errors (see hpsearch.oom).
        oom_min_batch_size: The smallest batch ``halve_batch`` may set.
        oom_batch_param: The param holding the batch size.
        gpu_sample_s: Seconds between two NVML samples of a GPU trial's utilisation
            and memory (see :class:`hpsearch.gpu.GpuSampler`).
    """

    trainable: str
    metric: str
    max_epochs: int
    cpu: float = 1.0
    gpu: float = 0.0
    log_dir: str | None = None
    price_per_hour: float = 0.0
    checkpoint_dir: str | None = None
    mode: str = "max"
    keep_last: int = 2
    every_epochs: int | None = None
    mtbp_s: float | None = None
    notice_url: str | None = None
    notice_poll_s: float = 5.0
    grace_s: float = 25.0
    oom_ladder: tuple[str, ...] = ()
    oom_min_batch_size: int = 8
    oom_batch_param: str = "batch_size"
    gpu_sample_s: float = 1.0


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """Split a Tune trial config into (sampled params, Optuna trial number, seed)."""
    params = {k: v for k, v in config.items() if not k.startswith(keys.RESERVED_PREFIX)}
    return params, int(config.get(keys.TRIAL_NUMBER, -1)), int(config.get(keys.TRIAL_SEED, 0))


def _callbacks(spec: TrialSpec, trial_number: int, notice: Notice):
    """Build the Lightning callbacks (imported lazily: Lightning is heavy) and the
    trial's checkpoint store."""
    import numpy as np
    import pytorch_lightning as pl
    import torch
    from ray import tune

    class RngState(pl.Callback):
        """Saves and restores every RNG the training draws from, for exact resume."""

        def state_dict(self) -> dict[str, Any]:
            np_state = np.random.get_state()
            state = {
                "python": random.getstate(),
                "numpy": (
                    np_state[0],
                    torch.from_numpy(np_state[1].astype(np.int64)),
                    int(np_state[2]),
                    int(np_state[3]),
                    float(np_state[4]),
                ),
                "torch": torch.get_rng_state(),
            }
            if torch.cuda.is_available():
                state["cuda"] = torch.cuda.get_rng_state_all()
            return state

        def load_state_dict(self, state: dict[str, Any]) -> None:
            random.setstate(state["python"])
            name, words, pos, has_gauss, gauss = state["numpy"]
            np.random.set_state((name, words.numpy().astype(np.uint32), pos, has_gauss, gauss))
            torch.set_rng_state(state["torch"])
            if "cuda" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda"])

    class TuneReport(pl.Callback):
        """At each epoch end: checkpoint when due, report to Tune, stop on a preemption."""

        def __init__(self) -> None:
            self.epoch_started = time.monotonic()
            self.process_started = time.monotonic()
            self.start_epoch = 0
            self.epoch_times: list[float] = []
            self.every = spec.every_epochs
            self.last_checkpoint = 0
            self.between_epochs = None
            # The objective of every epoch so far, kept in each checkpoint: a driver that
            # died before recording some epochs gets them back from the restarted trial.
            self.history: dict[int, float] = {}
            self.history_sent = False
            self.oom_steps: list[str] = []
            self.sampler = None

        def gpu_figures(self) -> dict[str, float]:
            """This process's GPU utilisation and memory so far (none on CPU)."""
            if self.sampler is None:
                return {}
            figures = self.sampler.snapshot()
            use = gpuuse.GpuUse(
                util_mean=figures["util_mean"], sampled_s=figures["sampled_s"] or 0.0,
                mem_peak_mib=figures["mem_peak_mib"],
                torch_peak_mib=torch.cuda.max_memory_reserved() / 2**20)
            return gpuuse.to_result(use)

        def close(self) -> None:
            """Stop sampling the GPUs."""
            if self.sampler is not None:
                self.sampler.stop()

        def on_train_start(self, trainer, pl_module) -> None:
            # After a restore, current_epoch is the first epoch this process trains.
            self.start_epoch = self.last_checkpoint = trainer.current_epoch

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self.epoch_started = time.monotonic()

        def _checkpoint(self, trainer, epoch: int, value: float) -> None:
            started = time.monotonic()
            store.save(epoch, lambda folder: trainer.save_checkpoint(
                str(folder / CHECKPOINT_FILE), weights_only=False), metric=value,
                meta={"trial": trial_number,
                      "history": [[e, v] for e, v in sorted(self.history.items())]})
            self.last_checkpoint = epoch
            if self.every is None:  # Young/Daly from the measured costs
                self.every = young_daly_epochs(time.monotonic() - started, spec.mtbp_s,
                                               epoch_estimate(self.epoch_times) or 1.0,
                                               spec.max_epochs)

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            metrics = {}
            for name, value in trainer.callback_metrics.items():
                if isinstance(value, torch.Tensor) and value.numel() == 1:
                    metrics[name] = float(value)
                elif isinstance(value, (int, float)):
                    metrics[name] = float(value)
            if spec.metric not in metrics:
                logged = ", ".join(sorted(metrics)) or "nothing"
                raise TrialSetupError(
                    f"trial {trial_number}: objective.metric '{spec.metric}' is never "
                    f"logged by {spec.trainable} (it logs: {logged}); log it with "
                    f"self.log('{spec.metric}', ...) in validation_step"
                )
            now = time.monotonic()
            epoch = trainer.current_epoch + 1
            metrics[keys.EPOCH] = epoch
            metrics[keys.EPOCH_TIME_S] = now - self.epoch_started
            metrics[keys.TRIAL_TIME_S] = now - self.process_started
            metrics[keys.START_EPOCH] = self.start_epoch
            metrics[keys.NODE_ID] = node_id
            metrics[keys.ATTEMPT] = attempt
            if gpu_ids:
                metrics[keys.GPU_IDS] = ",".join(gpu_ids)
            metrics.update(self.gpu_figures())
            if self.oom_steps:
                metrics[keys.OOM_STEPS] = list(self.oom_steps)
            self.history[epoch] = metrics[spec.metric]
            if not self.history_sent and self.start_epoch > 0:
                metrics[keys.HISTORY] = [[e, v] for e, v in sorted(self.history.items())
                                         if e <= self.start_epoch]
            self.history_sent = True
            self.epoch_times.append(metrics[keys.EPOCH_TIME_S])
            remaining = max(0, spec.max_epochs - epoch) * (
                epoch_estimate(self.epoch_times) or 0.0)
            metrics[keys.REMAINING_S] = remaining
            metrics[keys.COST_TO_FINISH] = remaining * spec.price_per_hour / 3600.0
            due = (self.every is None or epoch - self.last_checkpoint >= self.every
                   or epoch >= spec.max_epochs or notice.is_set())
            if store is not None and due:
                self._checkpoint(trainer, epoch, metrics[spec.metric])
            metrics[keys.CHECKPOINT_EPOCH] = self.last_checkpoint
            if notice.is_set():
                metrics[keys.PREEMPTED] = notice.reason
                trainer.should_stop = True
                if notice.via_signal:
                    # The main thread is exiting: nothing can be reported any more.
                    if store is not None:
                        store.mark_preempted(tune.get_context().get_trial_id(), epoch,
                                             notice.reason)
                    notice.handled.set()
                    return
            self.between_epochs = (trainer, epoch, metrics[spec.metric])
            try:
                tune.report(metrics)
            finally:
                self.between_epochs = None
            if notice.is_set():
                notice.handled.set()

        def report_restored(self, entry) -> None:
            """Report the epoch a checkpoint holds (a restart with nothing left to do)."""
            from ray import tune as ray_tune

            self.history_sent = True
            ray_tune.report({
                spec.metric: entry.metric, keys.EPOCH: entry.epoch, keys.EPOCH_TIME_S: 0.0,
                keys.TRIAL_TIME_S: time.monotonic() - self.process_started,
                keys.START_EPOCH: entry.epoch, keys.CHECKPOINT_EPOCH: entry.epoch,
                keys.NODE_ID: node_id, keys.REMAINING_S: 0.0, keys.COST_TO_FINISH: 0.0,
                keys.HISTORY: [[e, v] for e, v in sorted(self.history.items())],
            })

        def on_signal(self) -> bool:
            """SIGTERM arrived. Between two epochs (blocked reporting the last one, the
            usual case): checkpoint it now if it is not yet and say so; else False."""
            state = self.between_epochs
            if state is None:
                return False
            trainer, epoch, value = state
            if store is not None:
                if self.last_checkpoint < epoch:
                    self._checkpoint(trainer, epoch, value)
                store.mark_preempted(tune.get_context().get_trial_id(), epoch, notice.reason)
            notice.handled.set()
            return True

    import ray

    node_id = ray.get_runtime_context().get_node_id()
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    store = None
    if spec.checkpoint_dir is not None:
        store = CheckpointStore(Path(spec.checkpoint_dir) / trial_name(trial_number),
                                keep_last=spec.keep_last, mode=spec.mode)
    report = TuneReport()
    attempt = uuid.uuid4().hex[:12]
    if gpu_ids and torch.cuda.is_available():
        from hpsearch.gpu import GpuSampler

        # The GPUs Ray gave this process (CUDA_VISIBLE_DEVICES), read through NVML.
        report.sampler = GpuSampler(interval_s=spec.gpu_sample_s).start()
        if report.sampler.message:
            log.info("trial %d: GPU use not sampled: %s", trial_number,
                     report.sampler.message)
    return [RngState(), report], store, report


def _build(spec: TrialSpec, params: dict[str, Any], trial_number: int):
    import pytorch_lightning as pl

    from hpsearch.trainable import resolve

    built = resolve(spec.trainable)(dict(params))
    if (
        not isinstance(built, tuple)
        or len(built) != 2
        or not isinstance(built[0], pl.LightningModule)
        or not isinstance(built[1], pl.LightningDataModule)
    ):
        raise TrialSetupError(
            f"trial {trial_number}: {spec.trainable} must return "
            f"(LightningModule, LightningDataModule), got {type(built).__name__}"
        )
    return built


def trial_name(number: int) -> str:
    """``trial-0007``: the name of trial 7's log file and Tune folder prefix."""
    return f"trial-{number:04d}"


class _TrialLog:
    """Sends this trial's log records (Lightning's notices, warnings) to its own file."""

    def __init__(self, log_dir: str | None, number: int):
        self.handler: logging.Handler | None = None
        if log_dir is None:
            return
        try:
            os.makedirs(log_dir, exist_ok=True)
            self.handler = logging.FileHandler(os.path.join(log_dir, f"{trial_name(number)}.log"))
        except OSError:  # a node that does not share the run dir's disk
            return
        self.handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.handler.setLevel(logging.INFO)

    def __enter__(self) -> "_TrialLog":
        if self.handler is not None:
            logging.captureWarnings(True)
            logging.getLogger().addHandler(self.handler)  # Lightning's loggers propagate
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.handler is None:
            return
        if exc is not None:
            logging.getLogger("hpsearch.trial").error("trial failed", exc_info=exc)
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()


def train(config: dict[str, Any], spec: TrialSpec) -> None:
    """Train one trial; the Ray Tune function trainable (use with ``tune.with_parameters``).

    Args:
        config: The trial config: sampled params plus ``hps_trial_number``/``hps_seed``.
        spec: What every trial of the run shares.
    """
    params, trial_number, seed = split_config(config)
    with _TrialLog(spec.log_dir, trial_number):
        _train(params, trial_number, seed, spec)


def _batch_size(params: dict[str, Any], data: Any, param: str) -> int | None:
    value = params.get(param, getattr(data, "batch_size", None))
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _supports_checkpointing(module: Any) -> bool:
    return callable(getattr(module, "gradient_checkpointing_enable", None))


def _trainer(spec: TrialSpec, callbacks: list[Any], ladder: OomLadder):
    import pytorch_lightning as pl
    import torch

    gpu = spec.gpu > 0 and torch.cuda.is_available()
    if spec.gpu > 0 and not gpu:
        log.warning("resources.gpu is %s but torch sees no CUDA device: training on CPU",
                    spec.gpu)
    precision = None
    if ladder.precision == "mixed":
        precision = "16-mixed" if gpu else "bf16-mixed"
    return pl.Trainer(
        max_epochs=spec.max_epochs,
        accelerator="gpu" if gpu else "cpu",
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=1,
        callbacks=callbacks,
        default_root_dir=os.getcwd(),
    )


def _train(params: dict[str, Any], trial_number: int, seed: int, spec: TrialSpec) -> None:
    import torch

    torch.set_num_threads(max(1, int(spec.cpu)))
    notice = Notice()
    callbacks, store, report = _callbacks(spec, trial_number, notice)
    ladder = OomLadder(spec.oom_ladder, spec.oom_min_batch_size, spec.oom_batch_param)
    unwatch = watch_sigterm(notice, spec.grace_s, report.on_signal)
    poller = None
    if spec.notice_url:
        poller = NoticePoller(spec.notice_url, spec.notice_poll_s, notice, spec.grace_s)
        poller.start()
    try:
        while True:
            oom = _fit_once(spec, ladder.params(params), trial_number, seed, callbacks,
                            store, report, ladder)
            if oom is None:
                return
            # Out of memory: climb one rung and resume from the newest checkpoint.
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            step = ladder.climb(oom.batch_size, oom.supports_checkpointing)
            report.oom_steps = list(ladder.taken)
            if step is None:
                raise TrialOutOfMemory(
                    f"trial {trial_number}: CUDA out of memory after the whole OOM ladder "
                    f"({'; '.join(ladder.taken) or 'no rungs'})")
            log.warning("trial %d: CUDA out of memory: %s", trial_number, step)
    finally:
        report.close()
        if poller is not None:
            poller.stop()
        if not notice.via_signal:
            unwatch()


def _fit_once(spec: TrialSpec, params: dict[str, Any], trial_number: int, seed: int,
              callbacks: list[Any], store: CheckpointStore | None, report: Any,
              ladder: OomLadder):
    """One fit of the trial: None when it ran to its end, or what the OOM ladder needs
    after a CUDA out-of-memory error."""
    import pytorch_lightning as pl
    import torch

    pl.seed_everything(seed, workers=True, verbose=False)
    module, data = _build(spec, params, trial_number)
    batch = _batch_size(params, data, spec.oom_batch_param)
    if ladder.batch_size is not None and spec.oom_batch_param not in params \
            and hasattr(data, "batch_size"):
        data.batch_size = ladder.batch_size
        batch = ladder.batch_size
    if ladder.grad_checkpointing:
        module.gradient_checkpointing_enable()
    trainer = _trainer(spec, callbacks, ladder)
    resume = store.latest_valid() if store is not None else None
    if store is not None and store.rejected:
        log.warning("trial %d: corrupt checkpoints set aside: %s", trial_number,
                    ", ".join(p.name for p in store.rejected))
        store.rejected.clear()
    if resume is not None:
        report.history = {int(e): float(v) for e, v in resume.meta.get("history", [])}
    try:
        if resume is None:
            trainer.fit(module, datamodule=data)
        else:
            log.info("trial %d: resuming from %s", trial_number, resume.path)
            trainer.fit(module, datamodule=data,
                        ckpt_path=str(resume.path / CHECKPOINT_FILE), weights_only=False)
            if not report.history_sent:
                # It had checkpointed its last epoch before it stopped: nothing to train,
                # but the study must still hear how it ended.
                report.report_restored(resume)
    except torch.OutOfMemoryError:
        log.info("trial %d: out of memory at batch size %s", trial_number, batch)
        return _OomContext(batch, _supports_checkpointing(module))
    return None


@dataclass
class _OomContext:
    """What the ladder needs to know about the fit that ran out of memory."""

    batch_size: int | None
    supports_checkpointing: bool
