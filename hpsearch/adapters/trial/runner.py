"""The trial runner: Lightning training inside a Ray Tune function trainable.

Each epoch the runner reports every logged metric plus ``hps_epoch`` and the epoch's
wall time through ``tune.report``, and when a checkpoint is due (every epoch, every k
epochs by Young/Daly, or on a preemption notice) saves one into the trial's
:class:`~hpsearch.recovery.checkpoint.CheckpointStore` under the run dir: weights, optimizer,
Lightning's loop state, the epoch and the RNG states of Python, NumPy and torch. Any
start of the trial (first, after a preemption, after a failure, after the driver was
restarted) resumes from the newest valid checkpoint and continues exactly where it left
off: same batches, same dropout masks, same metrics.

On SIGTERM or an interruption notice the trial finishes its epoch (if the grace allows),
checkpoints, reports ``hps_preempted`` and stops; the driver restarts it.

A trial with ``resources.devices`` > 1 (or several whole GPUs) trains with DDP: this
process is rank 0 (it reports to Tune and writes the checkpoints, as above) and
:mod:`hpsearch.adapters.trial.ddp_rank` runs the other ranks as child processes on this node
(see :class:`_Ranks`).

The Trainer, the callbacks and the DDP strategy come from the Lightning package the
trainable's module belongs to (``pytorch_lightning`` or ``lightning.pytorch``, see
:mod:`hpsearch.adapters.trial.lightning_api`); ``build`` may hand over its data in any of the
shapes Lightning accepts. A checkpoint is loaded as data only
(``torch.load(weights_only=True)``) and only after
:func:`~hpsearch.adapters.trial.lightning_api.checkpoint_problem` passed it; one that does not
pass is set aside like a corrupt one and the previous checkpoint is used.
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

from hpsearch import keys
from hpsearch.report import gpuuse
from hpsearch.recovery.checkpoint import CheckpointStore, Entry, young_daly_epochs
from hpsearch.errors import HpsearchError, TrialSetupError
from hpsearch.recovery.oom import OomLadder
from hpsearch.recovery.preemption import Notice, NoticePoller, watch_sigterm
from hpsearch.money.runtime import epoch_estimate


class TrialOutOfMemory(HpsearchError):
    """A trial ran out of GPU memory on every rung of the OOM ladder."""


#: File name of the Lightning checkpoint inside each stored checkpoint.
CHECKPOINT_FILE = "trial.ckpt"
log = logging.getLogger("hpsearch.trial")


@dataclass(frozen=True)
class TrialSpec:
    """What every trial of a run shares (sent once to the trial processes).

    Attributes:
        trainable: ``package.module:function`` import path, or the display name
            (``module:qualname``) of ``trainable_fn``.
        trainable_fn: The build function itself when the run was given a function
            object (sent to the trial processes by value, as Ray sends its own
            trainables); None = import ``trainable``.
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
        oom_ladder: Rungs climbed after CUDA out-of-memory errors (see hpsearch.recovery.oom).
        oom_min_batch_size: The smallest batch ``halve_batch`` may set.
        oom_batch_param: The param holding the batch size.
        gpu_sample_s: Seconds between two NVML samples of a GPU trial's utilisation
            and memory (see :class:`hpsearch.adapters.nvml.GpuSampler`).
        devices: Training processes (DDP ranks) of the trial; 1 = no DDP.
        ddp_timeout_s: How long a rank waits for the others in a collective before it
            fails (a rank that died on a GPU is noticed after this).
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
    devices: int = 1
    ddp_timeout_s: float = 600.0
    trainable_fn: Any = None


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """Split a Tune trial config into (sampled params, Optuna trial number, seed)."""
    params = {k: v for k, v in config.items() if not k.startswith(keys.RESERVED_PREFIX)}
    return params, int(config.get(keys.TRIAL_NUMBER, -1)), int(config.get(keys.TRIAL_SEED, 0))


def rng_callback(api=None):
    """A Lightning callback (of package ``api``, default ``pytorch_lightning``) that saves
    and restores every RNG the training draws from.

    Its state is plain data (tuples, numbers, strings and tensors), so a checkpoint
    holding it loads with ``torch.load(weights_only=True)``.
    """
    import numpy as np
    import torch

    from hpsearch.adapters.trial import lightning_api

    api = api or lightning_api.default()

    class RngState(api.Callback):
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

    return RngState()


