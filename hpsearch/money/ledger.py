"""The ledger: rented nodes, each trial's share of them, and the money spent and wasted.

Pure module; time comes from the caller (seconds on any clock that survives the process:
the driver uses wall-clock time so a resumed run can continue the ledger).

A provider bills *nodes* (instances), so the ledger does too. A :class:`Rental` runs from
the moment a node is rented (for a local run: this machine, from the run's start) to the
moment it is released; its billed seconds are its length rounded up to the node's
billing granularity and at least its minimum billing period, applied once per rental.
Each trial is charged its *share* of the node while it runs (an :class:`Interval`: its
reserved GPUs, or CPUs, over the node's, times the node's price, for the seconds it ran,
unrounded). What the node billed beyond the trials' shares is *idle* money. So node money
= trials' shares + idle, and every trial's share splits into work kept and work *wasted*:
if an interval ends in a failure or preemption, the work since its last checkpoint is
lost (a trial preempted 90 s after it started, with its last checkpoint at 60 s, has
30 s x its share's price wasted). :mod:`hpsearch.money.statement` adds it all up.

A ledger written before node billing (format 1) holds intervals without a node: each is
billed on its own, at its own granularity and minimum, as it was then.

The ledger is persisted as JSON lines (one event per line, append-only), so a run that
is continued, or resumed after its driver died, still knows what it spent. While
anything is rented or billed the driver also appends an ``alive`` event every few
seconds: a driver that dies (SIGKILL, power loss) leaves open intervals and rentals
behind, and the next session closes each at the last moment the ledger knew it running
(the latest event of any kind written while it was open), booking the work since its
last checkpoint as wasted. A write that fails (a full disk) is undone, so a half line
never ends up in the middle of the file; a torn line the file holds anyway (another
writer, a damaged copy) is refused with the way out: ``python -m hpsearch repair
RUN_DIR`` (:func:`repair`).

The first line names the ledger (``{"event": "ledger", "id": ..., "version": ...}``):
the study records that id, so a second run dir on a shared study cannot silently start
from zero money. A ledger of a newer format than this hpsearch reads is refused.
"""

from __future__ import annotations

import enum
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from hpsearch import keys
from hpsearch.errors import HpsearchError
from hpsearch.money.nodes import NodeSpec, billed_seconds
from hpsearch.money.pricing import Price

__all__ = ["Outcome", "DONE", "FAILED", "PREEMPTED", "STOPPED", "OPEN", "ALIVE_EVERY_S",
           "FORMAT_VERSION", "CurrencyError", "LedgerCorrupt", "LedgerTooNew",
           "billed_seconds", "Interval", "Rental", "TrialMoney", "Ledger", "Repair",
           "repair"]

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
_LOSES_WORK = (FAILED, PREEMPTED)
_OUTCOMES = (DONE, FAILED, PREEMPTED, STOPPED)


#: Seconds between two ``alive`` events while anything is open (the money a driver
#: killed without warning can leave unbilled: at most this much per open rental).
ALIVE_EVERY_S = 5.0
#: Version of the ledger's event format (written in its header): 1 billed trials'
#: intervals on their own; 2 bills nodes (``node``/``release`` events) and each trial's
#: share of its node (``place``, ``startup``).
FORMAT_VERSION = 2


class CurrencyError(HpsearchError):
    """Amounts in two currencies met in one ledger (bad input: exit code 2)."""

    exit_code = 2


class LedgerCorrupt(HpsearchError):
    """A line inside the ledger is damaged (exit code 2, nothing written).

    The message names the file and line and the way out: ``python -m hpsearch repair
    RUN_DIR`` keeps every valid event, books the gap, and keeps a backup.
    """

    exit_code = 2

    def __init__(self, path: Path, line: int, why: str):
        self.path, self.line = path, line
        run_dir = _shown(path.parent)
        super().__init__(
            f"{_shown(path)}:{line}: corrupt ledger line ({why}); repair it with "
            f"python -m hpsearch repair {run_dir} (it keeps every valid event and a "
            f"backup of the file, and reports what it dropped)")


