"""The Lightning callbacks of a trial: module-level classes that take everything they use
in ``__init__`` and keep what a resumed process needs in ``state_dict`` (as Lightning's
own ``Timer`` does), so a checkpoint carries it and ``fit(ckpt_path=...)`` restores it.

* :class:`RngState`: every RNG the training draws from (Python, NumPy, torch, CUDA).
* :class:`EpochReporter`: at each epoch's end, checkpoints when due, reports the epoch
  to Ray Tune, stops on a preemption notice; its state is the objective of every epoch
  so far (a driver that died before recording some epochs gets them back).
* :class:`Follower`: a DDP rank other than 0 takes rank 0's save/stop decisions.

The classes are written against Lightning's hooks but inherit from no Lightning
package: :func:`make` mixes one into the ``Callback`` class of the package the
trainable's module uses (``pytorch_lightning`` or ``lightning.pytorch``), which Lightning
requires and which is only known at run time.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Callable

from hpsearch import keys
from hpsearch.errors import TrialSetupError
from hpsearch.money.runtime import epoch_estimate
from hpsearch.recovery.checkpoint import CheckpointStore, young_daly_epochs
from hpsearch.recovery.checkpoint_layout import Entry
from hpsearch.recovery import checkpoint_usage
from hpsearch.recovery.preemption import Notice
from hpsearch.report import gpuuse

log = logging.getLogger("hpsearch.trial")

#: File name of the Lightning checkpoint inside each stored checkpoint.
CHECKPOINT_FILE = "trial.ckpt"


@functools.lru_cache(maxsize=None)
def _mixed(logic: type, callback_base: type) -> type:
    return type(logic.__name__, (logic, callback_base), {"__module__": logic.__module__,
                                                         "__qualname__": logic.__qualname__})


def make(api: Any, logic: type, *args: Any, **kwargs: Any) -> Any:
    """An instance of ``logic`` that is also a ``Callback`` of Lightning package ``api``."""
    return _mixed(logic, api.Callback)(*args, **kwargs)


class RngState:
    """Saves and restores every RNG the training draws from, for exact resume.

    Its state is plain data (tuples, numbers, strings and tensors), so a checkpoint
    holding it loads with ``torch.load(weights_only=True)``.
    """

    def state_dict(self) -> dict[str, Any]:
        import numpy as np
        import torch

        np_state = np.random.get_state()
        state = {
            "python": random.getstate(),
            "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)),
                      int(np_state[2]), int(np_state[3]), float(np_state[4])),
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import numpy as np
        import torch

        random.setstate(state["python"])
        name, words, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, words.numpy().astype(np.uint32), pos, has_gauss, gauss))
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


class Follower:
    """The callback of a DDP rank > 0: the other side of rank 0's :class:`EpochReporter`.

    At each epoch's end it takes rank 0's broadcast decision; it writes nothing itself
    but enters the save's barrier (Lightning's save synchronises every rank; only the
    global rank 0 writes the file).

    Args:
        folder: Where its save points: the trial's DDP job folder, which goes with the
            ranks (or with the sweep of a killed trial's), so nothing is left behind.
    """

    def __init__(self, folder: str) -> None:
        self.scratch = folder

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        save, stop = trainer.strategy.broadcast((False, False), src=0)
        if save:
            trainer.save_checkpoint(os.path.join(self.scratch, "unused.ckpt"),
                                    weights_only=False)
        if stop:
            trainer.should_stop = True


class EpochReporter:
    """At each epoch's end: checkpoint when due, report to Tune, stop on a notice.

    Args:
        spec: What every trial of the run shares (``runner.TrialSpec``).
        number: The trial's study number.
        notice: Set by SIGTERM or an interruption notice.
        store: The trial's checkpoint store, or None (no checkpoints).
        where: ``{"node": Ray node id, "gpu_ids": [...], "attempt": token}``.
        report: Sends one result to Ray Tune (``ray.tune.report``).
        sampler: Samples the trial's GPUs through NVML, or None (CPU).
    """

    def __init__(self, spec: Any, number: int, notice: Notice, store: CheckpointStore | None,
                 where: dict[str, Any], report: Callable[[dict], None], sampler: Any = None):
        self.spec, self.number, self.notice, self.store = spec, number, notice, store
        self.where, self._report, self.sampler = where, report, sampler
        self.epoch_started = self.process_started = time.monotonic()
        self.start_epoch = self.last_checkpoint = 0
        self.epoch_times: list[float] = []
        self.every = spec.config.checkpoint.every_epochs
        #: Young/Daly: the interval follows the measured time per checkpoint.
        self.adaptive = self.every is None
        self.between_epochs: tuple | None = None
        #: The objective of every epoch so far (the resume state, see state_dict).
        self.history: dict[int, float] = {}
        self.history_sent = False
        self.oom_steps: list[str] = []
        #: Checkpoints set aside before this process resumed: said in the next result.
        self.rejected: list[list[str]] = []
        self.data_checked = False

    # -- resume state -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"history": [[e, v] for e, v in sorted(self.history.items())]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = {int(e): float(v) for e, v in state.get("history", [])}

    # -- hooks ------------------------------------------------------------------------

    def on_train_start(self, trainer, pl_module) -> None:
        # After a restore, current_epoch is the first epoch this process trains.
        self.start_epoch = self.last_checkpoint = trainer.current_epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.epoch_started = time.monotonic()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        epoch = trainer.current_epoch + 1
        result = self._result(trainer, epoch)
        value = result[self.spec.config.objective.metric]
        self.history[epoch] = value
        self._attach_history(result)
        self.epoch_times.append(result[keys.EPOCH_TIME_S])
        remaining = max(0, self.spec.config.max_epochs - epoch) * (
            epoch_estimate(self.epoch_times) or 0.0)
        result[keys.REMAINING_S] = remaining
        due = self._due(epoch)
        if trainer.world_size > 1:
            # Every rank saves (Lightning's save has a barrier) and stops together:
            # rank 0 decides (see Follower).
            trainer.strategy.broadcast((bool(due and self.store is not None),
                                        self.notice.is_set()), src=0)
        if self.store is not None and due:
            self._checkpoint(trainer, epoch, value)
        result[keys.CHECKPOINT_EPOCH] = self.last_checkpoint
        result.update(self.checkpoint_figures())
        self._send(trainer, epoch, value, result)

    # -- parts ------------------------------------------------------------------------

    def _logged(self, trainer) -> dict[str, float]:
        """Every scalar the module logged, the objective checked to be among them."""
        import torch

        metrics = {}
        for name, value in trainer.callback_metrics.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                metrics[name] = float(value)
            elif isinstance(value, (int, float)):
                metrics[name] = float(value)
        metric = self.spec.config.objective.metric
        if metric not in metrics:
            logged = ", ".join(sorted(metrics)) or "nothing"
            raise TrialSetupError(
                f"trial {self.number}: objective.metric '{metric}' is never logged by "
                f"{self.spec.config.trainable} (it logs: {logged}); log it with "
                f"self.log('{metric}', ...) in validation_step")
        return metrics

    def _result(self, trainer, epoch: int) -> dict[str, Any]:
        """The epoch's result: what was logged and the reserved ``hps_`` keys."""
        result: dict[str, Any] = self._logged(trainer)
        now = time.monotonic()
        result.update({keys.EPOCH: epoch, keys.EPOCH_TIME_S: now - self.epoch_started,
                       keys.TRIAL_TIME_S: now - self.process_started,
                       keys.START_EPOCH: self.start_epoch, keys.NODE_ID: self.where["node"],
                       keys.ATTEMPT: self.where["attempt"]})
        if self.where["gpu_ids"]:
            result[keys.GPU_IDS] = ",".join(self.where["gpu_ids"])
        result.update(self.gpu_figures())
        if self.oom_steps:
            result[keys.OOM_STEPS] = list(self.oom_steps)
        if self.rejected:
            result[keys.CHECKPOINTS_REJECTED], self.rejected = self.rejected, []
        return result

    def _attach_history(self, result: dict[str, Any]) -> None:
        """A resumed process's first result carries the epochs its checkpoint holds."""
        if not self.history_sent and self.start_epoch > 0:
            result[keys.HISTORY] = [[e, v] for e, v in sorted(self.history.items())
                                    if e <= self.start_epoch]
        self.history_sent = True

    def _due(self, epoch: int) -> bool:
        return (self.every is None or epoch - self.last_checkpoint >= self.every
                or epoch >= self.spec.config.max_epochs or self.notice.is_set())

    def _send(self, trainer, epoch: int, value: float, result: dict[str, Any]) -> None:
        """Report the epoch; after a notice, stop (and, when the main thread is
        exiting on SIGTERM, only leave a note: nothing can be reported any more)."""
        notice = self.notice
        if notice.is_set():
            result[keys.PREEMPTED] = notice.reason
            trainer.should_stop = True
            if notice.via_signal:
                if self.store is not None:
                    self.store.mark_preempted(self._trial_id(), epoch, notice.reason)
                notice.handled.set()
                return
        self.between_epochs = (trainer, epoch, value)
        try:
            self._report(result)
        finally:
            self.between_epochs = None
        if notice.is_set():
            notice.handled.set()

    def _trial_id(self) -> str:
        from ray import tune

        return tune.get_context().get_trial_id()

    def _write(self, trainer, folder: Path) -> None:
        from hpsearch.adapters.trial import lightning_api

        path = folder / CHECKPOINT_FILE
        trainer.save_checkpoint(str(path), weights_only=False)
        if self.data_checked:
            return
        # Checked once per process: what it holds does not change between epochs,
        # and a checkpoint that will not load as data is lost work on every resume.
        unsafe = lightning_api.unsafe_globals(path)
        if unsafe:
            raise TrialSetupError(
                f"trial {self.number}: its checkpoint is not plain data: it references "
                f"{', '.join(unsafe)} (usually a hyperparameter saved by "
                f"save_hyperparameters() or a datamodule's state_dict). hpsearch loads "
                f"checkpoints with torch.load(weights_only=True), which refuses code: "
                f"pass numbers, strings, lists or dicts, or leave it out with "
                f"save_hyperparameters(ignore=[...])")
        self.data_checked = True

    def _checkpoint(self, trainer, epoch: int, value: float) -> None:
        self.store.save(epoch, lambda folder: self._write(trainer, folder), metric=value,
                        meta={"trial": self.number})
        self.last_checkpoint = epoch
        if self.adaptive:
            # Young/Daly from what a checkpoint takes on this storage (the median of
            # this process's, uploads included) and the expected time between
            # preemptions.
            self.every = young_daly_epochs(self.store.checkpoint_s() or 0.0,
                                           self.spec.mtbp_s,
                                           epoch_estimate(self.epoch_times) or 1.0,
                                           self.spec.config.max_epochs)

    def checkpoint_figures(self) -> dict[str, float]:
        """What this process's checkpoints cost so far (the ``hps_ckpt_*`` keys)."""
        if self.store is None:
            return {}
        figures = checkpoint_usage.to_result(self.store.usage())
        if self.every is not None:
            figures[keys.CKPT_EVERY] = self.every
        return figures

    # -- outside the hooks ------------------------------------------------------------

    def gpu_figures(self) -> dict[str, float]:
        """This process's GPU utilisation and memory so far (none on CPU)."""
        if self.sampler is None:
            return {}
        import torch

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

    def report_restored(self, entry: Entry) -> None:
        """Report the epoch a checkpoint holds (a restart with nothing left to do)."""
        self.history_sent = True
        result = {
            self.spec.config.objective.metric: entry.metric, keys.EPOCH: entry.epoch,
            keys.EPOCH_TIME_S: 0.0,
            keys.TRIAL_TIME_S: time.monotonic() - self.process_started,
            keys.START_EPOCH: entry.epoch, keys.CHECKPOINT_EPOCH: entry.epoch,
            keys.NODE_ID: self.where["node"], keys.ATTEMPT: self.where["attempt"],
            keys.REMAINING_S: 0.0,
            keys.HISTORY: [[e, v] for e, v in sorted(self.history.items())],
        }
        if self.rejected:
            result[keys.CHECKPOINTS_REJECTED], self.rejected = self.rejected, []
        result.update(self.checkpoint_figures())
        self._report(result)

    def on_signal(self) -> bool:
        """SIGTERM arrived. Between two epochs (blocked reporting the last one, the usual
        case): checkpoint it now if it is not yet and say so; else False."""
        state = self.between_epochs
        if state is None:
            return False
        trainer, epoch, value = state
        if trainer.world_size > 1 and self.last_checkpoint < epoch:
            return False  # a save needs every rank: the next epoch's end saves it
        if self.store is not None:
            if self.last_checkpoint < epoch:
                self._checkpoint(trainer, epoch, value)
            self.store.mark_preempted(self._trial_id(), epoch, self.notice.reason)
        self.notice.handled.set()
        return True
