"""Mending a damaged ledger file: keep every valid event, drop damaged lines, book the gap.

Pure module (files only). ``python -m hpsearch repair RUN_DIR`` runs :func:`repair` on a
ledger its run refused (:class:`~hpsearch.money.ledger_file.LedgerCorrupt`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpsearch.errors import HpsearchError
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import Interval
from hpsearch.money.ledger_file import line_error, shown


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
        name = shown(self.path)
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
        kept = "the original kept as " + shown(self.backup) if self.backup else ""
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
    scan = _Scan(Repair(path))
    for n, raw in enumerate(lines, start=1):
        if raw.strip():
            scan.read(n, raw, last=n == len(lines))
    result = scan.result
    result.still_open = sorted(scan.probe.open_trials())
    if result.dropped:
        result.backup = _replace_keeping_backup(path, scan.kept, clock)
    return result


class _Scan:
    """A ledger file's lines read in order (see :func:`repair`): the valid events replayed
    and kept, the damaged lines dropped, and when the damage began."""

    def __init__(self, result: Repair):
        self.probe = Ledger(None)
        self.result = result
        self.kept: list[bytes] = []
        self.last_time: float | None = None
        self.gap_time: float | None = None  # time of the last valid event before the damage
        self.damaged = False

    def read(self, n: int, raw: bytes, last: bool) -> None:
        """Line ``n`` (``last``: the file's last line, maybe torn): kept or dropped."""
        try:
            event = self._replay(raw)
        except HpsearchError:  # another currency, a newer format: not a damaged line
            raise
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError,
                ValueError) as exc:
            self._drop(n, raw, exc, last)
            return
        self.kept.append(raw)
        t = _event_time(event)
        if t is not None:
            self.last_time = t if self.last_time is None else max(self.last_time, t)

    def _replay(self, raw: bytes) -> dict:
        """The line's event, replayed (after booking the ``open`` the damage lost)."""
        event = json.loads(raw)
        if not isinstance(event, dict):
            raise TypeError("not an event")
        check = dict(event)
        if (self.damaged and check.get("event") in _TRIAL_EVENTS
                and "trial" in check and not self.probe.is_open(int(check["trial"]))):
            _book_lost_open(self.probe, check, self.gap_time, self.kept, self.result)
        self.probe.replay_event(check)
        return event

    def _drop(self, n: int, raw: bytes, exc: Exception, last: bool) -> None:
        """Drop a damaged line, saying why; the damage begins at the first one."""
        why = "not JSON" if isinstance(exc, json.JSONDecodeError) else line_error(exc)
        if last:
            why += ", torn last line"
        self.result.dropped.append((n, why, raw[:80].decode("utf-8", "replace")))
        if not self.damaged or self.gap_time is None:
            self.gap_time = self.last_time
        self.damaged = True


def _book_lost_open(probe: Ledger, event: dict, gap_time: float | None, kept: list[bytes],
                    result: Repair) -> None:
    """``event`` names a trial with no open interval after the damage: its ``open`` was
    lost; book one from the last valid time before the damage (see :func:`repair`)."""
    trial = int(event["trial"])
    synth = _lost_open(probe, trial, gap_time if gap_time is not None else _event_time(event))
    if synth is None:
        result.unpriced.append(trial)
        return
    probe.replay_event(dict(synth))
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
