"""What a trial process's checkpoints used: a running tally of one store's writes.

Pure module; the clock is injected. Every checkpoint's bytes and seconds (write, hash,
upload, manifest, prune), the bytes the store holds over time, and each checkpoint's
seconds (for :func:`hpsearch.recovery.checkpoint.young_daly_epochs`).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Callable

from hpsearch.money.storage import CheckpointUse
from hpsearch.recovery import storage


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
