"""What a trial's checkpoints used: the one record of it, and one store's running tally.

Pure module; the clock is injected. The record is a fact about checkpoints; its money is
:mod:`hpsearch.money.storage`'s, which reads it
(:func:`hpsearch.money.storage.storage_cost`).

Each trial process reports what its checkpoints used so far (:class:`CheckpointUse`, the
``hps_ckpt_*`` result keys), counted by its store's :class:`UsageTally`: every
checkpoint's bytes and seconds (write, hash, upload, manifest, prune), the requests the
storage bills, the bytes the store holds over time, and each checkpoint's seconds (for
:func:`hpsearch.recovery.checkpoint.young_daly_epochs`). A restarted trial is a new
process whose figures start from zero, so the driver keeps each attempt's latest figures
and :func:`combine` adds them up (the bytes held now are the latest attempt's); the
study keeps the sum (``hps_ckpt_*`` user attributes).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from hpsearch import keys
from hpsearch.recovery import storage
from hpsearch.scalars import finite


@dataclass(frozen=True)
class CheckpointUse:
    """What a trial's checkpoints used (one attempt's, or all its attempts' combined).

    One attempt's is its store's running tally
    (:meth:`hpsearch.recovery.checkpoint.CheckpointStore.usage`).

    Attributes:
        checkpoints: Checkpoints written.
        bytes_written: Bytes uploaded or written (files and manifests).
        seconds: Seconds spent checkpointing: write, hash, upload, manifest, prune
            (billed trial time).
        writes: Write-class requests (PUT, POST, COPY, LIST) to an object store.
        reads: Read-class requests (GET, HEAD).
        stored_bytes: Bytes its checkpoints hold now.
        byte_s: Bytes held times seconds while it ran.
    """

    checkpoints: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    writes: int = 0
    reads: int = 0
    stored_bytes: int = 0
    byte_s: float = 0.0


_RESULT_KEYS = (keys.CKPT_COUNT, keys.CKPT_BYTES, keys.CKPT_S, keys.CKPT_WRITES,
                keys.CKPT_READS, keys.CKPT_STORED_BYTES, keys.CKPT_BYTE_S)
_ATTR_KEYS = (keys.ATTR_CKPT_COUNT, keys.ATTR_CKPT_BYTES, keys.ATTR_CKPT_S,
              keys.ATTR_CKPT_WRITES, keys.ATTR_CKPT_READS, keys.ATTR_CKPT_STORED_BYTES,
              keys.ATTR_CKPT_BYTE_S)
_FIELDS = ("checkpoints", "bytes_written", "seconds", "writes", "reads", "stored_bytes",
           "byte_s")
_INTS = ("checkpoints", "bytes_written", "writes", "reads", "stored_bytes")


def _read(values: Mapping[str, Any], names: tuple[str, ...]) -> CheckpointUse | None:
    if not any(n in values for n in names):
        return None
    got = {}
    for field, name in zip(_FIELDS, names):
        value = finite(values.get(name)) or 0.0
        got[field] = int(value) if field in _INTS else float(value)
    return CheckpointUse(**got)


def _write(use: CheckpointUse, names: tuple[str, ...]) -> dict[str, float]:
    return {name: getattr(use, field) for field, name in zip(_FIELDS, names)}


def from_result(result: Mapping[str, Any]) -> CheckpointUse | None:
    """The :class:`CheckpointUse` a trial result carries (``hps_ckpt_*``), or None."""
    return _read(result, _RESULT_KEYS)


def to_result(use: CheckpointUse) -> dict[str, float]:
    return _write(use, _RESULT_KEYS)


def from_attrs(attrs: Mapping[str, Any]) -> CheckpointUse | None:
    """A trial's combined :class:`CheckpointUse` from its Optuna attributes, or None."""
    return _read(attrs, _ATTR_KEYS)


def to_attrs(use: CheckpointUse) -> dict[str, float]:
    return _write(use, _ATTR_KEYS)


def combine(uses: Iterable[CheckpointUse]) -> CheckpointUse:
    """All attempts of a trial: sums, and the bytes held now of the latest (last) one."""
    uses = list(uses)
    if not uses:
        return CheckpointUse()
    total = {f: sum(getattr(u, f) for u in uses) for f in _FIELDS if f != "stored_bytes"}
    return CheckpointUse(**total, stored_bytes=uses[-1].stored_bytes)


class UsageTally:
    """The running tally of one checkpoint store in this process.

    Args:
        clock: Monotonic seconds (how long bytes are held).
    """

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._use = CheckpointUse()
        self._save_s: list[float] = []  # each checkpoint's seconds, for checkpoint_s
        self._held_since: float | None = None

    def saved(self, written: int, seconds: float) -> None:
        """A checkpoint was written: ``written`` bytes in ``seconds``."""
        use = self._use
        self._use = replace(use, checkpoints=use.checkpoints + 1,
                            bytes_written=use.bytes_written + written,
                            seconds=use.seconds + seconds)
        self._save_s.append(seconds)

    def hold(self, stored: int) -> None:
        """The store holds ``stored`` bytes from now on (what it held until now is
        counted, in bytes x seconds, at the bytes held before)."""
        now = self.clock()
        use = self._use
        byte_s = use.byte_s
        if self._held_since is not None:
            byte_s += use.stored_bytes * (now - self._held_since)
        self._held_since = now
        self._use = replace(use, byte_s=byte_s, stored_bytes=stored)

    def usage(self, requests: storage.Requests) -> CheckpointUse:
        """The tally up to now, with the storage's billed ``requests`` (a snapshot: later
        checkpoints change the next one, not this)."""
        if self._held_since is not None:
            self.hold(self._use.stored_bytes)
        return replace(self._use, writes=requests.writes, reads=requests.reads)

    def checkpoint_s(self) -> float | None:
        """The median seconds of one checkpoint written in this process, or None."""
        return statistics.median(self._save_s) if self._save_s else None
