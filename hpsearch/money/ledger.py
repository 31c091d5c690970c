"""The ledger: rented nodes, each trial's share of them, and the money spent and wasted.

Pure module; time comes from the caller (seconds on any clock that survives the process:
the driver uses wall-clock time so a resumed run can continue the ledger).

:class:`Ledger` is the one record of a run's money. What it records (a node's rental, a
trial's share of it, how that ended) is :mod:`hpsearch.money.ledger_entries`; every
change is an event, applied to the record in memory
(:class:`~hpsearch.money.ledger_book.LedgerBook`) and appended to the ledger's file
(:class:`~hpsearch.money.ledger_file.LedgerFile`); opening a ledger replays its file, so
a run that is continued, or resumed after its driver died, still knows what it spent.
:mod:`hpsearch.money.statement` adds it all up; :mod:`hpsearch.money.ledger_repair` mends
a damaged file.

While anything is rented or billed the driver also appends an ``alive`` event every few
seconds: a driver that dies (SIGKILL, power loss) leaves open intervals and rentals
behind, and the next session closes each at the last moment the ledger knew it running
(the latest event of any kind written while it was open), booking the work since its
last checkpoint as wasted.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpsearch.money.ledger_book import LedgerBook
from hpsearch.money.ledger_entries import ENDED, Interval, Outcome, Rental, TrialMoney
from hpsearch.money.ledger_file import HEADER, LedgerFile
from hpsearch.money.nodes import NodeSpec
from hpsearch.money.pricing import Price

#: Seconds between two ``alive`` events while anything is open (the money a driver
#: killed without warning can leave unbilled: at most this much per open rental).
ALIVE_EVERY_S = 5.0


class Ledger:
    """Rented nodes and billed intervals of every trial of a run, kept in its file.

    Args:
        path: JSON-lines file to append events to and replay from; None keeps the
            ledger in memory only.
        currency: The run's currency; every interval and rental must be in it.

    Raises:
        LedgerCorrupt: A damaged line inside the file.
        LedgerTooNew: The file was written in a newer format.
        CurrencyError: The file holds amounts in another currency than ``currency``.
    """

    def __init__(self, path: str | Path | None = None, currency: str | None = None):
        self.path = Path(path) if path is not None else None
        self.book = LedgerBook(currency)
        self._file = LedgerFile(self.path)
        self._alive_s: float | None = None  # the latest alive event written
        self._file.replay(self.replay_event)
        if self._file.read_version is None and self.book.intervals:
            self._file.read_version = 1  # intervals before any header: format 1

    def replay_event(self, event: dict) -> None:
        """Apply one event read back from a ledger file (its header line included).

        Raises:
            TypeError, KeyError, ValueError, AttributeError: Not a valid event.
            CurrencyError, LedgerTooNew: See the class.
        """
        if isinstance(event, dict) and event.get("event") == HEADER:
            self._file.read_header(event)
        else:
            self.book.apply(event)

    def _record(self, event: dict) -> Any:
        """Apply ``event`` to the book, then append it to the file."""
        result = self.book.apply(event)
        self._file.append(event)
        return result

    @property
    def id(self) -> str | None:
        """The ledger's id (its first line), None until :meth:`ensure_id`."""
        return self._file.id

    @property
    def read_version(self) -> int | None:
        """The format of the file as it was read (None: a new or empty ledger)."""
        return self._file.read_version

    def ensure_id(self) -> str:
        """The ledger's id; a ledger without one (new, or older) gets one written, and an
        older format gets a header of this one (the same id) from here on."""
        return self._file.ensure_id()

    # -- nodes ------------------------------------------------------------------------

    def rent(self, node: NodeSpec, now_s: float) -> Rental:
        """Start billing ``node`` at ``now_s`` (a node already rented stays as it is)."""
        rented = self.book.rental(node.node_id)
        if rented is not None:
            return rented
        self.book.check_currency(node.currency)
        rental = Rental(node.node_id, node.instance, node.spot, node.price_per_hour,
                        node.currency, now_s, cpus=node.cpus, gpus=node.gpus,
                        granularity_s=node.granularity_s, min_billing_s=node.min_billing_s)
        return self._record({"event": "node", **asdict(rental)})

    def release(self, node: str, now_s: float, lost: bool = False) -> Rental | None:
        """Stop billing ``node`` at ``now_s``; ``lost``: it vanished (taken back). Trials
        still billed on it are billed no further than this moment."""
        if self.book.rental(node) is None:
            return None
        return self._record({"event": "release", "node": node, "at_s": now_s, "lost": lost})

    # -- trials -----------------------------------------------------------------------

    def open(self, trial: int, now_s: float, price: Price, node: str | None = None,
             share: float | None = None) -> Interval:
        """Start billing ``trial`` at ``now_s`` (a trial already open stays as it is):
        its ``share`` of rented ``node``, or, without one, at ``price`` on its own."""
        running = self.book.open_interval(trial)
        if running is not None:
            return running
        rental = self.book.rental(node) if node is not None else None
        if rental is not None:
            interval = Interval(trial, rental.instance, rental.spot,
                                rental.price_per_hour * (share or 0.0), rental.currency,
                                now_s, granularity_s=0, min_billing_s=0, node=node,
                                share=float(share or 0.0))
        else:
            self.book.check_currency(price.currency)
            interval = Interval(trial, price.instance, price.spot, price.per_hour,
                                price.currency, now_s,
                                granularity_s=price.billing_granularity_s,
                                min_billing_s=price.min_billing_s)
        return self._record({"event": "open", **asdict(interval)})

    def place(self, trial: int, node: str, share: float) -> bool:
        """Bill ``trial``'s open interval, from its start, as its ``share`` of rented
        ``node`` (once it is known where it landed). False if either is unknown."""
        interval, rental = self.book.open_interval(trial), self.book.rental(node)
        if interval is None or rental is None or (interval.node, interval.share) == (
                node, share):
            return False
        self._record({"event": "place", "trial": trial, "node": node, "share": share})
        return True

    def reprice(self, trial: int, price: Price) -> None:
        """Bill ``trial``'s open interval at ``price`` (a trial billed on its own)."""
        interval = self.book.open_interval(trial)
        if interval is None or interval.node is not None or (
                interval.instance, interval.spot, interval.price_per_hour) == (
                price.instance, price.spot, price.per_hour):
            return
        self.book.check_currency(price.currency)
        self._record({"event": "reprice", "trial": trial, "instance": price.instance,
                      "spot": price.spot, "price_per_hour": price.per_hour,
                      "granularity_s": price.billing_granularity_s,
                      "min_billing_s": price.min_billing_s})

    def startup(self, trial: int, seconds: float) -> None:
        """Record the seconds ``trial``'s open interval spent before its first epoch."""
        interval = self.book.open_interval(trial)
        if interval is None or interval.startup_s is not None:
            return
        self._record({"event": "startup", "trial": trial,
                      "seconds": max(0.0, float(seconds))})

    def checkpoint(self, trial: int, now_s: float) -> None:
        """Record that ``trial`` saved a checkpoint at ``now_s``."""
        if self.book.is_open(trial):
            self._record({"event": "checkpoint", "trial": trial, "at_s": now_s})

    def close(self, trial: int, now_s: float, outcome: Outcome) -> Interval | None:
        """Stop billing ``trial``; ``outcome`` says whether work since the checkpoint is
        lost."""
        if outcome not in ENDED:
            raise ValueError(f"unknown outcome {outcome!r}")
        outcome = Outcome(outcome)
        interval = self.book.open_interval(trial)
        if interval is None:
            return None
        self._record({"event": "close", "trial": trial,
                      "at_s": max(now_s, interval.start_s), "outcome": outcome})
        return interval

    # -- a driver that dies -------------------------------------------------------------

    def alive(self, now_s: float, every_s: float = ALIVE_EVERY_S) -> bool:
        """Record that what is open was still running at ``now_s``.

        Written at most every ``every_s`` seconds, and only while an interval or a
        rental is open (nothing billed, nothing written). Returns whether it was written.
        """
        if not self.book.anything_open():
            return False
        if self._alive_s is not None and now_s - self._alive_s < every_s:
            return False
        self.book.saw(now_s)
        self._file.append({"event": "alive", "at_s": now_s})
        self._alive_s = now_s
        return True

    def close_all(self, now_s: float, outcome: Outcome,
                  at_last_event: bool = False) -> list[int]:
        """Close every open interval, then release every rental; return the trials.

        Args:
            now_s: When they end.
            outcome: How the intervals ended.
            at_last_event: End each at the last moment the ledger knew it running instead
                (the latest event, ``alive`` included, written while it was open): for
                what a driver that died left open, whose real end is unknown. With
                ``outcome`` FAILED the work since its last checkpoint is wasted.
        """
        trials = self.book.open_trials()
        for trial in trials:
            self.close(trial, self.book.last_seen(trial) if at_last_event else now_s,
                       outcome)
        for rental in self.book.rented():
            node = rental.node
            self.release(node, self.book.node_last_seen(node) if at_last_event else now_s)
        return trials

    # -- the record, read -------------------------------------------------------------

    @property
    def intervals(self) -> list[Interval]:
        """Every interval billed, oldest first."""
        return self.book.intervals

    @property
    def rentals(self) -> list[Rental]:
        """Every node rented, oldest first."""
        return self.book.rentals

    @property
    def currency(self) -> str | None:
        """The ledger's currency (None until its first amount)."""
        return self.book.currency

    def rented(self) -> list[Rental]:
        """The rentals still open."""
        return self.book.rented()

    def rental(self, node: str) -> Rental | None:
        """The open rental of ``node``, or None."""
        return self.book.rental(node)

    def is_open(self, trial: int) -> bool:
        return self.book.is_open(trial)

    def open_interval(self, trial: int) -> Interval | None:
        """``trial``'s interval being billed now, or None."""
        return self.book.open_interval(trial)

    def open_trials(self) -> list[int]:
        """Trials being billed now."""
        return self.book.open_trials()

    def last_seen(self, trial: int) -> float | None:
        """The latest moment open interval ``trial`` was known running, or None."""
        return self.book.last_seen(trial)

    def spent(self, now_s: float | None = None, trial: int | None = None) -> float:
        """Money billed so far (:meth:`LedgerBook.spent`)."""
        return self.book.spent(now_s, trial)

    def wasted(self, trial: int | None = None) -> float:
        """Money paid for work that was lost, of one trial or all."""
        return self.book.wasted(trial)

    def trial_money(self, trial: int, now_s: float | None = None) -> TrialMoney | None:
        """One trial's totals, or None if it was never billed."""
        return self.book.trial_money(trial, now_s)

    def trials(self) -> list[int]:
        return self.book.trials()