class LedgerTooNew(HpsearchError):
    """The ledger was written by a newer hpsearch (exit code 2, nothing written)."""

    exit_code = 2

    def __init__(self, path: Path | None, version: object):
        where = _shown(path) if path is not None else "ledger"
        super().__init__(
            f"{where}: written in ledger format {version}, newer than this hpsearch reads "
            f"(formats 1-{FORMAT_VERSION}); upgrade hpsearch to continue this run dir")


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


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


class Ledger:
    """Rented nodes and billed intervals of every trial of a run.

    One class of about 270 lines on purpose: it is the one record of money, so every
    write (open, close, rental, heartbeat) and the replay that reads them back share one
    file format and one fsync'd append path; split, the format would live in two places.

    Args:
        path: JSON-lines file to append events to and replay from; None keeps the
            ledger in memory only.
        currency: The run's currency; every interval and rental must be in it.

    Raises:
        LedgerCorrupt: A damaged line inside the file.
        LedgerTooNew: The file was written in a newer format.
    """

    def __init__(self, path: str | Path | None = None, currency: str | None = None):
        self.path = Path(path) if path is not None else None
        self.currency = currency
        self.intervals: list[Interval] = []
        self.rentals: list[Rental] = []
        #: The ledger's id (its first line), None until :meth:`ensure_id`.
        self.id: str | None = None
        #: The format of the file as it was read (None: a new or empty ledger).
        self.read_version: int | None = None
        self._open: dict[int, Interval] = {}
        self._rented: dict[str, Rental] = {}
        # The latest moment each open interval (by trial) and rental (by node) was known
        # running (any event written while it was open): where a driver that died
        # leaves it closed.
        self._seen: dict[int | str, float] = {}
        self._alive_s: float | None = None  # the latest alive event written
        self._file = _JsonLines(self.path)
        if self.path is not None and self.path.exists():
            _replay(self, self.path.read_bytes())

    def ensure_id(self) -> str:
        """The ledger's id; a ledger without one (new, or older) gets one written, and an
        older format gets a header of this one (the same id) from here on."""
        if self.id is None:
            self.id = uuid.uuid4().hex
            self._write({"event": "ledger", "id": self.id, "version": FORMAT_VERSION})
        elif self.read_version is not None and self.read_version < FORMAT_VERSION:
            self._write({"event": "ledger", "id": self.id, "version": FORMAT_VERSION})
            self.read_version = FORMAT_VERSION
        return self.id

    # -- nodes ------------------------------------------------------------------------

    def rent(self, node: NodeSpec, now_s: float) -> Rental:
        """Start billing ``node`` at ``now_s`` (a node already rented stays as it is)."""
        if node.node_id in self._rented:
            return self._rented[node.node_id]
        self._check_currency(node.currency)
        rental = Rental(node.node_id, node.instance, node.spot, node.price_per_hour,
                        node.currency, now_s, cpus=node.cpus, gpus=node.gpus,
                        granularity_s=node.granularity_s, min_billing_s=node.min_billing_s)
        _add_rental(self, rental)
        self._write({"event": "node", **asdict(rental)})
        return rental

    def release(self, node: str, now_s: float, lost: bool = False) -> Rental | None:
        """Stop billing ``node`` at ``now_s``; ``lost``: it vanished (taken back). Trials
        still billed on it are billed no further than this moment."""
        if node not in self._rented:
            return None
        event = {"event": "release", "node": node, "at_s": now_s, "lost": lost}
        rental = _on_release(self, event)
        self._write(event)
        return rental

    def rented(self) -> list[Rental]:
        """The rentals still open."""
        return list(self._rented.values())

    def rental(self, node: str) -> Rental | None:
        """The open rental of ``node``, or None."""
        return self._rented.get(node)

    # -- trials -----------------------------------------------------------------------

    def open(self, trial: int, now_s: float, price: Price, node: str | None = None,
             share: float | None = None) -> Interval:
        """Start billing ``trial`` at ``now_s`` (a trial already open stays as it is):
        its ``share`` of rented ``node``, or, without one, at ``price`` on its own."""
        if trial in self._open:
            return self._open[trial]
        rental = self._rented.get(node) if node is not None else None
        if rental is not None:
            interval = Interval(trial, rental.instance, rental.spot,
                                rental.price_per_hour * (share or 0.0), rental.currency,
                                now_s, granularity_s=0, min_billing_s=0, node=node,
                                share=float(share or 0.0))
        else:
            self._check_currency(price.currency)
            interval = Interval(trial, price.instance, price.spot, price.per_hour,
                                price.currency, now_s,
                                granularity_s=price.billing_granularity_s,
                                min_billing_s=price.min_billing_s)
        _add_interval(self, interval)
        self._write({"event": "open", **asdict(interval)})
        return interval

    def place(self, trial: int, node: str, share: float) -> bool:
        """Bill ``trial``'s open interval, from its start, as its ``share`` of rented
        ``node`` (once it is known where it landed). False if either is unknown."""
        interval, rental = self._open.get(trial), self._rented.get(node)
        if interval is None or rental is None or (interval.node, interval.share) == (
                node, share):
            return False
        event = {"event": "place", "trial": trial, "node": node, "share": share}
        _on_place(self, event)
        self._write(event)
        return True

    def reprice(self, trial: int, price: Price) -> None:
        """Bill ``trial``'s open interval at ``price`` (a trial billed on its own)."""
        interval = self._open.get(trial)
        if interval is None or interval.node is not None or (
                interval.instance, interval.spot, interval.price_per_hour) == (
                price.instance, price.spot, price.per_hour):
            return
        self._check_currency(price.currency)
        event = {"event": "reprice", "trial": trial, "instance": price.instance,
                 "spot": price.spot, "price_per_hour": price.per_hour,
                 "granularity_s": price.billing_granularity_s,
                 "min_billing_s": price.min_billing_s}
        _on_reprice(self, event)
        self._write(event)

    def startup(self, trial: int, seconds: float) -> None:
        """Record the seconds ``trial``'s open interval spent before its first epoch."""
        interval = self._open.get(trial)
        if interval is None or interval.startup_s is not None:
            return
        interval.startup_s = max(0.0, float(seconds))
        self._write({"event": "startup", "trial": trial, "seconds": interval.startup_s})

    def checkpoint(self, trial: int, now_s: float) -> None:
        """Record that ``trial`` saved a checkpoint at ``now_s``."""
        if trial not in self._open:
            return
        event = {"event": "checkpoint", "trial": trial, "at_s": now_s}
        _on_checkpoint(self, event)
        self._write(event)

    def close(self, trial: int, now_s: float, outcome: Outcome) -> Interval | None:
        """Stop billing ``trial``; ``outcome`` says whether work since the checkpoint is lost."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        outcome = Outcome(outcome)
        interval = self._open.get(trial)
        if interval is None:
            return None
        event = {"event": "close", "trial": trial, "at_s": max(now_s, interval.start_s),
                 "outcome": outcome}
        _on_close(self, event)
        self._write(event)
        return interval

    def alive(self, now_s: float, every_s: float = ALIVE_EVERY_S) -> bool:
        """Record that what is open was still running at ``now_s``.

        Written at most every ``every_s`` seconds, and only while an interval or a
        rental is open (nothing billed, nothing written). Returns whether it was written.
        """
        if not self._open and not self._rented:
            return False
        if self._alive_s is not None and now_s - self._alive_s < every_s:
            return False
        self._saw(now_s)
        self._write({"event": "alive", "at_s": now_s})
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
        trials = list(self._open)
        for trial in trials:
            self.close(trial, self.last_seen(trial) if at_last_event else now_s, outcome)
        for node in list(self._rented):
            self.release(node, self._last(node) if at_last_event else now_s)
        return trials

    def last_seen(self, trial: int) -> float | None:
        """The latest moment open interval ``trial`` was known running, or None."""
        interval = self._open.get(trial)
        if interval is None:
            return None
        known = [interval.start_s, self._seen.get(trial, interval.start_s)]
        if interval.checkpoint_s is not None:
            known.append(interval.checkpoint_s)
        return max(known)

    def _last(self, node: str) -> float:
        rental = self._rented[node]
        return max(rental.start_s, self._seen.get(node, rental.start_s))

    # -- totals -----------------------------------------------------------------------

    def is_open(self, trial: int) -> bool:
        return trial in self._open

    def open_interval(self, trial: int) -> Interval | None:
        """``trial``'s interval being billed now, or None."""
        return self._open.get(trial)

    def open_trials(self) -> list[int]:
        """Trials being billed now."""
        return list(self._open)

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

    # -- internals --------------------------------------------------------------------

    def _select(self, trial: int | None) -> Iterable[Interval]:
        return (i for i in self.intervals if trial is None or i.trial == trial)

    def _check_currency(self, currency: str) -> None:
        if self.currency is None:
            self.currency = currency
        elif currency != self.currency:
            raise CurrencyError(
                f"pricing.currency: this run's ledger is in {self.currency}; "
                f"it cannot also count {currency} (got {currency!r})")

    def _saw(self, at_s: float) -> None:
        """An event at ``at_s``: everything open was running then."""
        for key in (*self._open, *self._rented):
            if at_s > self._seen.get(key, float("-inf")):
                self._seen[key] = at_s

    def _write(self, event: dict) -> None:
        self._file.append(event)

    def _replay_event(self, event: dict) -> None:
        _apply(self, event)


