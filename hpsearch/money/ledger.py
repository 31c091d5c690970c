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
is continued, or resumed after its driver died, still knows what it spent. While
intervals are open the driver also appends an ``alive`` event every few seconds: a
driver that dies (SIGKILL, power loss) leaves open intervals behind, and the next
session closes each at the last moment the ledger knew it running (the latest event of
any kind written while it was open), booking the work since its last checkpoint as
wasted. A write that fails (a full disk) is undone, so a half line never ends up in the
middle of the file; a torn line the file holds anyway (another writer, a damaged copy)
is refused with the way out: ``python -m hpsearch repair RUN_DIR`` (:func:`repair`).

The first line names the ledger (``{"event": "ledger", "id": ...}``): the study records
that id, so a second run dir on a shared study cannot silently start from zero money.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from hpsearch import keys
from hpsearch.errors import HpsearchError
from hpsearch.money.pricing import Price

#: How an interval ended.
DONE, FAILED, PREEMPTED, STOPPED, OPEN = "done", "failed", "preempted", "stopped", "open"
_LOSES_WORK = (FAILED, PREEMPTED)


#: Seconds between two ``alive`` events while intervals are open (the money a driver
#: killed without warning can leave unbilled: at most this much per open interval).
ALIVE_EVERY_S = 5.0
#: Version of the ledger's event format (written in its first line).
FORMAT_VERSION = 1


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


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


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
        #: The ledger's id (its first line), None until :meth:`ensure_id`.
        self.id: str | None = None
        self._open: dict[int, Interval] = {}
        # The latest moment each open interval was known running (any event written
        # while it was open): where a driver that died leaves it closed.
        self._seen: dict[int, float] = {}
        self._alive_s: float | None = None  # the latest alive event written
        self._cut_to: int | None = None  # bytes of complete lines, if a crash cut one
        if self.path is not None and self.path.exists():
            self._replay(self.path.read_bytes())

    def ensure_id(self) -> str:
        """The ledger's id; a ledger without one (new, or older) gets one written."""
        if self.id is None:
            self.id = uuid.uuid4().hex
            self._write({"event": "ledger", "id": self.id, "version": FORMAT_VERSION})
        return self.id

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

    def alive(self, now_s: float, every_s: float = ALIVE_EVERY_S) -> bool:
        """Record that the open intervals were still running at ``now_s``.

        Written at most every ``every_s`` seconds, and only while an interval is open
        (an idle driver writes nothing). Returns whether an event was written.
        """
        if not self._open:
            return False
        if self._alive_s is not None and now_s - self._alive_s < every_s:
            return False
        self._saw(now_s)
        self._write({"event": "alive", "at_s": now_s})
        self._alive_s = now_s
        return True

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
        self._saw(now_s)
        self._write({"event": "checkpoint", "trial": trial, "at_s": now_s})

    def close(self, trial: int, now_s: float, outcome: str) -> Interval | None:
        """Stop billing ``trial``; ``outcome`` says whether work since the checkpoint is lost."""
        if outcome not in (DONE, FAILED, PREEMPTED, STOPPED):
            raise ValueError(f"unknown outcome {outcome!r}")
        interval = self._open.pop(trial, None)
        if interval is None:
            return None
        self._seen.pop(trial, None)
        interval.end_s = max(now_s, interval.start_s)
        interval.outcome = outcome
        self._saw(interval.end_s)
        self._write({"event": "close", "trial": trial, "at_s": interval.end_s,
                     "outcome": outcome})
        return interval

    def close_all(self, now_s: float, outcome: str, at_last_event: bool = False) -> list[int]:
        """Close every open interval; return the trials.

        Args:
            now_s: When the intervals end.
            outcome: How they ended.
            at_last_event: End each at the last moment the ledger knew it running instead
                (the latest event, ``alive`` included, written while it was open): for
                intervals left open by a driver that died, whose real end is unknown.
                With ``outcome`` FAILED the work since its last checkpoint is wasted.
        """
        trials = list(self._open)
        for trial in trials:
            end = self.last_seen(trial) if at_last_event else now_s
            self.close(trial, end, outcome)
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
        self._saw(interval.start_s)

    def _saw(self, at_s: float) -> None:
        """An event at ``at_s``: every open interval was running then."""
        for trial in self._open:
            if at_s > self._seen.get(trial, float("-inf")):
                self._seen[trial] = at_s

    def _write(self, event: dict) -> None:
        if self.path is None:
            return
        data = (json.dumps(event, sort_keys=True) + "\n").encode("utf-8")
        if self._cut_to is not None:
            # Drop the half line a crash left before appending after it.
            with self.path.open("r+b") as f:
                f.truncate(self._cut_to)
            self._cut_to = None
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
                raise LedgerCorrupt(self.path, n, "not JSON") from None
            except CurrencyError:
                raise
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise LedgerCorrupt(self.path, n, _why(exc)) from None

    def _replay_event(self, event: dict) -> None:
        if not isinstance(event, dict):
            raise TypeError("not an event")
        kind = event.pop("event")
        if kind == "open":
            interval = Interval(**event)
            self._check_currency(interval.currency)
            self._apply(interval)
        elif kind == "checkpoint":
            at_s = float(event["at_s"])
            if event["trial"] in self._open:
                self._open[event["trial"]].checkpoint_s = at_s
            self._saw(at_s)
        elif kind == "alive":
            self._saw(float(event["at_s"]))
        elif kind == "ledger":
            self.id = str(event["id"])
        elif kind == "reprice":
            interval = self._open.get(event["trial"])
            if interval is not None:
                for name in ("instance", "spot", "price_per_hour", "granularity_s",
                             "min_billing_s"):
                    setattr(interval, name, event[name])
        elif kind == "close":
            at_s = float(event["at_s"])
            if event["outcome"] not in (DONE, FAILED, PREEMPTED, STOPPED):
                raise ValueError(f"unknown outcome {event['outcome']!r}")
            if event["trial"] in self._open:
                interval = self._open.pop(event["trial"])
                self._seen.pop(event["trial"], None)
                interval.end_s = at_s
                interval.outcome = event["outcome"]
            self._saw(at_s)
        else:
            raise ValueError(f"unknown event {kind!r}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _event_time(event: dict) -> float | None:
    for key in ("at_s", "start_s"):
        if isinstance(event.get(key), (int, float)):
            return float(event[key])
    return None


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
            if (damaged and check.get("event") in ("checkpoint", "close", "reprice")
                    and "trial" in check and not probe.is_open(int(check["trial"]))):
                synth = _lost_open(probe, int(check["trial"]),
                                   gap_time if gap_time is not None else _event_time(check))
                if synth is None:
                    result.unpriced.append(int(check["trial"]))
                else:
                    probe._replay_event(dict(synth))
                    kept.append(json.dumps(synth, sort_keys=True).encode())
                    result.booked.append((int(check["trial"]), float(synth["start_s"])))
            probe._replay_event(check)
        except CurrencyError:
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
    if not result.dropped:
        return result
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
    result.backup = backup
    return result


def _lost_open(probe: Ledger, trial: int, start_s: float | None) -> dict | None:
    """An ``open`` event standing in for a lost one, priced like the interval before."""
    if start_s is None or not probe.intervals:
        return None
    like = probe.intervals[-1]
    return {"event": "open", **asdict(Interval(
        trial, like.instance, like.spot, like.price_per_hour, like.currency, start_s,
        granularity_s=like.granularity_s, min_billing_s=like.min_billing_s))}
