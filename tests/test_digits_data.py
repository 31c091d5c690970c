"""The digits example's data (hpsearch.examples.digits_data): the split and the
standardisation both Lightning flavours of the example train on.

Slow as a file: it imports torch (the fast tests import neither torch nor Lightning).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_the_split_is_fixed_and_80_20():
    from hpsearch.examples.digits_data import digits_sets

    train, val = digits_sets()
    assert (len(train), len(val)) == (1438, 359)
    again_train, again_val = digits_sets()
    assert bool((again_val.tensors[0] == val.tensors[0]).all())
    assert bool((again_val.tensors[1] == val.tensors[1]).all())


def test_every_standardised_input_stays_small_in_training_and_validation():
    """The pixels blank in every training image used to be divided by 1e-6: one grey
    level in a validation image became an input of a million and the validation loss of
    a good model read in the hundreds."""
    from hpsearch.examples.digits_data import digits_sets

    train, val = digits_sets()
    assert float(train.tensors[0].abs().max()) <= 16.0
    assert float(val.tensors[0].abs().max()) <= 16.0
    assert float(train.tensors[0].mean(0).abs().max()) < 1e-4  # centred on training stats


def test_a_trained_model_has_a_loss_in_the_range_of_its_accuracy():
    """A few epochs of the example's MLP: accuracy over 0.9 and a cross-entropy under 0.5
    on the validation images (it read 20-2600 before the fix)."""
    import torch
    from torch.utils.data import DataLoader

    from hpsearch.examples.digits import DigitsMLP
    from hpsearch.examples.digits_data import digits_sets

    torch.manual_seed(0)
    train, val = digits_sets()
    model = DigitsMLP(lr=3e-3, hidden=64, dropout=0.0)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(5):
        for x, y in DataLoader(train, batch_size=64, shuffle=True):
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimiser.step()
    model.eval()
    with torch.no_grad():
        x, y = val.tensors
        logits = model(x)
        loss = float(torch.nn.functional.cross_entropy(logits, y))
        accuracy = float((logits.argmax(1) == y).float().mean())
    assert accuracy > 0.9
    assert loss < 0.5