class _JsonLines:
    """An append-only JSON-lines file whose appends never leave half a line."""

    def __init__(self, path: Path | None):
        self.path = path
        self.cut_to: int | None = None  # bytes of complete lines, if a crash cut one

    def append(self, event: dict) -> None:
        if self.path is None:
            return
        data = (json.dumps(event, sort_keys=True) + "\n").encode("utf-8")
        if self.cut_to is not None:
            # Drop the half line a crash left before appending after it.
            with self.path.open("r+b") as f:
                f.truncate(self.cut_to)
            self.cut_to = None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except BaseException:
                # A failed append (disk full, interrupted) must not leave half a line that
                # the next append would bury in the middle of the file.
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)


# -- applying events (live and replayed alike) ---------------------------------------------


def _add_interval(ledger: Ledger, interval: Interval) -> None:
    ledger.intervals.append(interval)
    ledger._open[interval.trial] = interval
    ledger._saw(interval.start_s)


def _add_rental(ledger: Ledger, rental: Rental) -> None:
    ledger.rentals.append(rental)
    ledger._rented[rental.node] = rental
    ledger._saw(rental.start_s)


def _on_open(ledger: Ledger, event: dict) -> None:
    interval = Interval(**event)
    ledger._check_currency(interval.currency)
    _add_interval(ledger, interval)


