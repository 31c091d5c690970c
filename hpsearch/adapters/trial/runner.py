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
(see :class:`hpsearch.adapters.trial.ddp.Ranks`). The Lightning callbacks are in
:mod:`hpsearch.adapters.trial.callbacks`.

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
import uuid
from dataclasses import dataclass
from typing import Any

from hpsearch import keys
from hpsearch.adapters.trial import callbacks
from hpsearch.adapters.trial.callbacks import CHECKPOINT_FILE
from hpsearch.adapters.trial.ddp import Ranks
from hpsearch.errors import HpsearchError, TrialSetupError
from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint import CheckpointStore
from hpsearch.recovery.checkpoint_layout import Entry
from hpsearch.recovery.oom import OomLadder
from hpsearch.recovery.preemption import Notice, NoticePoller, watch_sigterm


class TrialOutOfMemory(HpsearchError):
    """A trial ran out of GPU memory on every rung of the OOM ladder."""


__all__ = ["CHECKPOINT_FILE", "TrialSpec", "train", "trial_name"]

log = logging.getLogger("hpsearch.trial")


@dataclass(frozen=True)
class TrialSpec:
    """What every trial process of a run is sent (once, by Ray's object store).

    The run's whole config, plus what the driver worked out for this run: a new config
    key is read from ``config`` where it is used, nothing is copied field by field.

    Attributes:
        config: The run's validated config.
        log_dir: Folder for ``trial-<number>.log`` (the trial's log records); None or
            unreachable from the trial's node: no file.
        checkpoint_url: Where the ``trial-NNNN/`` checkpoint stores are: a path every
            node shares or a storage URL (``s3://bucket/prefix/<run>``, see
            :mod:`hpsearch.recovery.storage`); None keeps no checkpoints.
        storage_probe: The driver's probe token
            (:class:`~hpsearch.recovery.storage.ProbeToken`): a trial whose node cannot
            read it refuses to train there
            (:class:`~hpsearch.recovery.storage.StorageUnreachable`); None = no check.
        mtbp_s: Mean seconds between preemptions expected; None = none expected.
        trainable_fn: The build function itself when the run was given a function
            object (sent to the trial processes by value, as Ray sends its own
            trainables); None = import ``config.trainable``.
        gpu_sample_s: Seconds between two NVML samples of a GPU trial's utilisation
            and memory (see :class:`hpsearch.adapters.nvml.GpuSampler`).
        ddp_timeout_s: How long a rank waits for the others in a collective before it
            fails (a rank that died on a GPU is noticed after this).
    """

    config: Any
    log_dir: str | None = None
    checkpoint_url: str | None = None
    storage_probe: Any = None
    mtbp_s: float | None = None
    trainable_fn: Any = None
    gpu_sample_s: float = 1.0
    ddp_timeout_s: float = 600.0

    @property
    def devices(self) -> int:
        """Training processes (DDP ranks) of each trial; 1 = no DDP."""
        return self.config.resources.processes


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """Split a Tune trial config into (sampled params, Optuna trial number, seed)."""
    params = {k: v for k, v in config.items() if not k.startswith(keys.RESERVED_PREFIX)}
    return params, int(config.get(keys.TRIAL_NUMBER, -1)), int(config.get(keys.TRIAL_SEED, 0))


def _callbacks(spec: TrialSpec, trial_number: int, notice: Notice, api):
    """The Lightning callbacks (of the trainable's Lightning package ``api``) and the
    trial's checkpoint store."""
    import ray
    import torch
    from ray import tune

    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    node = ray.get_runtime_context().get_node_id()
    store = None
    if spec.checkpoint_url is not None:
        _check_storage(spec, node)
        store = CheckpointStore(storage.join_url(spec.checkpoint_url, trial_name(trial_number)),
                                keep_last=spec.config.checkpoint.keep_last,
                                mode=spec.config.objective.mode)
    sampler = None
    if gpu_ids and torch.cuda.is_available():
        from hpsearch.adapters.nvml import GpuSampler

        # The GPUs Ray gave this process (CUDA_VISIBLE_DEVICES), read through NVML.
        sampler = GpuSampler(interval_s=spec.gpu_sample_s).start()
        if sampler.message:
            log.info("trial %d: GPU use not sampled: %s", trial_number, sampler.message)
    where = {"node": node, "gpu_ids": gpu_ids, "attempt": uuid.uuid4().hex[:12]}
    report = callbacks.make(api, callbacks.EpochReporter, spec, trial_number, notice, store,
                            where, tune.report, sampler)
    return [callbacks.make(api, callbacks.RngState), report], store, report


def _check_storage(spec: TrialSpec, node: str) -> None:
    """Refuse to train on a node that cannot reach the checkpoint storage: its
    checkpoints would be lost with it (the driver places the trial elsewhere)."""
    probe = spec.storage_probe
    if probe is None:
        return
    reason = storage.check_token(probe.url, probe.name, probe.token)
    if reason is not None:
        raise storage.StorageUnreachable(node, storage.shown(spec.checkpoint_url), reason)


