"""Forecast: what a run's trials are expected to cost from here.

Pure module; the clock is injected. Seconds come from the runtime model
(:class:`~hpsearch.money.runtime.RunTiming`, fed each trial's measured epochs), money
from each trial's price per second as billed (:meth:`hpsearch.money.billing.Billing.per_s`).
A node held for the session bills until its last trial ends: a new trial that fits in
capacity already paid for adds nothing, one that outlasts the others adds the node's
time it extends; a node rented per trial adds its own rental, at least its minimum.
"""

from __future__ import annotations

from typing import Callable

from hpsearch.money.billing import Billing
from hpsearch.money.ledger import Ledger
from hpsearch.money.nodes import Fleet, billed_seconds
from hpsearch.money.pricing import Price
from hpsearch.money.runtime import RunTiming


class Forecast:
    """Expected money of a run's trials: one more epoch, the rest of a trial, a new one,
    and what the nodes will have billed once they are done.

    Args:
        billing: The run's billing (its ledger, each trial's price per second, the
            trials waiting for a worker).
        max_epochs: Epochs of a full trial.
        fleet: How long nodes stay rented (:class:`~hpsearch.money.nodes.Fleet`).
        tail_s: Seconds a held fleet stays rented after its last trial ends (the
            session's wrap-up).
    """

    def __init__(self, billing: Billing, max_epochs: int, fleet: Fleet = Fleet.HELD,
                 tail_s: float = 0.0):
        self.billing = billing
        self.fleet = fleet
        self.tail_s = tail_s
        self.timing = RunTiming(max_epochs)
        self._epochs: dict[int, int] = {}  # trial -> the newest epoch measured

    @property
    def ledger(self) -> Ledger:
        return self.billing.ledger

    @property
    def price(self) -> Price:
        return self.billing.price

    @property
    def clock(self) -> Callable[[], float]:
        return self.billing.clock

    # -- what is measured -------------------------------------------------------------

    def epoch_measured(self, trial: int, epoch: int, epoch_time_s: float,
                       startup_s: float | None) -> None:
        """``trial`` finished ``epoch`` in ``epoch_time_s`` seconds (an epoch measured
        before, re-sent by a resumed process, is not measured again)."""
        if epoch > self._epochs.get(trial, 0):
            self.timing.record_epoch(trial, epoch_time_s, startup_s if epoch == 1 else None)
            self._epochs[trial] = epoch

    def restore(self, trial: int, epoch_times_s, startup_s: float | None) -> None:
        """Take back the measured epoch times of a trial of an earlier session (its epochs
        1..len(epoch_times_s)), so a continued run estimates from them."""
        self.timing.restore(trial, epoch_times_s, startup_s)
        if epoch_times_s:
            self._epochs[trial] = max(self._epochs.get(trial, 0), len(epoch_times_s))

    # -- one trial --------------------------------------------------------------------

    def epoch_cost(self, trial: int | None = None) -> float | None:
        """Expected money of one more epoch of ``trial`` (or a typical trial)."""
        epoch = self.timing.epoch_s(trial)
        return None if epoch is None else epoch * self.billing.per_s(trial)

    def cost_to_finish(self, trial: int, epochs_done: int) -> float | None:
        """Expected money of ``trial``'s share from ``epochs_done`` to the last epoch."""
        remaining = self.timing.remaining_s(trial, epochs_done)
        return None if remaining is None else remaining * self.billing.per_s(trial)

    def new_trial_cost(self) -> float | None:
        """Expected money of a new trial's share (at the run's price)."""
        seconds = self.timing.new_trial_s()
        return None if seconds is None else seconds * self.price.per_second

    def own_cost(self) -> float | None:
        """Expected money of a new trial billed on its own (no node): its seconds at the
        run's price, rounded and at least the minimum, as such an interval is billed."""
        seconds = self.timing.new_trial_s()
        if seconds is None:
            return None
        return billed_seconds(seconds, self.price.billing_granularity_s,
                              self.price.min_billing_s) * self.price.per_second

    # -- the run ----------------------------------------------------------------------

    def committed(self) -> float:
        """Expected money of the shares the running and waiting trials still need."""
        total = 0.0
        for trial in self.ledger.open_trials():
            to_finish = self.cost_to_finish(trial, self._epochs.get(trial, 0))
            if to_finish is not None:
                total += to_finish
        new = self.new_trial_cost()
        if new is not None:
            total += new * len(self.billing.pending)
        return total

    def projected(self, new_trials: int = 0) -> float:
        """Expected money billed in all once the running and waiting trials, and
        ``new_trials`` more, have finished (from measured epoch times; a trial nothing
        is measured of yet counts for its node's minimum only).

        Held nodes bill until the last of those trials is expected to end (plus
        ``tail_s``); a node rented per trial until its own trial ends, and each waiting
        or new trial rents one more, billed at least its minimum. Without rented nodes:
        spent + :meth:`committed` + the new trials' shares.
        """
        now, rented = self.clock(), self.ledger.rented()
        if not rented and self.fleet is Fleet.HELD:
            return (self.ledger.spent(self.clock()) + self.committed()
                    + (self.own_cost() or 0.0) * new_trials)
        new_s = self.timing.new_trial_s() or 0.0
        base = self.ledger.spent(now) - sum(r.cost(now) for r in rented)
        waiting = len(self.billing.pending) + new_trials
        if self.fleet is Fleet.HELD:
            ahead = [self._remaining_s(t, new_s) for t in self.ledger.open_trials()]
            until = now + max([*ahead, *[new_s] * waiting], default=0.0) + self.tail_s
            return base + sum(r.cost(until) for r in rented)
        ends = {r.node: now for r in rented}
        for trial in self.ledger.open_trials():
            node = self.ledger.open_interval(trial).node
            if node in ends:
                ends[node] = max(ends[node], now + self._remaining_s(trial, new_s))
        one = billed_seconds(new_s, self.price.billing_granularity_s,
                             self.price.min_billing_s) * self.price.per_hour / 3600.0
        return base + sum(r.cost(ends[r.node]) for r in rented) + waiting * one

    def _remaining_s(self, trial: int, unknown_s: float) -> float:
        remaining = self.timing.remaining_s(trial, self._epochs.get(trial, 0))
        return unknown_s if remaining is None else remaining

    def tail_cost(self) -> float:
        """What a held fleet bills for the session's wrap-up (``tail_s``)."""
        if self.fleet is not Fleet.HELD:
            return 0.0
        return sum(r.price_per_hour for r in self.ledger.rented()) * self.tail_s / 3600.0
