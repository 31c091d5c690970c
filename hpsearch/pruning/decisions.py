"""What a scheduling policy can decide about a running trial, and why it stopped one.

Pure module. The Ray scheduler adapter maps :class:`Decision` to Ray's strings in one
place; everything else speaks in these enums.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    """A policy's verdict on a trial after one of its results."""

    CONTINUE = "continue"
    STOP = "stop"
    PAUSE = "pause"


@dataclass(frozen=True)
class StopRecord:
    """Why a policy stopped a trial (kept so the study can mark it PRUNED, not COMPLETE).

    Attributes:
        policy: Who decided (``asha``, ``median``, ``cost_aware``, ``budget``).
        epoch: Epochs the trial had completed when it was stopped.
        reason: One human-readable sentence.
        predicted_final: The objective the trial was expected to end at, if predicted.
        saved_cost: Expected money its remaining epochs would have cost, if known.
    """

    policy: str
    epoch: int
    reason: str
    predicted_final: float | None = None
    saved_cost: float | None = None


@dataclass(frozen=True)
class Verdict:
    """A policy's decision about one trial after one epoch.

    Attributes:
        decision: CONTINUE, STOP or PAUSE.
        reason: Why, in one sentence (empty for CONTINUE).
        predicted_final: The metric the trial was expected to end at (metric units).
        predicted_interval: ``(low, high)``: where its final metric was expected to lie
            (an 80% interval, metric units, low first), if the policy predicts one.
    """

    decision: Decision
    reason: str = ""
    predicted_final: float | None = None
    predicted_interval: tuple[float, float] | None = None


#: The verdict that lets a trial go on.
CONTINUE = Verdict(Decision.CONTINUE)


def stopped_at(epoch: int, max_epochs: int, metric: str, value: float) -> str:
    """The stop reason of a library pruner (they give none of their own)."""
    return f"stopped at epoch {epoch}/{max_epochs} with {metric}={value!r}"
