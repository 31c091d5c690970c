"""Billing: what a run's events put in the ledger (nodes rented, each trial's share).

Pure module; the clock is injected. :class:`Billing` turns what happens (a node joins or
vanishes, a trial starts, lands on a node, reports an epoch, ends) into the
:class:`~hpsearch.money.ledger.Ledger`'s entries, and knows what one second of each
trial costs as billed. Without rented nodes (a run the caller never tells of one) each
trial is billed on its own at the run's price, as before node billing.
"""

from __future__ import annotations

from typing import Callable, Sequence

from hpsearch.money.ledger import ALIVE_EVERY_S, Ledger
from hpsearch.money.ledger_entries import Outcome, Rental
from hpsearch.money.nodes import Demand, NodeSpec
from hpsearch.money.pricing import Price

#: Least seconds between two reads of the node list by :meth:`Billing.heartbeat`.
NODE_SYNC_S = 2.0


class Billing:
    """Bills a run's nodes and its trials' shares of them into the ledger.

    Args:
        price: The run's price: a trial-hour, for a trial billed on its own.
        ledger: The run's ledger.
        clock: Seconds; wall-clock time in the driver (the ledger outlives processes).
        demand: What one trial reserves: its share of a node follows from it.
    """

    def __init__(self, price: Price, ledger: Ledger, clock: Callable[[], float],
                 demand: Demand):
        self.price = price
        self.ledger = ledger
        self.clock = clock
        self.demand = demand
        #: Trials admitted that wait for a worker (counted as committed).
        self.pending: set[int] = set()
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

    # -- trials -----------------------------------------------------------------------

    def trial_admitted(self, trial: int) -> None:
        """A trial was created and waits for a worker (counted as committed)."""
        self.pending.add(trial)

    def trial_started(self, trial: int, node: str | None = None) -> None:
        """A process took ``trial`` on ``node`` (None: not known yet; it is billed on a
        rented node it fits, and moved by :meth:`trial_placed` once known)."""
        self.pending.discard(trial)
        self._open(trial, self.clock(), node)

    def _open(self, trial: int, at_s: float, node: str | None) -> None:
        rental = self._rental_for(node)
        if rental is None:
            interval = self.ledger.open(trial, at_s, self.price)
        else:
            interval = self.ledger.open(trial, at_s, self.price, rental.node,
                                        self.demand.share(rental.spec()))
        self._rates[trial] = interval.price_per_hour / 3600.0

    def _rental_for(self, node: str | None) -> Rental | None:
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

    def epoch_billed(self, trial: int, epoch_time_s: float, startup_s: float | None,
                     checkpointed: bool) -> None:
        """``trial`` finished an epoch of ``epoch_time_s`` seconds (a trial not billed yet
        is billed from the epoch's start); ``checkpointed``: work up to now can no longer
        be lost; ``startup_s``: the seconds its process spent before its first epoch."""
        if not self.ledger.is_open(trial):
            self._open(trial, self.clock() - max(0.0, epoch_time_s), None)
        if startup_s is not None:
            self.ledger.startup(trial, startup_s)
        if checkpointed:
            self.ledger.checkpoint(trial, self.clock())

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
        self.pending.discard(trial)
        now = self.clock()
        if saved:
            self.ledger.checkpoint(trial, now)
        self.ledger.close(trial, now, outcome)

    def per_s(self, trial: int | None) -> float:
        """What one second of ``trial`` costs: its share as billed, else the run's price."""
        if trial is not None and trial in self._rates:
            return self._rates[trial]
        return self.price.per_second
