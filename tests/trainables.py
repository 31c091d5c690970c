"""Trainables for integration tests: the real digits model with faults built in.

Trials import these from the Ray worker processes, so they take their switches from
the sampled params (a space with one-choice categoricals), never from globals.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hpsearch.examples import digits

from .payloads import Payload  # noqa: F401 - the fault tests take it from here too


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


class DivergingMLP(digits.DigitsMLP):
    """Also logs a metric that has diverged to infinity (a loss that blew up), as a
    too-high learning rate makes a real one do."""

    def on_validation_epoch_end(self) -> None:
        self.log("blown_up", float("inf"))


def diverging(params: dict[str, Any]):
    """The digits MLP, logging an infinite ``blown_up`` metric every epoch."""
    return DivergingMLP(**_model_kwargs(params)), digits.DigitsData()


class NaNFromMLP(digits.DigitsMLP):
    """Also logs ``val_acc_or_nan``: its val_acc up to ``nan_from`` epochs, then NaN,
    as a model whose weights turned NaN (a too-high learning rate) reports."""

    def __init__(self, nan_from: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.nan_from = nan_from

    def on_validation_epoch_end(self) -> None:
        done = self.current_epoch + 1  # epochs completed once this one's validation ends
        value = self.trainer.callback_metrics.get("val_acc")
        self.log("val_acc_or_nan", float("nan") if done > self.nan_from
                 else float(value if value is not None else 0.0))


def nan_from(params: dict[str, Any]):
    """The digits MLP whose objective ``val_acc_or_nan`` is NaN after
    ``params['nan_from']`` epochs."""
    return (NaNFromMLP(int(params.get("nan_from", 1)), **_model_kwargs(params)),
            digits.DigitsData())


def wrong_return(params: dict[str, Any]):
    """Breaks the contract: returns only the model."""
    return digits.DigitsMLP(**_model_kwargs(params))


def _rewrite_manifest(data: Path) -> None:
    """Re-hash a checkpoint's files (in folder ``data``) into its manifest, as a forger
    would: the checksums then match whatever the files hold."""
    import hashlib
    import json

    manifest_path = next(m for m in data.parent.glob("epoch-*.json")
                         if json.loads(m.read_text()).get("data") == data.name)
    manifest = json.loads(manifest_path.read_text())
    manifest["files"] = {name: {"sha256": hashlib.sha256((data / name).read_bytes()).hexdigest(),
                                "bytes": (data / name).stat().st_size}
                         for name in manifest["files"]}
    manifest_path.write_text(json.dumps(manifest))


def damage(ckpt: Path, how: str, marker: str) -> None:
    """Damage checkpoint file ``ckpt`` the way ``how`` says.

    ``flip``: a flipped byte (the checksum no longer matches). ``crafted``: a pickle that
    runs a shell command creating ``marker`` when unpickled, with the manifest re-hashed
    so the checksum passes. ``incomplete``: a torch file of plain data without the keys
    Lightning needs to resume (``KeyError: 'pytorch-lightning_version'``), checksum
    passing too.
    """
    import torch

    if how == "flip":
        data = bytearray(ckpt.read_bytes())
        data[len(data) // 2] ^= 0xFF
        ckpt.write_bytes(bytes(data))
        return
    if how == "crafted":
        torch.save({"state_dict": {}, "epoch": 3, "evil": Payload(marker)}, ckpt)
    elif how == "incomplete":
        torch.save({"state_dict": {}, "epoch": 3}, ckpt)
    else:
        raise ValueError(f"unknown damage {how!r}")
    _rewrite_manifest(ckpt.parent)


class CorruptingMLP(CrashingMLP):
    """Like CrashingMLP, but first damages its newest checkpoint (see :func:`damage`),
    so the restarted trial must fall back to the one before."""

    def __init__(self, store_dir: str, how: str = "flip", marker: str = "", **kwargs: Any):
        super().__init__(**kwargs)
        self.store_dir = store_dir
        self.how = how
        self.marker = marker

    def on_train_epoch_start(self) -> None:
        marker = Path(self.crash_dir) / "crashed-corrupt"
        if self.current_epoch == self.crash_epoch and not marker.exists():
            manifest = sorted(Path(self.store_dir).glob("epoch-*.json"))[-1]
            data = json.loads(manifest.read_text())["data"]
            damage(Path(self.store_dir) / data / "trial.ckpt", self.how, self.marker)
            marker.write_text(manifest.stem)
            os._exit(1)


def corrupt_then_crash(params: dict[str, Any]):
    """The digits MLP that damages its newest checkpoint (``params['how']``, default a
    flipped byte) and dies at ``crash_epoch``."""
    kwargs = _model_kwargs(params)
    if params.get("crash_epoch", -1) >= 0:
        model = CorruptingMLP(params["store_dir"], how=params.get("how", "flip"),
                              marker=params.get("marker", ""), crash_dir=params["crash_dir"],
                              crash_epoch=params["crash_epoch"], **kwargs)
    else:
        model = digits.DigitsMLP(**kwargs)
    return model, digits.DigitsData(batch_size=int(params.get("batch_size", 64)))


class EpochTwoMLP(digits.DigitsMLP):
    """Raises at the start of its second epoch, naming numbers that differ per trial."""

    def on_train_epoch_start(self) -> None:
        if self.current_epoch == 1:
            raise RuntimeError(f"boom at epoch {self.current_epoch + 1} "
                               f"(lr {self.hparams.lr:.6g}, pid {os.getpid()})")


def raise_in_epoch_2(params: dict[str, Any]):
    """The digits MLP that fails in epoch 2 for every configuration."""
    return EpochTwoMLP(**_model_kwargs(params)), digits.DigitsData()


class NamedErrorMLP(digits.DigitsMLP):
    """Raises ``params['error']`` (an exception class name) in its first epoch."""

    def __init__(self, error: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.error = error

    def on_train_epoch_start(self) -> None:
        raise {"ValueError": ValueError, "KeyError": KeyError,
               "RuntimeError": RuntimeError}[self.error](f"{self.error} in trial")


def raise_named(params: dict[str, Any]):
    """Fails in epoch 1 with the exception class ``params['error']`` names."""
    return NamedErrorMLP(params["error"], **_model_kwargs(params)), digits.DigitsData()


def config_error_in_build(params: dict[str, Any]):
    """Raises hpsearch's ConfigError inside the trial process (a constructor with three
    arguments: it must reach the driver intact)."""
    from hpsearch.errors import ConfigError

    raise ConfigError("space.hidden", "is too large for this model", params.get("hidden", 64))


class PathHparamsMLP(digits.DigitsMLP):
    """Saves a ``pathlib.Path`` among its hyperparameters: its checkpoints hold code."""

    def __init__(self, data_dir: Path, **kwargs: Any):
        super().__init__(**kwargs)
        self.save_hyperparameters()


def path_in_hparams(params: dict[str, Any]):
    """The digits MLP with a Path hyperparameter (checkpoints that are not plain data)."""
    return (PathHparamsMLP(Path("/tmp/digits"), **_model_kwargs(params)),
            digits.DigitsData())


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