def _on_node(ledger: Ledger, event: dict) -> None:
    rental = Rental(**event)
    ledger._check_currency(rental.currency)
    _add_rental(ledger, rental)


def _on_release(ledger: Ledger, event: dict) -> Rental | None:
    at_s = float(event["at_s"])
    rental = ledger._rented.pop(str(event["node"]), None)
    if rental is not None:
        rental.end_s = max(at_s, rental.start_s)
        rental.lost = bool(event.get("lost", False))
        ledger._seen.pop(rental.node, None)
        for interval in ledger._open.values():
            if interval.node == rental.node:
                interval.cap_s = rental.end_s
    ledger._saw(at_s)
    return rental


def _on_place(ledger: Ledger, event: dict) -> None:
    interval = ledger._open.get(event["trial"])
    rental = ledger._rented.get(str(event["node"]))
    if interval is None or rental is None:
        return
    share = float(event["share"])
    interval.node, interval.share = rental.node, share
    interval.instance, interval.spot = rental.instance, rental.spot
    interval.price_per_hour = rental.price_per_hour * share
    interval.granularity_s, interval.min_billing_s = 0, 0


def _on_reprice(ledger: Ledger, event: dict) -> None:
    interval = ledger._open.get(event["trial"])
    if interval is not None:
        for name in ("instance", "spot", "price_per_hour", "granularity_s",
                     "min_billing_s"):
            setattr(interval, name, event[name])


def _on_checkpoint(ledger: Ledger, event: dict) -> None:
    at_s = float(event["at_s"])
    if event["trial"] in ledger._open:
        ledger._open[event["trial"]].checkpoint_s = at_s
    ledger._saw(at_s)