def build_function(spec: TrialSpec):
    """The trainable's build function: the function object the run was given, else the
    one ``spec.config.trainable`` imports."""
    if spec.trainable_fn is not None:
        return spec.trainable_fn
    from hpsearch.spec.trainable import resolve

    return resolve(spec.config.trainable)


def _build(spec: TrialSpec, params: dict[str, Any], trial_number: int):
    """Call the trainable and understand what it returned (a
    :class:`~hpsearch.adapters.trial.lightning_api.Built`)."""
    from hpsearch.adapters.trial import lightning_api

    built = build_function(spec)(dict(params))
    try:
        return lightning_api.interpret(built)
    except lightning_api.ShapeError as exc:
        raise TrialSetupError(f"trial {trial_number}: {spec.config.trainable} {exc}") from None


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


#: Ray's variable for how long a trial process Tune reuses waits for the previous
#: trial's thread to end before it takes the next trial (Ray's default: 2 s).
THREAD_END_VAR = "TUNE_FUNCTION_THREAD_TIMEOUT_S"

#: Our value for it, in seconds. A stopped trial's thread unwinds through its last
#: checkpoint write and Lightning's teardown (a DDP trial also through the end of its
#: ranks): well under a second on an idle machine, seconds on a loaded one or a slow
#: disk. Past the wait Ray drops the next attempt without telling anyone (the driver
#: then requeues it: :meth:`hpsearch.adapters.ray.tune.CoreCallback._untold_errors`) and
#: replaces the process. The wait ends as soon as the thread does, so a long one costs
#: only a thread that never ends; a value set in the environment is kept.
THREAD_END_S = 60


def train(config: dict[str, Any], spec: TrialSpec) -> None:
    """Train one trial; the Ray Tune function trainable (use with ``tune.with_parameters``).

    Args:
        config: The trial config: sampled params plus ``hps_trial_number``/``hps_seed``.
        spec: What every trial of the run shares.
    """
    # Read by Tune in this process when it hands it the next trial (reset_config).
    os.environ.setdefault(THREAD_END_VAR, str(THREAD_END_S))
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

    gpu = spec.config.resources.gpu > 0 and torch.cuda.is_available()
    if spec.config.resources.gpu > 0 and not gpu:
        log.warning("resources.gpu is %s but torch sees no CUDA device: training on CPU",
                    spec.config.resources.gpu)
    precision = None
    if ladder.precision == "mixed":
        precision = "16-mixed" if gpu else "bf16-mixed"
    strategy: Any = "auto"
    if spec.devices > 1:
        from datetime import timedelta

        strategy = api.ddp_strategy(process_group_backend="nccl" if gpu else "gloo",
                                    timeout=timedelta(seconds=spec.ddp_timeout_s))
    return api.Trainer(
        max_epochs=spec.config.max_epochs,
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
                    f"trial {self.trial_number}: {self.spec.config.trainable} returned a "
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
        if self.store is not None:
            self.store.close()  # its downloads


def _train(params: dict[str, Any], trial_number: int, seed: int, spec: TrialSpec) -> None:
    import torch

    torch.set_num_threads(rank_threads(spec))
    notice = Notice()
    session = _Session(spec, trial_number, notice)
    ladder = OomLadder(spec.config.oom.ladder, spec.config.oom.min_batch_size, spec.config.oom.batch_size_param)
    unwatch = watch_sigterm(notice, spec.config.preemption.grace_s, session.on_signal)
    poller = None
    if spec.config.preemption.notice_url:
        poller = NoticePoller(spec.config.preemption.notice_url, spec.config.preemption.notice_poll_s, notice, spec.config.preemption.grace_s)
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
                        trial_number, bad.name, bad.reason, bad.aside or "-")
        report.rejected += [[bad.name, bad.reason] for bad in store.rejected]
        store.rejected.clear()
    ckpt = None if resume is None else str(resume.path / CHECKPOINT_FILE)
    ranks = Ranks(spec, params, trial_number, seed, ladder, ckpt)
    module = built.module
    try:
        with ranks:
            trainer = make_trainer(spec, session.callbacks, ladder, built.api)
            if resume is None:
                trainer.fit(module, **built.fit_kwargs())
            else:
                log.info("trial %d: resuming from %s in %s (local copy %s)", trial_number,
                         resume.name, storage.shown(store.url), resume.path)
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
    return max(1, int(spec.config.resources.cpu / max(1, spec.devices)))


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
    param = spec.config.oom.batch_size_param
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


@dataclass
class _OomContext:
    """What the ladder needs to know about the fit that ran out of memory."""

    batch_size: int | None
    supports_checkpointing: bool
    batch_unknown: str | None = None
