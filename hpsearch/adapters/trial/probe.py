"""The CPU probe behind ``hpsearch plan``: build the trainable, train a few batches, measure.

What it measures, on this machine's CPU, at one configuration of the space:

* parameters (all, and those that require gradients) and their bytes;
* **activations**: while the first training batch runs, a
  ``torch.autograd.graph.saved_tensors_hooks`` pair records every tensor autograd saves
  for the backward pass; the distinct storages among them, parameters excluded, are
  summed (bytes). That is the memory the forward pass leaves for backward, the part of a
  step's peak that grows with the batch. Under ``fp16``/``bf16`` the step runs in CPU
  bf16 autocast (Lightning's ``bf16-mixed``), which saves 16-bit activations as CUDA's
  fp16/bf16 autocast does. The largest of those tensors is reported too (a layer's
  output is computed while its input is held: the step's peak holds it twice);
* the **optimizer state** after its first step (bytes of every tensor in its state);
* **seconds per batch**: after one warm-up batch, the mean over the next K training
  batches (data loading included) and over up to K validation batches, in the real
  Lightning loop, with ``resources.cpu`` torch threads (as a trial runs);
* this CPU's **matmul rate** (GFLOP/s) with the same threads and dtype, to scale CPU
  times to GPUs (:func:`hpsearch.tools.plan_speed.gpu_epoch_s`);
* the seconds from building the model to the first batch (build, data setup).

Nothing is written: the Trainer has no logger or checkpoints and a temporary root dir.
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from typing import Any, Mapping

from dataclasses import dataclass

from hpsearch.errors import ConfigError

#: Lightning's precision of the CPU probe for each precision ``plan`` is asked about.
PROBE_PRECISION = {"fp32": "32-true", "fp16": "bf16-mixed", "bf16": "bf16-mixed"}


@dataclass(frozen=True)
class ProbeFigures:
    """What the CPU probe measured (see :mod:`hpsearch.adapters.trial.probe`).

    Attributes:
        params: The configuration probed.
        n_params, n_trainable: Parameter counts.
        weight_bytes: Mean bytes per parameter (4 for fp32).
        optimizer: The optimizer's class name.
        optimizer_bytes: Bytes of optimizer state after one step.
        activations_bytes: Distinct bytes autograd saved for backward in one step.
        batch_size: Samples in the first training batch.
        train_batches, val_batches: Batches per epoch (None if unknown).
        train_samples: Training samples per epoch (None if unknown).
        train_step_s, val_step_s: Measured seconds per batch on this CPU.
        setup_s: Seconds to build the model and set up its data.
        threads: torch threads the probe used (``resources.cpu``).
        cpu_gflops: This CPU's measured matmul rate at the probe's dtype.
        precision: The precision probed (``fp32``, ``fp16``, ``bf16``).
        measured_batches: Training batches timed (after one warm-up batch).
        largest_activation_bytes: The largest distinct tensor autograd saved.
    """

    params: Mapping[str, Any]
    n_params: int
    n_trainable: int
    weight_bytes: float
    optimizer: str
    optimizer_bytes: float
    activations_bytes: float
    batch_size: int | None
    train_batches: int | None
    val_batches: int | None
    train_samples: int | None
    train_step_s: float | None
    val_step_s: float | None
    setup_s: float
    threads: int
    cpu_gflops: float
    precision: str
    measured_batches: int
    largest_activation_bytes: float = 0.0

    @property
    def cpu_epoch_s(self) -> float | None:
        """Seconds per epoch on this CPU, or None without a timed training batch."""
        if self.train_step_s is None or not self.train_batches:
            return None
        val = (self.val_step_s or 0.0) * (self.val_batches or 0)
        return self.train_step_s * self.train_batches + val

    @property
    def val_ratio(self) -> float:
        """Validation time per epoch over training time per epoch, as measured."""
        if not self.train_step_s or not self.train_batches or not self.val_step_s:
            return 0.0
        return (self.val_step_s * (self.val_batches or 0)) / (
            self.train_step_s * self.train_batches)

_QUIET_LOGGERS = ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric",
                  "lightning.fabric")


def cpu_gflops(dtype: str = "fp32", threads: int | None = None, seconds: float = 0.2,
               n: int = 512) -> float:
    """This CPU's matmul rate in GFLOP/s (an ``n x n`` product, repeated for ``seconds``)."""
    import torch

    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        kind = torch.bfloat16 if dtype in ("fp16", "bf16") else torch.float32
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(kind)
        b = torch.randn(n, n, generator=gen).to(kind)
        torch.mm(a, b)  # warm-up: thread pool, kernels
        done = 0
        start = time.perf_counter()
        while True:
            torch.mm(a, b)
            done += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and done >= 3:
                break
        return 2.0 * n ** 3 * done / elapsed / 1e9
    finally:
        torch.set_num_threads(previous)


