"""The digits example's data: scikit-learn's bundled 8x8 digits, split and standardised.

Torch and scikit-learn only (no Lightning), so that trainables written against either
Lightning package share the same images and the same preprocessing.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

#: The train/validation split is fixed so that every trial is judged on the same images.
SPLIT_SEED = 1234
VAL_FRACTION = 0.2
#: The least spread a pixel is divided by, in grey levels (the images' pixels are whole
#: levels 0-16). Four pixels never light up in the training images and some light up
#: once or twice; dividing by their spread (0, or a few hundredths) turned one stray
#: level in a validation image into an input of up to a million, and the validation loss
#: of a model that classifies well into hundreds. With one level as the floor every
#: standardised input, training or validation, stays within 15.
MIN_PIXEL_STD = 1.0


def digits_sets() -> tuple[TensorDataset, TensorDataset]:
    """The training and validation sets (80/20, fixed split), standardised with the
    training images' per-pixel mean and spread (at least :data:`MIN_PIXEL_STD`)."""
    from sklearn.datasets import load_digits

    x_np, y_np = load_digits(return_X_y=True)
    x = torch.tensor(x_np, dtype=torch.float32)
    y = torch.tensor(y_np, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = int(len(x) * VAL_FRACTION)
    val_idx, train_idx = order[:n_val], order[n_val:]
    mean = x[train_idx].mean(0)
    std = x[train_idx].std(0).clamp_min(MIN_PIXEL_STD)
    x = (x - mean) / std
    return TensorDataset(x[train_idx], y[train_idx]), TensorDataset(x[val_idx], y[val_idx])
