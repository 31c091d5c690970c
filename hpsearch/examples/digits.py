"""An MLP on scikit-learn's bundled 8x8 digits (1,797 images; no download).

The trainable contract in its smallest real form: ``build(params)`` returns a
``(LightningModule, LightningDataModule)`` pair and the module logs the objective
(``val_acc``) in its validation step.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hpsearch.examples.digits_data import digits_sets


class DigitsData(pl.LightningDataModule):
    """The digits set, standardised with training-set statistics, split 80/20
    (:func:`hpsearch.examples.digits_data.digits_sets`)."""

    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self.train_set, self.val_set = digits_sets()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=512)


class DigitsMLP(pl.LightningModule):
    """A one- or two-hidden-layer MLP; logs ``val_acc`` and ``val_loss`` each epoch."""

    def __init__(
        self,
        lr: float = 1e-2,
        hidden: int = 64,
        dropout: float = 0.1,
        optimizer: str = "adam",
        layers: int = 1,
        momentum: float = 0.9,
    ):
        super().__init__()
        self.save_hyperparameters()
        blocks: list[nn.Module] = []
        width_in = 64
        for _ in range(layers):
            blocks += [nn.Linear(width_in, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width_in = hidden
        blocks.append(nn.Linear(width_in, 10))
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        lr = self.hparams.lr
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=lr, momentum=self.hparams.momentum)
        return torch.optim.Adam(self.parameters(), lr=lr)


def build(params: dict[str, Any]) -> tuple[DigitsMLP, DigitsData]:
    """Build the model and data for one trial from its sampled ``params``.

    Keys used: ``lr``, ``hidden``, ``dropout``, ``optimizer``, ``layers``, ``momentum``
    (SGD's, default 0.9; e.g. a param with ``condition: {optimizer: sgd}``) and
    ``batch_size``; any of them may be left out of the space (defaults apply).
    """
    model_keys = ("lr", "hidden", "dropout", "optimizer", "layers", "momentum")
    model = DigitsMLP(**{k: params[k] for k in model_keys if k in params})
    return model, DigitsData(batch_size=int(params.get("batch_size", 64)))
