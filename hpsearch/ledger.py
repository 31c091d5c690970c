"""The ledger: billed intervals per trial, and the money spent and wasted.

Pure module; time comes from the caller (seconds on any clock that survives the process:
the driver uses wall-clock time so a resumed run can continue the ledger).

Billed time is not progress time. An interval runs from the moment a trial's process
starts working until it ends. Its billed seconds are its length rounded up to the
billing granularity, and at least the minimum billing period. Money is billed seconds x
price. If an interval ends in a failure or preemption, the work since its last
checkpoint is lost: that part is *wasted* (it is also spent). Example: a trial
preempted 90 s after it started, with its last checkpoint at 60 s, has 30 s x price
wasted.

The ledger is persisted as JSON lines (one event per line, append-only), so a run that
is continued, or resumed after its driver died, still knows what it spent.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from hpsearch import keys
from hpsearch.errors import HpsearchError
from hpsearch.pricing import Price

#: How an interval ended.
DONE, FAILED, PREEMPTED, STOPPED, OPEN = "done", "failed", "preempted", "stopped", "open"
_LOSES_WORK = (FAILED, PREEMPTED)


class CurrencyError(HpsearchError):
    """Amounts in two currencies met in one ledger (bad input: exit code 2)."""

    exit_code = 2


def billed_seconds(length_s: float, granularity_s: int, min_billing_s: int) -> float:
    """Seconds billed for an interval of ``length_s``: rounded up to a multiple of
    ``granularity_s`` (0: not rounded, e.g. a simulated worker), and at least
    ``min_billing_s``."""
    length = max(0.0, length_s)
    if granularity_s <= 0:
        return float(max(min_billing_s, length))
    rounded = math.ceil(length / granularity_s - 1e-9) * granularity_s
    return float(max(min_billing_s, rounded))


@dataclass
class Interval:
    """One stretch of billed time of one trial on one instance.

    Attributes:
        trial: The trial's number (the Optuna trial number).
        instance: ``provider:instance`` it ran on.
        spot: Whether it was billed at the spot price.
        price_per_hour: Price of this trial-hour.
        currency: ISO currency code.
        start_s: When billing started.
        end_s: When it stopped, or None while open.
        checkpoint_s: The latest checkpoint inside the interval, or None.
        outcome: ``open``, ``done``, ``stopped``, ``failed`` or ``preempted``.
        granularity_s: Billed time is rounded up to a multiple of this.
        min_billing_s: Least billed time.
    """

    trial: int
    instance: str
    spot: bool
    price_per_hour: float
    currency: str
    start_s: float
    end_s: float | None = None
    checkpoint_s: float | None = None
    outcome: str = OPEN
    granularity_s: int = 1
    min_billing_s: int = 0

    def billed_s(self, now_s: float | None = None) -> float:
        """Billed seconds (an open interval is billed up to ``now_s``)."""
        end = self.end_s if self.end_s is not None else (now_s if now_s is not None
                                                          else self.start_s)
        return billed_seconds(end - self.start_s, self.granularity_s, self.min_billing_s)

    def cost(self, now_s: float | None = None) -> float:
        return self.billed_s(now_s) * self.price_per_hour / 3600.0

    def wasted_s(self) -> float:
        """Seconds of work lost: after the last checkpoint of an interval that failed."""
        if self.outcome not in _LOSES_WORK or self.end_s is None:
            return 0.0
        kept_until = self.checkpoint_s if self.checkpoint_s is not None else self.start_s
        return max(0.0, self.end_s - kept_until)

    def wasted_cost(self) -> float:
        return self.wasted_s() * self.price_per_hour / 3600.0


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

    def attrs(self) -> dict:
        """The Optuna user attributes (keys from :mod:`hpsearch.keys`)."""
        return {keys.ATTR_COST: self.cost, keys.ATTR_WASTED_COST: self.wasted_cost,
                keys.ATTR_BILLED_S: self.billed_s, keys.ATTR_INSTANCE: self.instance,
                keys.ATTR_SPOT: self.spot, keys.ATTR_CURRENCY: self.currency,
                keys.ATTR_SPOT_COST: self.spot_cost}


class Ledger:
    """Billed intervals of every trial of a run.

    Args:
        path: JSON-lines file to append events to and replay from; None keeps the
            ledger in memory only.
        currency: The run's currency; every interval must be in it.
    """

    def __init__(self, path: str | Path | None = None, currency: str | None = None):
        self.path = Path(path) if path is not None else None
        self.currency = currency
        self.intervals: list[Interval] = []
        self._open: dict[int, Interval] = {}
        self._cut_to: int | None = None  # bytes of complete lines, if a crash cut one
        if self.path is not None and self.path.exists():
            self._replay(self.path.read_bytes())

    # -- events -----------------------------------------------------------------------

    def open(self, trial: int, now_s: float, price: Price) -> Interval:
        """Start billing ``trial`` at ``now_s`` (a trial already open stays as it is)."""
        if trial in self._open:
            return self._open[trial]
        self._check_currency(price.currency)
        interval = Interval(trial, price.instance, price.spot, price.per_hour, price.currency,
                            now_s, granularity_s=price.billing_granularity_s,
                            min_billing_s=price.min_billing_s)
        self._apply(interval)
        self._write({"event": "open", **asdict(interval)})
        return interval

    def reprice(self, trial: int, price: Price) -> None:
        """Bill ``trial``'s open interval at ``price`` (once it is known which node, and
        so which instance and kind, the trial landed on)."""
        interval = self._open.get(trial)
        if interval is None or (interval.instance, interval.spot, interval.price_per_hour) == (
                price.instance, price.spot, price.per_hour):
            return
        self._check_currency(price.currency)
        interval.instance, interval.spot = price.instance, price.spot
        interval.price_per_hour = price.per_hour
        interval.granularity_s = price.billing_granularity_s
        interval.min_billing_s = price.min_billing_s
        self._write({"event": "reprice", "trial": trial, "instance": price.instance,
                     "spot": price.spot, "price_per_hour": price.per_hour,
                     "granularity_s": price.billing_granularity_s,
                     "min_billing_s": price.min_billing_s})

    def checkpoint(self, trial: int, now_s: float) -> None:
        """Record that ``trial`` saved a checkpoint at ``now_s``."""
        interval = self._open.get(trial)
        if interval is None:
            return
        interval.checkpoint_s = now_s
        self._write({"event": "checkpoint", "trial": trial, "at_s": now_s})

    def close(self, trial: int, now_s: float, outcome: str) -> Interval | None:
        """Stop billing ``trial``; ``outcome`` says whether work since the checkpoint is lost."""
        if outcome not in (DONE, FAILED, PREEMPTED, STOPPED):
            raise ValueError(f"unknown outcome {outcome!r}")
        interval = self._open.pop(trial, None)
        if interval is None:
            return None
        interval.end_s = max(now_s, interval.start_s)
        interval.outcome = outcome
        self._write({"event": "close", "trial": trial, "at_s": interval.end_s,
                     "outcome": outcome})
        return interval

    def close_all(self, now_s: float, outcome: str, at_last_event: bool = False) -> list[int]:
        """Close every open interval; return the trials.

        Args:
            now_s: When the intervals end.
            outcome: How they ended.
            at_last_event: End each at its last recorded event (its latest checkpoint, or
                its start) instead: for intervals left open by a driver that died, whose
                real end is unknown.
        """
        trials = list(self._open)
        for trial in trials:
            interval = self._open[trial]
            end = now_s
            if at_last_event:
                end = interval.checkpoint_s if interval.checkpoint_s is not None else interval.start_s
            self.close(trial, end, outcome)
        return trials

    # -- totals -----------------------------------------------------------------------

    def is_open(self, trial: int) -> bool:
        return trial in self._open

    def open_trials(self) -> list[int]:
        """Trials being billed now."""
        return list(self._open)

    def spent(self, now_s: float | None = None, trial: int | None = None) -> float:
        """Money billed so far (open intervals up to ``now_s``), of one trial or all."""
        return sum(i.cost(now_s) for i in self._select(trial))

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

    def _apply(self, interval: Interval) -> None:
        self.intervals.append(interval)
        self._open[interval.trial] = interval

    def _write(self, event: dict) -> None:
        if self.path is None:
            return
        if self._cut_to is not None:
            # Drop the half line a crash left before appending after it.
            with self.path.open("r+b") as f:
                f.truncate(self._cut_to)
            self._cut_to = None
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")

    def _replay(self, data: bytes) -> None:
        lines = data.split(b"\n")
        offset = 0
        for n, raw in enumerate(lines, start=1):
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            last = n == len(lines)  # no newline after it: the write never completed
            try:
                self._replay_event(json.loads(raw))
            except json.JSONDecodeError:
                if last:
                    self._cut_to = start
                    break
                raise HpsearchError(f"{self.path}:{n}: corrupt ledger line") from None
            except CurrencyError:
                raise
            except (KeyError, TypeError, AttributeError, ValueError):
                raise HpsearchError(f"{self.path}:{n}: corrupt ledger line") from None

    def _replay_event(self, event: dict) -> None:
        kind = event.pop("event")
        if kind == "open":
            interval = Interval(**event)
            self._check_currency(interval.currency)
            self._apply(interval)
        elif kind == "checkpoint":
            if event["trial"] in self._open:
                self._open[event["trial"]].checkpoint_s = float(event["at_s"])
        elif kind == "reprice":
            interval = self._open.get(event["trial"])
            if interval is not None:
                for name in ("instance", "spot", "price_per_hour", "granularity_s",
                             "min_billing_s"):
                    setattr(interval, name, event[name])
        elif kind == "close":
            if event["trial"] in self._open:
                interval = self._open.pop(event["trial"])
                interval.end_s = float(event["at_s"])
                interval.outcome = event["outcome"]
        else:
            raise ValueError(kind)