def _batch_size(batch: Any) -> int | None:
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = _batch_size(item)
            if size is not None:
                return size
    return None


def _length(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except Exception:  # iterable datasets, loaders without a length
        return None


class _SavedTensors:
    """Sums the distinct storages autograd saves for backward (parameters excluded)."""

    def __init__(self, module: Any):
        self.exclude = set()
        for p in module.parameters():
            try:
                self.exclude.add(p.untyped_storage().data_ptr())
            except Exception:
                pass
        self.storages: dict[int, int] = {}
        self._hooks = None

    def _pack(self, tensor: Any) -> Any:
        try:
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr and ptr not in self.exclude:
                self.storages[ptr] = max(self.storages.get(ptr, 0), int(storage.nbytes()))
        except Exception:  # tensors without a storage (sparse, nested, subclasses)
            pass
        return tensor

    def __enter__(self) -> "_SavedTensors":
        import torch

        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(*exc)
            self._hooks = None

    @property
    def total_bytes(self) -> int:
        return sum(self.storages.values())

    @property
    def largest_bytes(self) -> int:
        return max(self.storages.values(), default=0)


class ProbeCallback:
    """The probe's Lightning hooks (mixed into the trainable's package's ``Callback`` by
    :func:`hpsearch.adapters.trial.callbacks.make`): times each batch, measures what
    autograd saves in the first step and the optimizer's state after it.

    Args:
        built: What ``build`` returned, understood (its data shape, for the loaders).
    """

    def __init__(self, built: Any) -> None:
        self.built = built
        self.saved: _SavedTensors | None = None
        self.activations_bytes = 0
        self.largest_activation_bytes = 0
        self.batch_size: int | None = None
        self.train_start: dict[int, float] = {}
        self.train_end: dict[int, float] = {}
        self.val_start: dict[int, float] = {}
        self.val_end: dict[int, float] = {}
        self.started_at: float | None = None
        self.train_batches: int | None = None
        self.val_batches: int | None = None
        self.train_samples: int | None = None
        self.optimizer = "none"
        self.optimizer_bytes = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.started_at = time.perf_counter()
        # The loaders the fit uses, whichever shape build() handed them over in.
        loader = trainer.train_dataloader
        self.train_batches = _length(loader)
        self.train_samples = _length(getattr(loader, "dataset", None))
        try:
            val = _val_loader(self.built)
        except Exception:  # no validation data
            val = None
        self.val_batches = _length(val) if val is not None else 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.batch_size = _batch_size(batch)
            self.saved = _SavedTensors(pl_module).__enter__()
        self.train_start[batch_idx] = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.train_end[batch_idx] = time.perf_counter()
        if batch_idx == 0 and self.saved is not None:
            self.unhook()

    def unhook(self) -> None:
        """Stop recording what autograd saves (after the first step, or if it raised)."""
        if self.saved is None:
            return
        self.saved.__exit__(None, None, None)
        self.activations_bytes = self.saved.total_bytes
        self.largest_activation_bytes = self.saved.largest_bytes
        self.saved = None

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx,
                                  dataloader_idx=0) -> None:
        self.val_start[batch_idx] = time.perf_counter()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx=0) -> None:
        self.val_end[batch_idx] = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        optimizers = trainer.optimizers
        if optimizers:
            self.optimizer = " + ".join(type(o).__name__ for o in optimizers)
            self.optimizer_bytes = sum(
                int(value.nbytes) for opt in optimizers for state in opt.state.values()
                for value in state.values()
                if hasattr(value, "nbytes") and hasattr(value, "untyped_storage"))

    def step_s(self, start: dict[int, float], end: dict[int, float],
               first: int) -> tuple[float | None, int]:
        """Mean seconds per batch from batch ``first`` on (start to start)."""
        indices = sorted(i for i in start if i >= first and i in end)
        if not indices:
            return None, 0
        return (end[indices[-1]] - start[indices[0]]) / len(indices), len(indices)


def _val_loader(built: Any) -> Any:
    """The validation loader of the fit, whichever shape ``build`` used."""
    from hpsearch.adapters.trial.lightning_api import DataShape

    if built.shape is DataShape.DATAMODULE:
        return built.datamodule.val_dataloader()
    if built.shape is DataShape.LOADERS:
        val = built.val
    elif built.api.overrides(built.module, "val_dataloader"):
        val = built.module.val_dataloader()
    else:
        return None
    if isinstance(val, (list, tuple)):
        val = val[0] if val else None
    return val


