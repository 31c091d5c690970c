"""What the ledger records: a node's rental, each trial's share of it, and how each ended.

Pure module. A provider bills *nodes* (instances), so the ledger does too. A
:class:`Rental` runs from the moment a node is rented (for a local run: this machine,
from the run's start) to the moment it is released; its billed seconds are its length
rounded up to the node's billing granularity and at least its minimum billing period,
applied once per rental. Each trial is charged its *share* of the node while it runs (an
:class:`Interval`: its reserved GPUs, or CPUs, over the node's, times the node's price,
for the seconds it ran, unrounded). What the node billed beyond the trials' shares is
*idle* money. So node money = trials' shares + idle, and every trial's share splits into
work kept and work *wasted*: if an interval ends in a failure or preemption, the work
since its last checkpoint is lost (a trial preempted 90 s after it started, with its last
checkpoint at 60 s, has 30 s x its share's price wasted).

An interval of a ledger written before node billing (format 1) has no node: it is billed
on its own, at its own granularity and minimum, as it was then.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hpsearch import keys
from hpsearch.money.nodes import NodeSpec, billed_seconds


class Outcome(str, enum.Enum):
    """How an interval ended (its value is what the ledger's lines hold)."""

    DONE = "done"
    FAILED = "failed"
    PREEMPTED = "preempted"
    STOPPED = "stopped"
    OPEN = "open"  # not ended yet

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


DONE, FAILED, PREEMPTED, STOPPED, OPEN = (Outcome.DONE, Outcome.FAILED, Outcome.PREEMPTED,
                                          Outcome.STOPPED, Outcome.OPEN)
#: The outcomes an interval can end with.
ENDED = (DONE, FAILED, PREEMPTED, STOPPED)
_LOSES_WORK = (FAILED, PREEMPTED)


@dataclass
class Interval:
    """One stretch of billed time of one trial.

    Attributes:
        trial: The trial's number (the Optuna trial number).
        instance: ``provider:instance`` it ran on.
        spot: Whether it was billed at the spot price.
        price_per_hour: Price of this trial-hour: its share of its node's price (or, in a
            format-1 ledger, the trial-hour price of the run).
        currency: ISO currency code.
        start_s: When billing started.
        end_s: When it stopped, or None while open.
        checkpoint_s: The latest checkpoint inside the interval, or None.
        outcome: How it ended (:class:`Outcome`; ``OPEN`` while it runs).
        granularity_s: Billed time is rounded up to a multiple of this (0 for a share of
            a node: the node's rental is what is rounded).
        min_billing_s: Least billed time (0 for a share of a node).
        node: The node it ran on (its share of that node's rental), or None (format 1).
        share: Fraction of the node it paid for.
        cap_s: When its node was released (a node that vanished): nothing is billed after.
        startup_s: Seconds its process spent before its first epoch, once reported.
    """

    trial: int
    instance: str
    spot: bool
    price_per_hour: float
    currency: str
    start_s: float
    end_s: float | None = None
    checkpoint_s: float | None = None
    outcome: Outcome = OPEN
    granularity_s: int = 1
    min_billing_s: int = 0
    node: str | None = None
    share: float = 1.0
    cap_s: float | None = None
    startup_s: float | None = None

    def until_s(self, now_s: float | None = None) -> float:
        """Where billing stops (an open interval: ``now_s``, or its start)."""
        end = self.end_s if self.end_s is not None else (now_s if now_s is not None
                                                          else self.start_s)
        if self.cap_s is not None:
            end = min(end, self.cap_s)
        return max(end, self.start_s)

    def billed_s(self, now_s: float | None = None) -> float:
        """Billed seconds (an open interval is billed up to ``now_s``)."""
        return billed_seconds(self.until_s(now_s) - self.start_s, self.granularity_s,
                              self.min_billing_s)

    def cost(self, now_s: float | None = None) -> float:
        return self.billed_s(now_s) * self.price_per_hour / 3600.0

    def wasted_s(self) -> float:
        """Seconds of work lost: after the last checkpoint of an interval that failed."""
        if self.outcome not in _LOSES_WORK or self.end_s is None:
            return 0.0
        kept_until = self.checkpoint_s if self.checkpoint_s is not None else self.start_s
        return max(0.0, self.until_s() - kept_until)

    def wasted_cost(self) -> float:
        return self.wasted_s() * self.price_per_hour / 3600.0


@dataclass
class Rental:
    """One node rented from ``start_s`` to ``end_s``, billed as the provider bills it.

    Attributes:
        node: The node's id.
        instance, spot, price_per_hour, currency, cpus, gpus, granularity_s,
        min_billing_s: As in :class:`~hpsearch.money.nodes.NodeSpec`.
        start_s: When it was rented (for a node up before the run: the run's start).
        end_s: When it was released, or None while rented.
        lost: It was released because it vanished (a spot node taken back).
    """

    node: str
    instance: str
    spot: bool
    price_per_hour: float
    currency: str
    start_s: float
    end_s: float | None = None
    cpus: float = 0.0
    gpus: float = 0.0
    granularity_s: int = 1
    min_billing_s: int = 0
    lost: bool = False

    def until_s(self, now_s: float | None = None) -> float:
        end = self.end_s if self.end_s is not None else (now_s if now_s is not None
                                                          else self.start_s)
        return max(end, self.start_s)

    def length_s(self, now_s: float | None = None) -> float:
        """Seconds it was (or is, up to ``now_s``) rented."""
        return self.until_s(now_s) - self.start_s

    def billed_s(self, now_s: float | None = None) -> float:
        """Seconds billed: its length rounded up, at least its minimum (once per rental)."""
        return billed_seconds(self.length_s(now_s), self.granularity_s, self.min_billing_s)

    def cost(self, now_s: float | None = None) -> float:
        return self.billed_s(now_s) * self.price_per_hour / 3600.0

    def spec(self) -> NodeSpec:
        return NodeSpec(self.node, self.instance, self.spot, self.price_per_hour,
                        self.currency, self.cpus, self.gpus, self.granularity_s,
                        self.min_billing_s)


@dataclass
class TrialMoney:
    """One trial's totals, as mirrored into its Optuna user attributes."""

    cost: float
    wasted_cost: float
    billed_s: float
    instance: str
    spot: bool
    currency: str
    spot_cost: float = 0.0
    share: float | None = None

    def attrs(self) -> dict:
        """The Optuna user attributes (keys from :mod:`hpsearch.keys`)."""
        out = {keys.ATTR_COST: self.cost, keys.ATTR_WASTED_COST: self.wasted_cost,
               keys.ATTR_BILLED_S: self.billed_s, keys.ATTR_INSTANCE: self.instance,
               keys.ATTR_SPOT: self.spot, keys.ATTR_CURRENCY: self.currency,
               keys.ATTR_SPOT_COST: self.spot_cost}
        if self.share is not None:
            out[keys.ATTR_SHARE] = self.share
        return out
