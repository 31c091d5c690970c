"""Trainables for integration tests: the real digits model with faults built in.

Trials import these from the Ray worker processes, so they take their switches from
the sampled params (a space with one-choice categoricals), never from globals.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hpsearch.examples import digits


class CrashingMLP(digits.DigitsMLP):
    """Kills its own process at the start of epoch ``crash_epoch`` (0-based) once.

    The marker file makes the crash happen once per trial, so the restarted process
    trains on from the checkpoint; os._exit is a process death, not an exception.
    """

    def __init__(self, crash_dir: str, crash_epoch: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.crash_dir = crash_dir
        self.crash_epoch = crash_epoch

    def on_train_epoch_start(self) -> None:
        marker = Path(self.crash_dir) / f"crashed-{os.environ.get('HPS_TEST_TAG', 'x')}"
        if self.current_epoch == self.crash_epoch and not marker.exists():
            marker.write_text(str(self.current_epoch))
            os._exit(1)


class RaisingMLP(digits.DigitsMLP):
    """Raises in training once epoch ``raise_epoch`` (0-based) starts."""

    def __init__(self, raise_epoch: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.raise_epoch = raise_epoch

    def on_train_epoch_start(self) -> None:
        if self.current_epoch == self.raise_epoch:
            raise RuntimeError(f"boom at epoch {self.current_epoch}")


_MODEL_KEYS = ("lr", "hidden", "dropout", "optimizer", "layers")


def _model_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in _MODEL_KEYS if k in params}


def crash_once(params: dict[str, Any]):
    """The digits MLP, whose process dies once at ``params['crash_epoch']`` if >= 0."""
    kwargs = _model_kwargs(params)
    if params.get("crash_epoch", -1) >= 0:
        model = CrashingMLP(params["crash_dir"], params["crash_epoch"], **kwargs)
    else:
        model = digits.DigitsMLP(**kwargs)
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))


def raise_if(params: dict[str, Any]):
    """The digits MLP; trials with ``params['fail'] == True`` raise at epoch 1."""
    kwargs = _model_kwargs(params)
    model = RaisingMLP(1, **kwargs) if params.get("fail") else digits.DigitsMLP(**kwargs)
    return model, digits.DigitsData()


def wrong_return(params: dict[str, Any]):
    """Breaks the contract: returns only the model."""
    return digits.DigitsMLP(**_model_kwargs(params))


class CorruptingMLP(CrashingMLP):
    """Like CrashingMLP, but first damages its newest checkpoint (a half-written file,
    a flipped byte on disk), so the restarted trial must fall back to the one before."""

    def __init__(self, store_dir: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.store_dir = store_dir

    def on_train_epoch_start(self) -> None:
        marker = Path(self.crash_dir) / "crashed-corrupt"
        if self.current_epoch == self.crash_epoch and not marker.exists():
            newest = sorted(Path(self.store_dir).glob("epoch-*"))[-1] / "trial.ckpt"
            data = bytearray(newest.read_bytes())
            data[len(data) // 2] ^= 0xFF
            newest.write_bytes(bytes(data))
            marker.write_text(newest.parent.name)
            os._exit(1)


def corrupt_then_crash(params: dict[str, Any]):
    """The digits MLP that corrupts its newest checkpoint and dies at ``crash_epoch``."""
    kwargs = _model_kwargs(params)
    if params.get("crash_epoch", -1) >= 0:
        model = CorruptingMLP(params["store_dir"], crash_dir=params["crash_dir"],
                              crash_epoch=params["crash_epoch"], **kwargs)
    else:
        model = digits.DigitsMLP(**kwargs)
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))


class OomAboveMLP(digits.DigitsMLP):
    """Raises torch.OutOfMemoryError (as CUDA would) for batches larger than ``limit``
    (on DDP rank ``rank`` only, when it is >= 0)."""

    def __init__(self, limit: int, rank: int = -1, **kwargs: Any):
        super().__init__(**kwargs)
        self.limit = limit
        self.oom_rank = rank

    def training_step(self, batch, batch_idx):
        import torch

        if batch[0].shape[0] > self.limit and self.oom_rank in (-1, self.global_rank):
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate a batch of {batch[0].shape[0]} "
                f"(test limit {self.limit})")
        return super().training_step(batch, batch_idx)


def oom_above(params: dict[str, Any]):
    """The digits MLP that runs out of 'GPU memory' above ``params['limit']`` samples."""
    model = OomAboveMLP(int(params["limit"]), int(params.get("oom_rank", -1)),
                        **_model_kwargs(params))
    return model, digits.DigitsData(batch_size=int(params["batch_size"]))
