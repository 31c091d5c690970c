"""The trivial trainable both sides of the overhead benchmark run: a tiny MLP, 3 batches."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

N_SAMPLES = 192
BATCH = 64


class TinyData(pl.LightningDataModule):
    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(N_SAMPLES, 8, generator=g)
        y = (x.sum(1) > 0).long()
        self.data = TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=BATCH, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=N_SAMPLES)


class TinyMLP(pl.LightningModule):
    def __init__(self, lr: float, hidden: int):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def build(params: dict[str, Any]):
    return TinyMLP(params["lr"], params["hidden"]), TinyData()
