"""The ledger's book: every rental and interval of a run in memory, changed only by
events, and the totals read from it.

Pure module. The same events change the book whether they are written now or replayed
from the ledger's file (:class:`~hpsearch.money.ledger.Ledger` does both), so a replayed
book is the book that was written. It also keeps the latest moment each open interval
and rental was known running (any event while it was open): where a driver that died
leaves it closed.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from hpsearch.errors import HpsearchError
from hpsearch.money.ledger_entries import ENDED, Interval, Outcome, Rental, TrialMoney


class CurrencyError(HpsearchError):
    """Amounts in two currencies met in one ledger (bad input: exit code 2)."""

    exit_code = 2


class LedgerBook:
    """Rented nodes and billed intervals of every trial of a run.

    Args:
        currency: The run's currency (None: the first amount's); every interval and
            rental must be in it.
    """

    def __init__(self, currency: str | None = None):
        self.currency = currency
        self.intervals: list[Interval] = []
        self.rentals: list[Rental] = []
        self._open: dict[int, Interval] = {}
        self._rented: dict[str, Rental] = {}
        # The latest moment each open interval (by trial) and rental (by node) was known
        # running (any event while it was open).
        self._seen: dict[int | str, float] = {}
        self._handlers: dict[str, Callable[[dict], Any]] = {
            "open": self._on_open, "node": self._on_node, "release": self._on_release,
            "place": self._on_place, "reprice": self._on_reprice,
            "checkpoint": self._on_checkpoint, "close": self._on_close,
            "startup": self._on_startup, "alive": lambda e: self.saw(float(e["at_s"])),
        }

    def apply(self, event: dict) -> Any:
        """Apply one event (``{"event": kind, ...}``); a release returns its rental.

        Raises:
            TypeError, KeyError, ValueError, AttributeError: Not a valid event.
            CurrencyError: An amount in another currency than the book's.
        """
        if not isinstance(event, dict):
            raise TypeError("not an event")
        fields = dict(event)
        handler = self._handlers.get(fields.pop("event"))
        if handler is None:
            raise ValueError(f"unknown event {event['event']!r}")
        return handler(fields)

    def check_currency(self, currency: str) -> None:
        """Refuse an amount in another currency (the first one sets the book's)."""
        if self.currency is None:
            self.currency = currency
        elif currency != self.currency:
            raise CurrencyError(
                f"pricing.currency: this run's ledger is in {self.currency}; "
                f"it cannot also count {currency} (got {currency!r})")

    # -- events -----------------------------------------------------------------------

    def saw(self, at_s: float) -> None:
        """An event at ``at_s``: everything open was running then."""
        for key in (*self._open, *self._rented):
            if at_s > self._seen.get(key, float("-inf")):
                self._seen[key] = at_s

    def _on_open(self, event: dict) -> Interval:
        interval = Interval(**event)
        self.check_currency(interval.currency)
        self.intervals.append(interval)
        self._open[interval.trial] = interval
        self.saw(interval.start_s)
        return interval

    def _on_node(self, event: dict) -> Rental:
        rental = Rental(**event)
        self.check_currency(rental.currency)
        self.rentals.append(rental)
        self._rented[rental.node] = rental
        self.saw(rental.start_s)
        return rental

    def _on_release(self, event: dict) -> Rental | None:
        at_s = float(event["at_s"])
        rental = self._rented.pop(str(event["node"]), None)
        if rental is not None:
            rental.end_s = max(at_s, rental.start_s)
            rental.lost = bool(event.get("lost", False))
            self._seen.pop(rental.node, None)
            for interval in self._open.values():
                if interval.node == rental.node:
                    interval.cap_s = rental.end_s
        self.saw(at_s)
        return rental

    def _on_place(self, event: dict) -> None:
        interval = self._open.get(event["trial"])
        rental = self._rented.get(str(event["node"]))
        if interval is None or rental is None:
            return
        share = float(event["share"])
        interval.node, interval.share = rental.node, share
        interval.instance, interval.spot = rental.instance, rental.spot
        interval.price_per_hour = rental.price_per_hour * share
        interval.granularity_s, interval.min_billing_s = 0, 0

    def _on_reprice(self, event: dict) -> None:
        interval = self._open.get(event["trial"])
        if interval is not None:
            for name in ("instance", "spot", "price_per_hour", "granularity_s",
                         "min_billing_s"):
                setattr(interval, name, event[name])

    def _on_checkpoint(self, event: dict) -> None:
        at_s = float(event["at_s"])
        if event["trial"] in self._open:
            self._open[event["trial"]].checkpoint_s = at_s
        self.saw(at_s)

    def _on_close(self, event: dict) -> None:
        at_s = float(event["at_s"])
        if event["outcome"] not in ENDED:
            raise ValueError(f"unknown outcome {event['outcome']!r}")
        interval = self._open.pop(event["trial"], None)
        if interval is not None:
            self._seen.pop(interval.trial, None)
            interval.end_s = max(at_s, interval.start_s)
            interval.outcome = Outcome(event["outcome"])
        self.saw(at_s)

    def _on_startup(self, event: dict) -> None:
        interval = self._open.get(event["trial"])
        if interval is not None:
            interval.startup_s = float(event["seconds"])

    # -- what is open -----------------------------------------------------------------

    def rented(self) -> list[Rental]:
        """The rentals still open."""
        return list(self._rented.values())

    def rental(self, node: str) -> Rental | None:
        """The open rental of ``node``, or None."""
        return self._rented.get(node)

    def is_open(self, trial: int) -> bool:
        return trial in self._open

    def open_interval(self, trial: int) -> Interval | None:
        """``trial``'s interval being billed now, or None."""
        return self._open.get(trial)

    def open_trials(self) -> list[int]:
        """Trials being billed now."""
        return list(self._open)

    def anything_open(self) -> bool:
        """Whether any interval or rental is open."""
        return bool(self._open or self._rented)

    def last_seen(self, trial: int) -> float | None:
        """The latest moment open interval ``trial`` was known running, or None."""
        interval = self._open.get(trial)
        if interval is None:
            return None
        known = [interval.start_s, self._seen.get(trial, interval.start_s)]
        if interval.checkpoint_s is not None:
            known.append(interval.checkpoint_s)
        return max(known)

    def node_last_seen(self, node: str) -> float:
        """The latest moment open rental ``node`` was known rented."""
        rental = self._rented[node]
        return max(rental.start_s, self._seen.get(node, rental.start_s))

    # -- totals -----------------------------------------------------------------------

    def spent(self, now_s: float | None = None, trial: int | None = None) -> float:
        """Money billed so far (what is open, up to ``now_s``), of one trial or all.

        All: every rental as its provider bills it, plus the intervals billed on their
        own (no node: a format-1 ledger); one trial: its shares.
        """
        if trial is not None:
            return sum(i.cost(now_s) for i in self._select(trial))
        return (sum(r.cost(now_s) for r in self.rentals)
                + sum(i.cost(now_s) for i in self.intervals if i.node is None))

    def wasted(self, trial: int | None = None) -> float:
        """Money paid for work that was lost, of one trial or all."""
        return sum(i.wasted_cost() for i in self._select(trial))

    def trial_money(self, trial: int, now_s: float | None = None) -> TrialMoney | None:
        """One trial's totals, or None if it was never billed."""
        intervals = list(self._select(trial))
        if not intervals:
            return None
        last = intervals[-1]
        return TrialMoney(
            cost=sum(i.cost(now_s) for i in intervals),
            wasted_cost=sum(i.wasted_cost() for i in intervals),
            billed_s=sum(i.billed_s(now_s) for i in intervals),
            instance=last.instance, spot=last.spot, currency=last.currency,
            spot_cost=sum(i.cost(now_s) for i in intervals if i.spot),
            share=last.share if last.node is not None else None,
        )

    def trials(self) -> list[int]:
        return sorted({i.trial for i in self.intervals})

    def _select(self, trial: int | None) -> Iterable[Interval]:
        return (i for i in self.intervals if trial is None or i.trial == trial)
