"""The trial runner: Lightning training inside a Ray Tune function trainable.

Each epoch the runner reports every logged metric plus ``hps_epoch`` and the epoch's
wall time through ``tune.report`` together with a checkpoint (weights, optimizer,
Lightning's loop state, the epoch and the RNG states of Python, NumPy and torch). A
restarted trial resumes from ``tune.get_checkpoint()`` and continues exactly where the
checkpoint left off: same batches, same dropout masks, same metrics.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from hpsearch import keys
from hpsearch.errors import TrialSetupError
from hpsearch.runtime import epoch_estimate

#: File name of the Lightning checkpoint inside each Tune checkpoint directory.
CHECKPOINT_FILE = "trial.ckpt"


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
    """

    trainable: str
    metric: str
    max_epochs: int
    cpu: float = 1.0
    gpu: float = 0.0
    log_dir: str | None = None
    price_per_hour: float = 0.0


def split_config(config: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """Split a Tune trial config into (sampled params, Optuna trial number, seed)."""
    params = {k: v for k, v in config.items() if not k.startswith(keys.RESERVED_PREFIX)}
    return params, int(config.get(keys.TRIAL_NUMBER, -1)), int(config.get(keys.TRIAL_SEED, 0))


def _callbacks(spec: TrialSpec, trial_number: int) -> list[Any]:
    """Build the Lightning callbacks (imported lazily: Lightning is heavy)."""
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
        """Reports metrics and a checkpoint to Tune at the end of every epoch."""

        def __init__(self) -> None:
            self.epoch_started = time.monotonic()
            self.process_started = time.monotonic()

            self.start_epoch = 0
            self.epoch_times: list[float] = []

        def on_train_start(self, trainer, pl_module) -> None:
            # After a restore, current_epoch is the first epoch this process trains.
            self.start_epoch = trainer.current_epoch

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self.epoch_started = time.monotonic()

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
            metrics[keys.EPOCH] = trainer.current_epoch + 1
            metrics[keys.EPOCH_TIME_S] = now - self.epoch_started
            metrics[keys.TRIAL_TIME_S] = now - self.process_started
            metrics[keys.START_EPOCH] = self.start_epoch
            self.epoch_times.append(metrics[keys.EPOCH_TIME_S])
            remaining = max(0, spec.max_epochs - metrics[keys.EPOCH]) * (
                epoch_estimate(self.epoch_times) or 0.0)
            metrics[keys.REMAINING_S] = remaining
            metrics[keys.COST_TO_FINISH] = remaining * spec.price_per_hour / 3600.0
            with tempfile.TemporaryDirectory(prefix="hps-ckpt-") as tmp:
                trainer.save_checkpoint(os.path.join(tmp, CHECKPOINT_FILE), weights_only=False)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))

    return [RngState(), TuneReport()]


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


def _train(params: dict[str, Any], trial_number: int, seed: int, spec: TrialSpec) -> None:
    import pytorch_lightning as pl
    import torch
    from ray import tune

    torch.set_num_threads(max(1, int(spec.cpu)))
    pl.seed_everything(seed, workers=True, verbose=False)
    module, data = _build(spec, params, trial_number)
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs,
        accelerator="gpu" if spec.gpu > 0 else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=1,
        callbacks=_callbacks(spec, trial_number),
        default_root_dir=os.getcwd(),
    )
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        trainer.fit(module, datamodule=data)
        return
    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, CHECKPOINT_FILE)
        trainer.fit(module, datamodule=data, ckpt_path=path, weights_only=False)