def _callbacks(spec: TrialSpec, trial_number: int, notice: Notice, api):
    """Build the Lightning callbacks (of the trainable's Lightning package ``api``) and
    the trial's checkpoint store."""
    import torch
    from ray import tune

    from hpsearch.adapters.trial import lightning_api

    class TuneReport(api.Callback):
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
            # Checkpoints set aside before this process resumed: said in the next result.
            self.rejected: list[list[str]] = []
            self.data_checked = False

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

        def _write(self, trainer, folder: Path) -> None:
            path = folder / CHECKPOINT_FILE
            trainer.save_checkpoint(str(path), weights_only=False)
            if self.data_checked:
                return
            # Checked once per process: what it holds does not change between epochs,
            # and a checkpoint that will not load as data is lost work on every resume.
            unsafe = lightning_api.unsafe_globals(path)
            if unsafe:
                raise TrialSetupError(
                    f"trial {trial_number}: its checkpoint is not plain data: it "
                    f"references {', '.join(unsafe)} (usually a hyperparameter saved by "
                    f"save_hyperparameters() or a datamodule's state_dict). hpsearch "
                    f"loads checkpoints with torch.load(weights_only=True), which refuses "
                    f"code: pass numbers, strings, lists or dicts, or leave it out with "
                    f"save_hyperparameters(ignore=[...])")
            self.data_checked = True

        def _checkpoint(self, trainer, epoch: int, value: float) -> None:
            started = time.monotonic()
            store.save(epoch, lambda folder: self._write(trainer, folder), metric=value,
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
            if self.rejected:
                metrics[keys.CHECKPOINTS_REJECTED] = self.rejected
                self.rejected = []
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
            if trainer.world_size > 1:
                # Every rank saves (Lightning's save has a barrier) and stops together:
                # rank 0 decides (see hpsearch.adapters.trial.ddp_rank.Follower).
                trainer.strategy.broadcast((bool(due and store is not None),
                                            notice.is_set()), src=0)
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
            result = {
                spec.metric: entry.metric, keys.EPOCH: entry.epoch, keys.EPOCH_TIME_S: 0.0,
                keys.TRIAL_TIME_S: time.monotonic() - self.process_started,
                keys.START_EPOCH: entry.epoch, keys.CHECKPOINT_EPOCH: entry.epoch,
                keys.NODE_ID: node_id, keys.REMAINING_S: 0.0, keys.COST_TO_FINISH: 0.0,
                keys.HISTORY: [[e, v] for e, v in sorted(self.history.items())],
            }
            if self.rejected:
                result[keys.CHECKPOINTS_REJECTED] = self.rejected
                self.rejected = []
            ray_tune.report(result)

        def on_signal(self) -> bool:
            """SIGTERM arrived. Between two epochs (blocked reporting the last one, the
            usual case): checkpoint it now if it is not yet and say so; else False."""
            state = self.between_epochs
            if state is None:
                return False
            trainer, epoch, value = state
            if trainer.world_size > 1 and self.last_checkpoint < epoch:
                return False  # a save needs every rank: the next epoch's end saves it
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
        from hpsearch.adapters.nvml import GpuSampler

        # The GPUs Ray gave this process (CUDA_VISIBLE_DEVICES), read through NVML.
        report.sampler = GpuSampler(interval_s=spec.gpu_sample_s).start()
        if report.sampler.message:
            log.info("trial %d: GPU use not sampled: %s", trial_number,
                     report.sampler.message)
    return [rng_callback(api), report], store, report


def build_function(spec: TrialSpec):
    """The trainable's build function: the function object the run was given, else the
    one ``spec.trainable`` imports."""
    if spec.trainable_fn is not None:
        return spec.trainable_fn
    from hpsearch.spec.trainable import resolve

    return resolve(spec.trainable)


def _build(spec: TrialSpec, params: dict[str, Any], trial_number: int):
    """Call the trainable and understand what it returned (a
    :class:`~hpsearch.adapters.trial.lightning_api.Built`)."""
    from hpsearch.adapters.trial import lightning_api

    built = build_function(spec)(dict(params))
    try:
        return lightning_api.interpret(built)
    except lightning_api.ShapeError as exc:
        raise TrialSetupError(f"trial {trial_number}: {spec.trainable} {exc}") from None


def checkpoint_check(entry: Entry) -> str | None:
    """The runner's check of a stored checkpoint before it resumes from it (see
    :func:`~hpsearch.adapters.trial.lightning_api.checkpoint_problem`)."""
    from hpsearch.adapters.trial import lightning_api

    return lightning_api.checkpoint_problem(entry.path / CHECKPOINT_FILE)


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


def _supports_checkpointing(module: Any) -> bool:
    return callable(getattr(module, "gradient_checkpointing_enable", None))


def make_trainer(spec: TrialSpec, callbacks: list[Any], ladder: OomLadder, api):
    """The Lightning Trainer (of package ``api``, the trainable's) of one training
    process of the trial (DDP when ``spec.devices`` > 1; CUDA when the trial has GPUs
    and torch sees them)."""
    import torch

    gpu = spec.gpu > 0 and torch.cuda.is_available()
    if spec.gpu > 0 and not gpu:
        log.warning("resources.gpu is %s but torch sees no CUDA device: training on CPU",
                    spec.gpu)
    precision = None
    if ladder.precision == "mixed":
        precision = "16-mixed" if gpu else "bf16-mixed"
    strategy: Any = "auto"
    if spec.devices > 1:
        from datetime import timedelta

        strategy = api.ddp_strategy(process_group_backend="nccl" if gpu else "gloo",
                                    timeout=timedelta(seconds=spec.ddp_timeout_s))
    return api.Trainer(
        max_epochs=spec.max_epochs,
        accelerator="gpu" if gpu else "cpu",
        devices=spec.devices,
        strategy=strategy,
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


class _Session:
    """What one trial process keeps across its fits (the OOM ladder refits): the
    callbacks, made once the trainable's Lightning package is known, and its store."""

    def __init__(self, spec: TrialSpec, trial_number: int, notice: Notice):
        self.spec, self.trial_number, self.notice = spec, trial_number, notice
        self.callbacks: list[Any] | None = None
        self.store: CheckpointStore | None = None
        self.report: Any = None
        self.api: Any = None

    def ready(self, api) -> None:
        """Make the callbacks for Lightning package ``api`` (once)."""
        if self.callbacks is not None:
            if api is not self.api:
                raise TrialSetupError(
                    f"trial {self.trial_number}: {self.spec.trainable} returned a "
                    f"{api.name} module after a {self.api.name} one: use one package")
            return
        self.api = api
        self.callbacks, self.store, self.report = _callbacks(
            self.spec, self.trial_number, self.notice, api)

    def on_signal(self) -> bool:
        return self.report.on_signal() if self.report is not None else False

    def close(self) -> None:
        if self.report is not None:
            self.report.close()


def _train(params: dict[str, Any], trial_number: int, seed: int, spec: TrialSpec) -> None:
    import torch

    torch.set_num_threads(rank_threads(spec))
    notice = Notice()
    session = _Session(spec, trial_number, notice)
    ladder = OomLadder(spec.oom_ladder, spec.oom_min_batch_size, spec.oom_batch_param)
    unwatch = watch_sigterm(notice, spec.grace_s, session.on_signal)
    poller = None
    if spec.notice_url:
        poller = NoticePoller(spec.notice_url, spec.notice_poll_s, notice, spec.grace_s)
        poller.start()
    try:
        while True:
            oom = _fit_once(spec, ladder.params(params), trial_number, seed, session, ladder)
            if oom is None:
                return
            # Out of memory: climb one rung and resume from the newest checkpoint.
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            step = ladder.climb(oom.batch_size, oom.supports_checkpointing,
                                oom.batch_unknown)
            session.report.oom_steps = list(ladder.taken)
            if step is None:
                raise TrialOutOfMemory(
                    f"trial {trial_number}: CUDA out of memory after the whole OOM ladder "
                    f"({'; '.join(ladder.taken) or 'no rungs'})")
            log.warning("trial %d: CUDA out of memory: %s", trial_number, step)
    finally:
        session.close()
        if poller is not None:
            poller.stop()
        if not notice.via_signal:
            unwatch()


def _fit_once(spec: TrialSpec, params: dict[str, Any], trial_number: int, seed: int,
              session: _Session, ladder: OomLadder):
    """One fit of the trial: None when it ran to its end, or what the OOM ladder needs
    after a CUDA out-of-memory error."""
    import torch

    built, batch, batch_unknown = prepare(spec, params, trial_number, seed, ladder)
    session.ready(built.api)
    store, report = session.store, session.report
    resume = store.latest_valid(checkpoint_check) if store is not None else None
    if store is not None and store.rejected:
        for bad in store.rejected:
            log.warning("trial %d: checkpoint %s is corrupt (%s); set aside as %s",
                        trial_number, bad.name, bad.reason,
                        bad.aside.name if bad.aside is not None else "-")
        report.rejected += [[bad.name, bad.reason] for bad in store.rejected]
        store.rejected.clear()
    if resume is not None:
        report.history = {int(e): float(v) for e, v in resume.meta.get("history", [])}
    ckpt = None if resume is None else str(resume.path / CHECKPOINT_FILE)
    ranks = _Ranks(spec, params, trial_number, seed, ladder, ckpt)
    module = built.module
    try:
        with ranks:
            trainer = make_trainer(spec, session.callbacks, ladder, built.api)
            if resume is None:
                trainer.fit(module, **built.fit_kwargs())
            else:
                log.info("trial %d: resuming from %s", trial_number, resume.path)
                # Checked by checkpoint_check: data only, with Lightning's keys.
                trainer.fit(module, **built.fit_kwargs(), ckpt_path=ckpt, weights_only=True)
                if not report.history_sent:
                    # It had checkpointed its last epoch before it stopped: nothing to
                    # train, but the study must still hear how it ended.
                    report.report_restored(resume)
    except torch.OutOfMemoryError:
        log.info("trial %d: out of memory at batch size %s", trial_number, batch)
        return _OomContext(batch, _supports_checkpointing(module), batch_unknown)
    except Exception:
        if ranks.out_of_memory():  # another rank ran out of memory: rank 0 lost it
            log.info("trial %d: a DDP rank ran out of memory at batch size %s",
                     trial_number, batch)
            return _OomContext(batch, _supports_checkpointing(module), batch_unknown)
        raise
    return None


def rank_threads(spec: TrialSpec) -> int:
    """torch threads of each training process: the trial's CPUs over its processes."""
    return max(1, int(spec.cpu / max(1, spec.devices)))


def prepare(spec: TrialSpec, params: dict[str, Any], trial_number: int, seed: int,
            ladder: OomLadder):
    """Seed, build the trainable and apply the OOM ladder's rungs (every DDP rank does
    the same): ``(built, batch size or None, why the batch size cannot be halved or
    None)``.

    The batch size is the ``oom.batch_size_param`` param when the space has it (a
    rebuild at the halved value works for every data shape); else the ``batch_size``
    of the datamodule, or of the module (attribute or hyperparameter) when it builds its
    own loaders; loaders handed over ready-made cannot be re-batched.
    """
    from hpsearch.adapters.trial import lightning_api

    lightning_api.seed_everything(seed)
    built = _build(spec, params, trial_number)
    param = spec.oom_batch_param
    if param in params:
        return built, _int_or_none(params[param]), None
    holder, why_not = built.batch_size_holder()
    if holder is None:
        return built, None, why_not
    if ladder.batch_size is not None:
        lightning_api.set_batch_size(holder, ladder.batch_size)
    batch = _int_or_none(lightning_api.get_batch_size(holder))
    return built, batch, None if batch is not None else "its batch_size is not a number"


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


#: Exit code of a DDP rank process that ran out of GPU memory.
EXIT_RANK_OOM = 3


def _rendezvous_port() -> int:
    """A free port for rank 0's TCPStore, below Linux's ephemeral range (32768+) and above
    Ray's worker ports (10002-19999): a port freed by ``bind(0)`` can be taken by any
    outgoing connection before the store listens on it; these cannot."""
    import random
    import socket

    for _ in range(100):
        port = random.randint(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Ranks:
    """The DDP ranks 1..N-1 of a trial, as child processes of this one (rank 0).

    Entering sets the torch.distributed rendezvous (``MASTER_ADDR``/``MASTER_PORT`` on
    127.0.0.1, ``WORLD_SIZE``, ``LOCAL_RANK=0``: Lightning then launches nothing itself)
    in this process's environment and starts ``python -m hpsearch.adapters.trial.ddp_rank`` for
    each other rank, with the same trial, params, seed, OOM rungs and checkpoint to
    resume from; they inherit ``CUDA_VISIBLE_DEVICES`` (the GPUs Ray gave the trial) and
    die with this process's training thread (``PR_SET_PDEATHSIG``). Leaving restores the
    environment, ends the process group and stops the ranks still running. A no-op for
    a one-process trial.
    """

    ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK")

    def __init__(self, spec: TrialSpec, params: dict[str, Any], trial_number: int,
                 seed: int, ladder: OomLadder, ckpt_path: str | None):
        self.spec, self.params, self.trial_number, self.seed = spec, params, trial_number, seed
        self.ladder, self.ckpt_path = ladder, ckpt_path
        self.procs: list[Any] = []
        self._env: dict[str, str | None] = {}
        self._tmp: str | None = None

    def __enter__(self) -> "_Ranks":
        if self.spec.devices <= 1:
            return self
        import subprocess
        import sys
        import tempfile

        import cloudpickle

        port = _rendezvous_port()
        values = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  "WORLD_SIZE": str(self.spec.devices), "NODE_RANK": "0"}
        self._tmp = tempfile.mkdtemp(prefix="hps-ddp-")
        job = os.path.join(self._tmp, "job.pkl")
        with open(job, "wb") as fh:
            # cloudpickle: a build function given as an object (a notebook's) goes by value.
            cloudpickle.dump({"spec": self.spec, "params": self.params,
                         "trial_number": self.trial_number, "seed": self.seed,
                         "ladder": self.ladder, "ckpt_path": self.ckpt_path}, fh)
        env = dict(os.environ, **values, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        for rank in range(1, self.spec.devices):
            out = subprocess.DEVNULL
            if self.spec.log_dir is not None:
                try:
                    out = open(os.path.join(self.spec.log_dir, f"{trial_name(self.trial_number)}"
                                            f".rank{rank}.log"), "ab")
                except OSError:
                    out = subprocess.DEVNULL
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "hpsearch.adapters.trial.ddp_rank", job, str(rank)],
                env=dict(env, LOCAL_RANK=str(rank)), cwd=os.getcwd(), stdout=out,
                stderr=subprocess.STDOUT))
            if out is not subprocess.DEVNULL:
                out.close()
        self._env = {k: os.environ.get(k) for k in self.ENV}
        os.environ.update(values, LOCAL_RANK="0")
        log.info("trial %d: DDP on %d processes, rendezvous 127.0.0.1:%d", self.trial_number,
                 self.spec.devices, port)
        return self

    def out_of_memory(self, wait_s: float = 30.0) -> bool:
        """Whether a rank ended because it ran out of GPU memory.

        Waits up to ``wait_s`` in all for the ranks to exit: a rank that ran out of
        memory closes its connections (rank 0's error) before its process has printed
        its traceback and torn torch down, which takes seconds on a loaded machine.
        """
        deadline = time.monotonic() + wait_s
        for proc in self.procs:
            try:
                if proc.wait(timeout=max(0.1, deadline - time.monotonic())) == EXIT_RANK_OOM:
                    return True
            except Exception:  # still running
                continue
        return False

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.spec.devices <= 1:
            return
        import shutil

        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for proc in self.procs:
            try:
                # Ranks end with rank 0's fit; a failure elsewhere leaves them waiting.
                proc.wait(timeout=30 if exc_type is None else 1)
            except Exception:
                proc.kill()
                proc.wait()
        if exc_type is None:
            failed = [(i + 1, p.returncode) for i, p in enumerate(self.procs) if p.returncode]
            if failed:
                raise RuntimeError(f"trial {self.trial_number}: DDP rank(s) failed: "
                                   + ", ".join(f"rank {r} exit {c}" for r, c in failed))
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass
class _OomContext:
    """What the ladder needs to know about the fit that ran out of memory."""

    batch_size: int | None
    supports_checkpointing: bool
    batch_unknown: str | None = None
