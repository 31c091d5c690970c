"""Budget: admission control and caps on money and time, over the ledger.

Pure module; the clock is injected. :class:`Accountant` is the one object the search core
asks about money: it bills the nodes a run rents and each trial's share of them (through
the :class:`~hpsearch.money.ledger.Ledger`), measures trials' epochs (through
:class:`~hpsearch.money.runtime.RunTiming`) and answers:

* may a new trial start? Only if what the nodes will bill until the running (and
  waiting) trials and the new one are expected to finish, minimums included, fits
  ``max_cost`` (:meth:`Accountant.projected`). A node held for the session bills until
  its last trial ends: a new trial that fits in capacity already paid for adds nothing,
  one that outlasts the others adds the node's time it extends; a node rented per trial
  adds its own rental, at least its minimum;
* must the run stop? Once what is billed (plus the session's expected wrap-up) reaches
  ``max_cost``, or the session ``max_wall_s``: every running trial is stopped at its next
  report (right after its checkpoint), so spend passes the cap by at most one reporting
  interval of the nodes;
* must this trial stop? If its next epoch would take its own share past
  ``max_cost_per_trial``.

Without rented nodes (an accountant the caller never tells of one) each trial is billed
on its own at the run's price, as before node billing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Sequence

from hpsearch.spec.config import Budget
from hpsearch.money.ledger import ALIVE_EVERY_S, Ledger, Outcome
from hpsearch.money.nodes import Demand, Fleet, NodeSpec, billed_seconds
from hpsearch.money.pricing import Price
from hpsearch.money.runtime import RunTiming
from hpsearch.money.fmt import fmt_money
from hpsearch.money.statement import Statement, statement


class Admission(enum.Enum):
    """Whether a new trial may start now."""

    ADMIT = "admit"
    WAIT = "wait"  # not now: running trials may finish under their estimate
    CLOSED = "closed"  # never again in this session


@dataclass(frozen=True)
class AdmissionVerdict:
    admission: Admission
    reason: str = ""


#: Least seconds between two reads of the node list by :meth:`Accountant.heartbeat`.
NODE_SYNC_S = 2.0


class Accountant:
    """Money and time of a run, as the core sees it.

    Past the project's ~250-line rule for a class, on purpose: it is the one place the
    core asks about money (what a trial costs so far and to finish, whether a new one
    fits, when the budget closes), each question a short method over the same three
    records (the ledger, the runtime model, the nodes); split, every answer would need
    all three passed around again.

    Args:
        price: The run's price: a trial-hour (its share of the run's instance) for the
            estimates of a trial's money, and the price of a node rented per trial.
        limits: The ``budget`` section of the config.
        ledger: The run's ledger (possibly holding earlier sessions).
        max_epochs: Epochs of a full trial.
        clock: Seconds; wall-clock time in the driver (the ledger outlives processes).
        demand: What one trial reserves (``resources.cpu``/``resources.gpu``): its share
            of a node follows from it (:meth:`~hpsearch.money.nodes.Demand.share`).
        fleet: How long nodes stay rented (:class:`~hpsearch.money.nodes.Fleet`).
        tail_s: Seconds a held fleet stays rented after its last trial ends (the
            session's wrap-up), counted by admission and by the hard stop.
    """

    def __init__(self, price: Price, limits: Budget, ledger: Ledger, max_epochs: int,
                 clock: Callable[[], float], *, demand: Demand | None = None,
                 fleet: Fleet = Fleet.HELD, tail_s: float = 0.0):
        self.price = price
        self.limits = limits
        self.ledger = ledger
        self.clock = clock
        self.demand = demand or Demand()
        self.fleet = fleet
        self.tail_s = tail_s
        self.timing = RunTiming(max_epochs)
        self.started_s = clock()
        self._epochs: dict[int, int] = {}
        self._pending: set[int] = set()
        self._stop_reason: str | None = None
        self._rates: dict[int, float] = {}  # trial -> its price per second, as billed
        self._nodes_from: Callable[[], Sequence[NodeSpec]] | None = None
        self._synced_s: float | None = None

    # -- nodes ------------------------------------------------------------------------

    def watch_nodes(self, source: Callable[[], Sequence[NodeSpec]],
                    since_s: float | None = None) -> None:
        """Bill the nodes ``source`` lists (the cluster's alive nodes, each priced): those
        listed now from ``since_s`` (the run's start: a node up before the run is billed
        from it), later ones from when they are first listed; a rented node no longer
        listed is released as lost. The heartbeat reads the list again every
        :data:`NODE_SYNC_S` seconds."""
        self._nodes_from = source
        self.sync_nodes(since_s)
        # Written now: a driver killed before its first heartbeat still bills its start.
        self.ledger.alive(self.clock(), every_s=0.0)

    def sync_nodes(self, since_s: float | None = None) -> None:
        """Read the node list now (see :meth:`watch_nodes`)."""
        if self._nodes_from is None:
            return
        now = self.clock()
        listed = {n.node_id: n for n in self._nodes_from()}
        for node_id, spec in listed.items():
            if self.ledger.rental(node_id) is None:
                self.ledger.rent(spec, now if since_s is None else min(since_s, now))
        for rental in self.ledger.rented():
            if rental.node not in listed:
                self.ledger.release(rental.node, now, lost=True)
        self._synced_s = now

    def node_rented(self, node: NodeSpec, at_s: float | None = None) -> None:
        """``node`` was rented (at ``at_s``, default now)."""
        self.ledger.rent(node, self.clock() if at_s is None else at_s)

    def node_released(self, node_id: str, at_s: float | None = None,
                      lost: bool = False) -> None:
        """``node_id`` was released (``lost``: it vanished, e.g. a spot node taken back)."""
        self.ledger.release(node_id, self.clock() if at_s is None else at_s, lost)

    # -- trial events -----------------------------------------------------------------

    def trial_admitted(self, trial: int) -> None:
        """A trial was created and waits for a worker (counted as committed)."""
        self._pending.add(trial)

    def trial_started(self, trial: int, node: str | None = None) -> None:
        """A process took ``trial`` on ``node`` (None: not known yet; it is billed on a
        rented node it fits, and moved by :meth:`trial_placed` once known)."""
        self._pending.discard(trial)
        self._open(trial, self.clock(), node)

    def _open(self, trial: int, at_s: float, node: str | None) -> None:
        rental = self._rental_for(node)
        if rental is None:
            interval = self.ledger.open(trial, at_s, self.price)
        else:
            interval = self.ledger.open(trial, at_s, self.price, rental.node,
                                        self.demand.share(rental.spec()))
        self._rates[trial] = interval.price_per_hour / 3600.0

    def _rental_for(self, node: str | None):
        """The open rental a trial on ``node`` is billed on (any that fits it when
        ``node`` is None), the node list read again if it is not there; or None."""
        for attempt in range(2):
            if node is not None:
                rental = self.ledger.rental(node)
            else:
                rental = next((r for r in self.ledger.rented()
                               if self.demand.fits(r.spec())), None)
            if rental is not None or attempt or self._nodes_from is None:
                return rental
            self.sync_nodes()
        return None

    def trial_reported(self, trial: int, epoch: int, epoch_time_s: float,
                       startup_s: float | None = None, checkpointed: bool = True) -> None:
        """A trial finished ``epoch`` in ``epoch_time_s`` seconds (and saved a checkpoint
        of it, if ``checkpointed``: work up to now can no longer be lost); ``startup_s``:
        the seconds its process spent before its first epoch."""
        if not self.ledger.is_open(trial):
            self._open(trial, self.clock() - max(0.0, epoch_time_s), None)
        if startup_s is not None:
            self.ledger.startup(trial, startup_s)
        if checkpointed:
            self.ledger.checkpoint(trial, self.clock())
        if epoch > self._epochs.get(trial, 0):
            self.timing.record_epoch(trial, epoch_time_s, startup_s if epoch == 1 else None)
            self._epochs[trial] = epoch

    def restore_timing(self, trial: int, epoch_times_s, startup_s: float | None) -> None:
        """Take back the measured epoch times of a trial of an earlier session (its epochs
        1..len(epoch_times_s)), so a continued run estimates from them."""
        self.timing.restore(trial, epoch_times_s, startup_s)
        if epoch_times_s:
            self._epochs[trial] = max(self._epochs.get(trial, 0), len(epoch_times_s))

    def trial_placed(self, trial: int, node: str) -> None:
        """``trial`` runs on ``node``: bill its running interval, from its start, as its
        share of that node (a node not rented yet is looked up in the node list)."""
        rental = self._rental_for(node)
        if rental is not None:
            share = self.demand.share(rental.spec())
            self.ledger.place(trial, rental.node, share)
            self._rates[trial] = rental.price_per_hour * share / 3600.0

    def trial_ended(self, trial: int, outcome: Outcome, saved: bool = False) -> None:
        """A trial left its worker; ``saved``: it checkpointed everything it trained."""
        self._pending.discard(trial)
        now = self.clock()
        if saved:
            self.ledger.checkpoint(trial, now)
        self.ledger.close(trial, now, outcome)

    def heartbeat(self, force: bool = False) -> float:
        """Tell the ledger the driver is alive (throttled unless ``force``), read the node
        list again if it is due; return now.

        While anything is billed the ledger then knows, after a driver killed without
        warning, until when it ran (see :meth:`hpsearch.money.ledger.Ledger.alive`).
        """
        now = self.clock()
        if self._nodes_from is not None and (self._synced_s is None
                                             or now - self._synced_s >= NODE_SYNC_S):
            self.sync_nodes()
        self.ledger.alive(now, every_s=0.0 if force else ALIVE_EVERY_S)
        return now

    # -- figures ----------------------------------------------------------------------

    @property
    def currency(self) -> str:
        return self.price.currency

    def spent(self) -> float:
        """Everything billed so far, earlier sessions included (open rentals: at least
        their minimum)."""
        return self.ledger.spent(self.clock())

    def statement(self) -> Statement:
        """Work kept, wasted and idle money now (:mod:`hpsearch.money.statement`)."""
        return statement(self.ledger, self.clock())

    def trial_cost(self, trial: int) -> float:
        return self.ledger.spent(self.clock(), trial)

    def _per_s(self, trial: int | None) -> float:
        """What one second of ``trial`` costs: its share as billed, else the run's price."""
        if trial is not None and trial in self._rates:
            return self._rates[trial]
        return self.price.per_second

    def epoch_cost(self, trial: int | None = None) -> float | None:
        """Expected money of one more epoch of ``trial`` (or a typical trial)."""
        epoch = self.timing.epoch_s(trial)
        return None if epoch is None else epoch * self._per_s(trial)

    def cost_to_finish(self, trial: int, epochs_done: int) -> float | None:
        """Expected money of ``trial``'s share from ``epochs_done`` to the last epoch."""
        remaining = self.timing.remaining_s(trial, epochs_done)
        return None if remaining is None else remaining * self._per_s(trial)

    def new_trial_cost(self) -> float | None:
        """Expected money of a new trial's share (at the run's price)."""
        seconds = self.timing.new_trial_s()
        return None if seconds is None else seconds * self.price.per_second

    def _own_cost(self) -> float | None:
        """Expected money of a new trial billed on its own (no node): its seconds at the
        run's price, rounded and at least the minimum, as such an interval is billed."""
        seconds = self.timing.new_trial_s()
        if seconds is None:
            return None
        return billed_seconds(seconds, self.price.billing_granularity_s,
                              self.price.min_billing_s) * self.price.per_second

    def committed(self) -> float:
        """Expected money of the shares the running and waiting trials still need."""
        total = 0.0
        for trial in self.ledger.open_trials():
            to_finish = self.cost_to_finish(trial, self._epochs.get(trial, 0))
            if to_finish is not None:
                total += to_finish
        new = self.new_trial_cost()
        if new is not None:
            total += new * len(self._pending)
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
            return self.spent() + self.committed() + (self._own_cost() or 0.0) * new_trials
        new_s = self.timing.new_trial_s() or 0.0
        base = self.ledger.spent(now) - sum(r.cost(now) for r in rented)
        waiting = len(self._pending) + new_trials
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

    def _tail_cost(self) -> float:
        if self.fleet is not Fleet.HELD:
            return 0.0
        return sum(r.price_per_hour for r in self.ledger.rented()) * self.tail_s / 3600.0

    # -- decisions ----------------------------------------------------------------------

    def admission(self) -> AdmissionVerdict:
        """May a new trial start now?"""
        reason = self.run_stop_reason()
        if reason is not None:
            return AdmissionVerdict(Admission.CLOSED, reason)
        cap = self.limits.max_cost
        if cap is None:
            return AdmissionVerdict(Admission.ADMIT)
        if self.fleet is Fleet.HELD and not self.ledger.rented():
            return self._share_admission(cap)
        projected = self.projected(1)
        if projected <= cap:
            return AdmissionVerdict(Admission.ADMIT)
        extra = projected - self.projected(0)
        cur = self.currency
        text = (f"a new trial is expected to add {fmt_money(extra, cur)} to what the nodes "
                f"bill (minimums included): {fmt_money(projected, cur)} in all would pass "
                f"budget.max_cost {fmt_money(cap, cur)}")
        return self._refused(text)

    def _share_admission(self, cap: float) -> AdmissionVerdict:
        """Admission of an accountant without nodes: trials billed on their own."""
        spent, committed = self.spent(), self.committed()
        expected = self._own_cost()
        if expected is None:
            # Nothing measured yet: admit while there is money left; the cap check at
            # each report bounds the overshoot.
            return AdmissionVerdict(Admission.ADMIT)
        if spent + committed + expected <= cap:
            return AdmissionVerdict(Admission.ADMIT)
        return self._refused(
            f"a new trial is expected to cost {fmt_money(expected, self.currency)}; "
            f"spent {fmt_money(spent, self.currency)} + running trials' "
            f"{fmt_money(committed, self.currency)} leave less of budget.max_cost "
            f"{fmt_money(cap, self.currency)}")

    def _refused(self, text: str) -> AdmissionVerdict:
        if not self.ledger.open_trials() and not self._pending:
            return AdmissionVerdict(Admission.CLOSED, text)
        return AdmissionVerdict(Admission.WAIT, text)

    def run_stop_reason(self) -> str | None:
        """Why every trial must stop now (the run's caps), or None."""
        if self._stop_reason is not None:
            return self._stop_reason
        cap = self.limits.max_cost
        if cap is not None:
            spent = self.spent()
            if spent + self._tail_cost() >= cap:
                self._stop_reason = (f"budget.max_cost reached: spent "
                                     f"{fmt_money(spent, self.currency)} of "
                                     f"{fmt_money(cap, self.currency)}")
        wall = self.limits.max_wall_s
        if self._stop_reason is None and wall is not None:
            elapsed = self.clock() - self.started_s
            if elapsed >= wall:
                self._stop_reason = f"budget.max_wall_s reached: {elapsed:.0f} s of {wall:g} s"
        return self._stop_reason

    def trial_stop_reason(self, trial: int, epochs_done: int) -> str | None:
        """Why this trial must stop before its next epoch (its own cap), or None."""
        cap = self.limits.max_cost_per_trial
        if cap is None:
            return None
        cost = self.trial_cost(trial)
        next_epoch = self.epoch_cost(trial) or 0.0
        if cost + next_epoch > cap:
            return (f"budget.max_cost_per_trial: spent {fmt_money(cost, self.currency)}, "
                    f"one more epoch ({fmt_money(next_epoch, self.currency)}) would pass "
                    f"{fmt_money(cap, self.currency)}")
        return None
