"""Checkpoints you can trust: one trial's checkpoints in a folder of its own, on any
storage (this machine's disk, a disk every node mounts, an object store).

Pure module (files only; the trial runner supplies a function that writes the payload;
the storage operations are :class:`hpsearch.recovery.storage.Files`). One protocol for
every storage, since an object store has no rename; :class:`CheckpointStore` is its one
entry point, each step a module of its own:

* Laid out (:mod:`~hpsearch.recovery.checkpoint_layout`): a checkpoint of epoch E is its
  files in a folder of their own (``epoch-00000E-<token>/``) and its manifest
  ``epoch-00000E.json`` (SHA-256 and size of every file). A checkpoint without a valid
  manifest does not exist.
* Atomic (:mod:`~hpsearch.recovery.checkpoint_write`): the files are written first, the
  manifest last and whole (one PUT on an object store; temporary file, fsync and rename
  on a disk): a writer killed before the manifest leaves files that nothing refers to,
  and the next prune deletes them. Writing epoch E again replaces its manifest in one
  step; the old files are then unreferenced and go too.
* Verified on load (:mod:`~hpsearch.recovery.checkpoint_load`):
  :meth:`CheckpointStore.latest_valid` brings the newest checkpoint's files to this
  machine, verified, and asks the caller's ``check`` about them; a checkpoint that fails
  either is set aside (a note ``.corrupt-epoch-00000E-<id>.json``, then its manifest
  deleted), and the previous one is tried.
* Kept (:mod:`~hpsearch.recovery.checkpoint_retention`): the last ``keep_last``
  checkpoints and the best one by the objective. Notes set aside (and their files) are
  pruned like checkpoints of their epoch: once ``keep_last`` newer valid checkpoints
  exist, they go.
* Measured (:mod:`~hpsearch.recovery.checkpoint_usage`): every checkpoint's bytes and
  seconds, the requests the storage bills, and the bytes the store holds over time
  (:meth:`CheckpointStore.usage`), for the report's storage money, and each checkpoint's
  seconds (:meth:`CheckpointStore.checkpoint_s`) for :func:`young_daly_epochs`.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint_layout import Entry, read_json, scan
from hpsearch.recovery.checkpoint_load import Loader, Rejected
from hpsearch.recovery.checkpoint_retention import Retention
from hpsearch.recovery.checkpoint_usage import CheckpointUse, UsageTally
from hpsearch.recovery.checkpoint_write import write_checkpoint


def young_daly_epochs(checkpoint_s: float, mtbp_s: float | None, epoch_s: float,
                      max_epochs: int) -> int:
    """Epochs between checkpoints: sqrt(2 x checkpoint cost x mean time between
    preemptions), in whole epochs, at least 1 and at most ``max_epochs``.

    With no preemptions expected (``mtbp_s`` None or infinite) every epoch is kept:
    checkpoints also serve budget stops and driver restarts.
    """
    if not mtbp_s or not math.isfinite(mtbp_s) or epoch_s <= 0:
        return 1
    interval_s = math.sqrt(2.0 * max(checkpoint_s, 0.0) * mtbp_s)
    return int(min(max_epochs, max(1, round(interval_s / epoch_s))))


class CheckpointStore:
    """A trial's checkpoints: written, verified on load, pruned and measured (see the
    module docstring).

    Args:
        folder: The trial's checkpoint folder: a local path, a storage URL (see
            :func:`hpsearch.spec.storage_url.parse_url`) or a
            :class:`~hpsearch.recovery.storage.Location` (created on first save).
        keep_last: Newest checkpoints kept (besides the best).
        mode: ``max`` or ``min``: which objective value is the best.
        clock: Monotonic seconds (what checkpoints take, how long bytes are held).

    Raises:
        ValueError: ``keep_last`` below 1.
    """

    def __init__(self, folder: str | Path | storage.Location, keep_last: int = 2,
                 mode: str = "max", clock: Callable[[], float] = time.monotonic):
        self.retention = Retention(keep_last, mode)
        if not isinstance(folder, storage.Location):
            folder = storage.open_location(str(folder))
        self.files = storage.Files(folder)
        self.clock = clock
        self.loader = Loader(self.files)
        self.tally = UsageTally(clock)

    @property
    def folder(self) -> Path | None:
        """The trial's folder on this machine's disk (None on an object store)."""
        return self.files.local

    @property
    def url(self) -> str:
        """Where the trial's checkpoints are, as a path or URL."""
        return self.files.location.url

    @property
    def rejected(self) -> list[Rejected]:
        """Every checkpoint :meth:`latest_valid` set aside, newest first."""
        return self.loader.rejected

    def save(self, epoch: int, write: Callable[[Path], None], metric: float | None = None,
             meta: dict[str, Any] | None = None) -> Entry:
        """Write a checkpoint for ``epoch``: ``write(folder)`` fills a local folder with
        its files, which are hashed and stored, then the manifest; older ones are
        pruned. An exception from ``write`` (or the storage) leaves no checkpoint."""
        started = self.clock()
        entry, written = write_checkpoint(self.files, epoch, write, metric, meta)
        self.prune()
        self.tally.saved(written, self.clock() - started)
        return entry

    def mark_preempted(self, attempt: str, epoch: int, reason: str) -> None:
        """Leave a note that attempt ``attempt`` (a Ray trial id) ended by preemption."""
        self.files.write(f"preempted-{attempt}.json", json.dumps(
            {"epoch": epoch, "reason": reason, "at": time.time()}).encode())

    def preempted(self, attempt: str) -> dict[str, Any] | None:
        """The note left by :meth:`mark_preempted` for ``attempt``, if any."""
        return read_json(self.files, f"preempted-{attempt}.json")

    def entries(self) -> list[Entry]:
        """Stored checkpoints with a readable manifest, oldest first (not verified)."""
        return scan(self.files).entries

    def fetch(self, entry: Entry, scratch: Path | None = None) -> tuple[Entry, str | None]:
        """``entry`` with a verified local copy of its files (see
        :meth:`~hpsearch.recovery.checkpoint_load.Loader.fetch`), and None; or why its
        files cannot be used."""
        return self.loader.fetch(entry, scratch)

    def latest_valid(self, check: Callable[[Entry], str | None] | None = None,
                     scratch: Path | None = None) -> Entry | None:
        """The newest checkpoint that verifies, with its files on this machine
        (``Entry.local``); newer ones that do not are set aside (appended to
        :attr:`rejected`). ``check`` and ``scratch``: see
        :meth:`~hpsearch.recovery.checkpoint_load.Loader.newest_valid`."""
        entries = self.entries()
        found = self.loader.newest_valid(entries, check, scratch)
        if found is not None:
            # Those set aside are held no more; those older than it are.
            self.tally.hold(sum(e.size for e in entries if e.epoch <= found.epoch))
        return found

    def prune(self) -> None:
        """Keep the newest ``keep_last`` checkpoints and the best; remove the rest (see
        :mod:`~hpsearch.recovery.checkpoint_retention`)."""
        self.tally.hold(self.retention.prune(self.files))

    def usage(self) -> CheckpointUse:
        """What this store's checkpoints cost this process so far: checkpoints, bytes
        and seconds written, the storage's billed requests, the bytes held now and bytes
        held times seconds up to this call."""
        return self.tally.usage(self.files.requests)

    def checkpoint_s(self) -> float | None:
        """The median seconds of one checkpoint written by this process, or None."""
        return self.tally.checkpoint_s()

    def close(self) -> None:
        """Remove this process's downloads."""
        self.loader.close()
