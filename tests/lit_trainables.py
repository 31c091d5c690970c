"""Trainables written against the ``lightning`` package, as Lightning's docs write them
today (``import lightning as L``), never ``pytorch_lightning``.

The digits MLP of :mod:`hpsearch.examples.digits`, rebuilt on ``L.LightningModule`` and
``L.LightningDataModule`` (that module imports ``pytorch_lightning``, so nothing here
imports it), with the faults the end-to-end tests need, and the data shapes ``build``
may return: ``(module, datamodule)``, ``(module, train_loader, val_loader)`` and a
module with its own loaders. Trials take their switches from the sampled params.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hpsearch.examples.digits_data import digits_sets

_MODEL_KEYS = ("lr", "hidden", "dropout", "optimizer")


class LitDigitsData(L.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size
        self.sets: tuple[TensorDataset, TensorDataset] | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.sets is None:
            self.sets = digits_sets()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets[0], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets[1], batch_size=512)


class LitDigitsMLP(L.LightningModule):
    """One hidden layer; logs ``val_acc`` and ``val_loss``. With ``probe_dir`` it
    writes which Lightning packages its process imported (``packages-<pid>.json``).

    With ``crash_dir``/``crash_epoch`` it kills its own process once when epoch
    ``crash_epoch`` (0-based) starts; with ``oom_limit`` it raises
    ``torch.OutOfMemoryError`` (as CUDA would) for batches larger than that, on DDP rank
    ``oom_rank`` only when it is >= 0."""

    def __init__(self, lr: float = 1e-2, hidden: int = 64, dropout: float = 0.1,
                 optimizer: str = "adam", crash_dir: str = "", crash_epoch: int = -1,
                 oom_limit: int = 0, oom_rank: int = -1, probe_dir: str = ""):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_fit_start(self) -> None:
        if self.hparams.probe_dir:
            found = sorted(m for m in ("lightning", "pytorch_lightning") if m in sys.modules)
            Path(self.hparams.probe_dir, f"packages-{os.getpid()}.json").write_text(
                json.dumps(found))

    def on_train_epoch_start(self) -> None:
        hp = self.hparams
        if hp.crash_epoch >= 0 and self.current_epoch == hp.crash_epoch:
            marker = Path(hp.crash_dir) / "crashed-lit"
            if not marker.exists() and self.global_rank == 0:
                marker.write_text(str(self.current_epoch))
                os._exit(1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        hp = self.hparams
        if hp.oom_limit and x.shape[0] > hp.oom_limit and hp.oom_rank in (-1, self.global_rank):
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate a batch of {x.shape[0]} (test "
                f"limit {hp.oom_limit})")
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class LitSelfLoading(LitDigitsMLP):
    """A module that builds its own loaders, at ``self.batch_size``."""

    def __init__(self, batch_size: int = 64, **kwargs: Any):
        super().__init__(**kwargs)
        self.batch_size = batch_size
        self.sets: tuple[TensorDataset, TensorDataset] | None = None

    def setup(self, stage: str) -> None:
        if self.sets is None:
            self.sets = digits_sets()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets[0], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets[1], batch_size=512)


def _kwargs(params: dict[str, Any]) -> dict[str, Any]:
    out = {k: params[k] for k in _MODEL_KEYS if k in params}
    for key in ("crash_dir", "crash_epoch", "probe_dir", "oom_rank"):
        if key in params:
            out[key] = params[key]
    if "limit" in params:
        out["oom_limit"] = int(params["limit"])
    return out


def build(params: dict[str, Any]):
    """``(LitDigitsMLP, LitDigitsData)``; ``crash_*``, ``probe_dir``, ``limit`` and
    ``oom_rank`` params switch on the faults (see :class:`LitDigitsMLP`)."""
    return LitDigitsMLP(**_kwargs(params)), LitDigitsData(int(params.get("batch_size", 64)))


def shaped(params: dict[str, Any]):
    """The same model in the data shape ``params['shape']`` names: ``datamodule``,
    ``loaders`` or ``module``; the batch size is ``params['batch']`` (set in the data,
    not a param hpsearch knows of)."""
    batch = int(params.get("batch", 64))
    shape = params["shape"]
    if shape == "datamodule":
        return LitDigitsMLP(**_kwargs(params)), LitDigitsData(batch)
    if shape == "loaders":
        train, val = digits_sets()
        return (LitDigitsMLP(**_kwargs(params)),
                DataLoader(train, batch_size=batch, shuffle=True),
                DataLoader(val, batch_size=512))
    if shape == "module":
        return LitSelfLoading(batch_size=batch, **_kwargs(params))
    raise ValueError(f"unknown shape {shape!r}")