def _on_close(ledger: Ledger, event: dict) -> None:
    at_s = float(event["at_s"])
    if event["outcome"] not in _OUTCOMES:
        raise ValueError(f"unknown outcome {event['outcome']!r}")
    interval = ledger._open.pop(event["trial"], None)
    if interval is not None:
        ledger._seen.pop(interval.trial, None)
        interval.end_s = max(at_s, interval.start_s)
        interval.outcome = Outcome(event["outcome"])
    ledger._saw(at_s)


def _on_startup(ledger: Ledger, event: dict) -> None:
    interval = ledger._open.get(event["trial"])
    if interval is not None:
        interval.startup_s = float(event["seconds"])


def _on_header(ledger: Ledger, event: dict) -> None:
    version = event.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"bad version {version!r}")
    if version > FORMAT_VERSION:
        raise LedgerTooNew(ledger.path, version)
    ledger.id = str(event["id"])
    ledger.read_version = version


_HANDLERS = {
    "open": _on_open, "node": _on_node, "release": _on_release, "place": _on_place,
    "reprice": _on_reprice, "checkpoint": _on_checkpoint, "close": _on_close,
    "startup": _on_startup, "ledger": _on_header,
    "alive": lambda ledger, event: ledger._saw(float(event["at_s"])),
}


def _apply(ledger: Ledger, event: dict) -> None:
    if not isinstance(event, dict):
        raise TypeError("not an event")
    kind = event.pop("event")
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown event {kind!r}")
    handler(ledger, event)


def _replay(ledger: Ledger, data: bytes) -> None:
    lines = data.split(b"\n")
    offset = 0
    for n, raw in enumerate(lines, start=1):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            continue
        last = n == len(lines)  # no newline after it: the write never completed
        try:
            _apply(ledger, json.loads(raw))
        except json.JSONDecodeError:
            if last:
                ledger._file.cut_to = start
                break
            raise LedgerCorrupt(ledger.path, n, "not JSON") from None
        except (CurrencyError, LedgerTooNew):
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise LedgerCorrupt(ledger.path, n, _why(exc)) from None
    if ledger.read_version is None and (ledger.intervals or ledger.id is not None):
        ledger.read_version = 1


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _event_time(event: dict) -> float | None:
    for key in ("at_s", "start_s"):
        if isinstance(event.get(key), (int, float)):
            return float(event[key])
    return None


#: Events of one trial that need its open interval (a lost ``open`` is booked for them).
_TRIAL_EVENTS = ("checkpoint", "close", "reprice", "place", "startup")


@dataclass
class Repair:
    """What :func:`repair` did to a ledger file.

    Attributes:
        path: The ledger file.
        dropped: ``(line number, reason, the line's first 80 characters)`` of each line
            that was not a valid event, in file order.
        booked: ``(trial, start_s)`` of each interval whose ``open`` line was lost and
            which was booked from the last event before the damage (its later events
            kept), at the price of the interval billed just before.
        unpriced: Trials with later events but a lost ``open`` and no price to book
            them at (no interval before them): their money is not counted.
        still_open: Trials left open (their ``close`` line may have been lost): the
            next run closes them at the last moment they were known running.
        backup: Where the original file was kept, or None when nothing was changed.
    """

    path: Path
    dropped: list[tuple[int, str, str]] = field(default_factory=list)
    booked: list[tuple[int, float]] = field(default_factory=list)
    unpriced: list[int] = field(default_factory=list)
    still_open: list[int] = field(default_factory=list)
    backup: Path | None = None

    def lines(self) -> list[str]:
        """One line per finding, for the command line."""
        name = _shown(self.path)
        if not self.dropped:
            return [f"{name}: no damaged line; nothing changed"]
        out = [f"{name}:{n}: dropped ({why}): {text}" for n, why, text in self.dropped]
        out += [f"trial {t}: its open event was lost; billed from {start:.3f} (the last "
                f"event before the damage)" for t, start in self.booked]
        out += [f"trial {t}: its open event was lost and no price is known: not billed"
                for t in self.unpriced]
        if self.still_open:
            out.append("open after the repair (closed by the next run at the last moment "
                       f"known running): trial(s) {', '.join(map(str, self.still_open))}")
        kept = "the original kept as " + _shown(self.backup) if self.backup else ""
        out.append(f"{name}: repaired, {len(self.dropped)} line(s) dropped; {kept}")
        return out


