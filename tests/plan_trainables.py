"""Trainables for the ``plan`` tests: a known model big enough to measure its memory.

``wide_mlp`` is a stack of ``depth`` Linear(width, width) + ReLU blocks and a 10-way
head, trained with Adam on random data; with the defaults (width 1024, depth 4, batch
4096) it holds about 17 MB of weights and 80 MB of activations per step. ``broken``
raises while building.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DEFAULTS = {"width": 1024, "depth": 4, "batch_size": 4096, "batches": 2, "lr": 1e-3}


class WideMLP(pl.LightningModule):
    """``depth`` x (Linear(width, width), ReLU), then Linear(width, 10); Adam."""

    def __init__(self, width: int, depth: int, lr: float = 1e-3):
        super().__init__()
        self.lr = lr
        blocks: list[nn.Module] = []
        for _ in range(depth):
            blocks += [nn.Linear(width, width), nn.ReLU()]
        blocks.append(nn.Linear(width, 10))
        self.net = nn.Sequential(*blocks)

    def loss(self, batch) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class RandomData(pl.LightningDataModule):
    """``batches`` batches of ``batch_size`` random vectors of ``width`` and labels in
    0..9 (fixed seed), for training and for validation alike; no shuffling."""

    def __init__(self, width: int, batch_size: int, batches: int):
        super().__init__()
        self.width, self.batch_size, self.batches = width, batch_size, batches
        self.data: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        gen = torch.Generator().manual_seed(0)
        n = self.batch_size * self.batches
        self.data = TensorDataset(torch.randn(n, self.width, generator=gen),
                                  torch.randint(0, 10, (n,), generator=gen))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=False)


def settings(params: dict[str, Any]) -> dict[str, Any]:
    return {**DEFAULTS, **{k: v for k, v in params.items() if k in DEFAULTS}}


def wide_mlp(params: dict[str, Any]):
    """The WideMLP and its random data (keys of :data:`DEFAULTS` override them)."""
    s = settings(params)
    model = WideMLP(int(s["width"]), int(s["depth"]), float(s["lr"]))
    return model, RandomData(int(s["width"]), int(s["batch_size"]), int(s["batches"]))


def broken(params: dict[str, Any]):
    """Fails to build, as a trainable with a bug would."""
    raise ValueError("no such layer: 'Linaer'")
