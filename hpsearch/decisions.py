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
        policy: The policy that decided (``asha``, ``median``, ...).
        epoch: Epochs the trial had completed when it was stopped.
        reason: One human-readable sentence.
    """

    policy: str
    epoch: int
    reason: str