def repair(path: str | Path, clock=time.time) -> Repair:
    """Repair a ledger file: keep every valid event, drop damaged lines, book the gap.

    Each line that is not a valid event (not JSON, a torn half line, a missing field) is
    dropped. A later ``checkpoint``/``close``/``reprice`` of a trial with no open
    interval means its ``open`` line was lost: the interval is booked from the time of
    the last valid event before the damage, at the price of the interval billed just
    before (so the money of that trial is not lost). An interval whose ``close`` line
    was lost stays open; the next run closes it at the last moment it was known running.
    The original file is kept beside it (``ledger.jsonl.corrupt-<time>``) and the
    repaired one replaces it atomically. A file without damage is left untouched.

    Args:
        path: The ledger file.
        clock: Seconds (wall clock), for the backup's name.

    Raises:
        FileNotFoundError: No such file.
    """
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    probe = Ledger(None)
    result = Repair(path)
    kept: list[bytes] = []
    last_time: float | None = None
    gap_time: float | None = None  # time of the last valid event before the damage
    damaged = False
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
            if not isinstance(event, dict):
                raise TypeError("not an event")
            check = dict(event)
            if (damaged and check.get("event") in _TRIAL_EVENTS
                    and "trial" in check and not probe.is_open(int(check["trial"]))):
                _book_lost_open(probe, check, gap_time, kept, result)
            probe._replay_event(check)
        except (CurrencyError, LedgerTooNew):
            raise
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError,
                ValueError) as exc:
            why = "not JSON" if isinstance(exc, json.JSONDecodeError) else _why(exc)
            if n == len(lines):
                why += ", torn last line"
            result.dropped.append((n, why, raw[:80].decode("utf-8", "replace")))
            if not damaged or gap_time is None:
                gap_time = last_time
            damaged = True
            continue
        kept.append(raw)
        t = _event_time(event)
        if t is not None:
            last_time = t if last_time is None else max(last_time, t)
    result.still_open = sorted(probe.open_trials())
    if result.dropped:
        result.backup = _replace_keeping_backup(path, kept, clock)
    return result


def _book_lost_open(probe: Ledger, event: dict, gap_time: float | None, kept: list[bytes],
                    result: Repair) -> None:
    """``event`` names a trial with no open interval after the damage: its ``open`` was
    lost; book one from the last valid time before the damage (see :func:`repair`)."""
    trial = int(event["trial"])
    synth = _lost_open(probe, trial, gap_time if gap_time is not None else _event_time(event))
    if synth is None:
        result.unpriced.append(trial)
        return
    probe._replay_event(dict(synth))
    kept.append(json.dumps(synth, sort_keys=True).encode())
    result.booked.append((trial, float(synth["start_s"])))


def _replace_keeping_backup(path: Path, kept: list[bytes], clock) -> Path:
    """Write ``kept`` over ``path`` atomically; the original stays as the returned
    ``<name>.corrupt-<time>`` beside it."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(clock()))
    backup = path.with_name(f"{path.name}.corrupt-{stamp}")
    k = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{k}")
        k += 1
    try:
        os.link(path, backup)  # the original's bytes, untouched, under the new name
    except OSError:
        backup.write_bytes(path.read_bytes())
    tmp = path.with_name(f".{path.name}.repair-{uuid.uuid4().hex}")
    with tmp.open("wb") as f:
        f.write(b"".join(line + b"\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return backup


def _lost_open(probe: Ledger, trial: int, start_s: float | None) -> dict | None:
    """An ``open`` event standing in for a lost one, priced like the interval before
    (its share of the same node, if that node is still rented)."""
    if start_s is None or not probe.intervals:
        return None
    like = probe.intervals[-1]
    node = like.node if like.node is not None and probe.rental(like.node) else None
    return {"event": "open", **asdict(Interval(
        trial, like.instance, like.spot, like.price_per_hour, like.currency, start_s,
        granularity_s=like.granularity_s, min_billing_s=like.min_billing_s, node=node,
        share=like.share if node is not None else 1.0))}