def probe(trainable: Any, params: Mapping[str, Any], *, precision: str = "fp32",
          probe_batches: int = 8, threads: int = 1, seed: int = 0) -> ProbeFigures:
    """Build ``trainable`` at ``params`` and train ``probe_batches + 1`` batches on CPU.

    The Trainer comes from the Lightning package of the module built
    (``pytorch_lightning`` or ``lightning.pytorch``); the data may come in any shape a
    trial accepts (see :func:`hpsearch.adapters.trial.lightning_api.interpret`).

    Args:
        trainable: ``package.module:function`` (the space's ``trainable``), or the
            build function itself.
        params: The configuration to build.
        precision: ``fp32``, ``fp16`` or ``bf16`` (16-bit ones run as CPU ``bf16-mixed``).
        probe_batches: Training batches timed after the first (also the most validation
            batches run).
        threads: torch threads (a trial uses ``resources.cpu``).
        seed: Seeds Lightning before the build.

    Raises:
        ConfigError: (field ``trainable``) the trainable cannot be imported, its build
            raises or returns something hpsearch cannot train, or a training step fails.
    """
    import torch

    from hpsearch.spec.trainable import display_name, resolve

    if callable(trainable):
        build, shown = trainable, display_name(trainable)
    else:
        build, shown = resolve(trainable), trainable
    previous_threads = torch.get_num_threads()
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(max(1, threads))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module, callback, setup_s = _fit_probe(build, shown, params, precision,
                                                   probe_batches, seed)
    finally:
        torch.set_num_threads(previous_threads)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    return _figures(module, callback, params, setup_s, precision, threads)


def _fit_probe(build: Any, shown: str, params: Mapping[str, Any], precision: str,
               probe_batches: int, seed: int) -> tuple[Any, ProbeCallback, float]:
    """Build and train the probe's batches: ``(module, callback, setup seconds)``."""
    from hpsearch.adapters.trial import callbacks, lightning_api

    lightning_api.seed_everything(seed)
    t0 = time.perf_counter()
    try:
        returned = build(dict(params))
    except Exception as exc:
        raise ConfigError("trainable", f"building it at the probed configuration "
                          f"raised {type(exc).__name__}: {exc}", shown) from None
    try:
        built = lightning_api.interpret(returned)
    except lightning_api.ShapeError as exc:
        raise ConfigError("trainable", str(exc), shown) from None
    callback = callbacks.make(built.api, ProbeCallback, built)
    with tempfile.TemporaryDirectory(prefix="hps-plan-") as tmp:
        trainer = built.api.Trainer(
            accelerator="cpu", devices=1, precision=PROBE_PRECISION[precision],
            max_epochs=1, limit_train_batches=probe_batches + 1,
            limit_val_batches=probe_batches, num_sanity_val_steps=0, logger=False,
            enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[callback], default_root_dir=tmp)
        try:
            trainer.fit(built.module, **built.fit_kwargs())
        except Exception as exc:
            raise ConfigError("trainable", "training at the probed configuration "
                              f"failed: {type(exc).__name__}: {exc}", shown) from None
        finally:
            callback.unhook()  # the first step raised: unhook autograd
    return built.module, callback, (callback.started_at or time.perf_counter()) - t0


def _figures(module: Any, callback: ProbeCallback, params: Mapping[str, Any],
             setup_s: float, precision: str, threads: int) -> ProbeFigures:
    """What the probe measured, as :class:`ProbeFigures`."""
    train_s, n_train = callback.step_s(callback.train_start, callback.train_end, 1)
    if train_s is None:  # a single batch: time it, hooks and warm-up included
        train_s, n_train = callback.step_s(callback.train_start, callback.train_end, 0)
    val_s, _ = callback.step_s(callback.val_start, callback.val_end, 0)
    parameters = list(module.parameters())
    n_params = sum(p.numel() for p in parameters)
    param_bytes = sum(p.numel() * p.element_size() for p in parameters)
    train_samples = callback.train_samples
    if train_samples is None and callback.train_batches and callback.batch_size:
        train_samples = callback.train_batches * callback.batch_size
    return ProbeFigures(
        params=dict(params), n_params=n_params,
        n_trainable=sum(p.numel() for p in parameters if p.requires_grad),
        weight_bytes=param_bytes / n_params if n_params else 4.0,
        optimizer=callback.optimizer, optimizer_bytes=float(callback.optimizer_bytes),
        activations_bytes=float(callback.activations_bytes),
        batch_size=callback.batch_size, train_batches=callback.train_batches,
        val_batches=callback.val_batches, train_samples=train_samples,
        train_step_s=train_s, val_step_s=val_s, setup_s=setup_s,
        threads=max(1, threads), cpu_gflops=cpu_gflops(precision, max(1, threads)),
        precision=precision, measured_batches=n_train,
        largest_activation_bytes=float(callback.largest_activation_bytes),
    )
