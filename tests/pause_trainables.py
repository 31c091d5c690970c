"""The trainable of the pause/resume end-to-end tests: the real digits MLP (trained on
CPU as usual) whose objective ``score`` follows a scripted curve, one per ``kind``.

The score after epoch n is ``CURVES[kind][n - 1]``, where n is the count of epochs the
*model* has trained: a buffer in its state dict, so it is restored from a checkpoint
with the weights. A resumed trial that does not restore its state reports the start of
its curve again (a value that differs from the uninterrupted curve's); one that resumes
exactly continues the curve. Each epoch sleeps ``SLEEP_S[kind] x params['sleep_scale']``
seconds so that the order in which trials reach each epoch is set by the curves' design,
not by the load of the machine.

Trial processes import this module, so the switches are sampled params (``kind`` and
``sleep_scale``), never globals.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hpsearch.examples import digits

from .pause_curves import CURVES, SLEEP_S


class ScriptedMLP(digits.DigitsMLP):
    """The digits MLP that logs ``score`` from ``curve`` and sleeps ``sleep_s`` per epoch."""

    def __init__(self, curve: tuple[float, ...], sleep_s: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.curve, self.sleep_s = curve, sleep_s
        # Part of the state dict, so a checkpoint carries it (as it carries the weights).
        self.register_buffer("epochs_trained", torch.zeros((), dtype=torch.long))

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.epochs_trained += 1
        n = int(self.epochs_trained)
        self.log("score", self.curve[n - 1] if n <= len(self.curve) else float("nan"))
        self.log("epochs_trained", float(n))
        time.sleep(self.sleep_s)


def scripted(params: dict[str, Any]):
    """The digits MLP whose objective ``score`` follows ``CURVES[params['kind']]``."""
    kind = params["kind"]
    model = ScriptedMLP(CURVES[kind], SLEEP_S[kind] * float(params.get("sleep_scale", 1.0)),
                        lr=float(params.get("lr", 0.01)), hidden=int(params.get("hidden", 16)))
    return model, digits.DigitsData()
