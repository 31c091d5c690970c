"""Checkpoints you can trust: one trial's checkpoints in a folder of its own.

Pure module (files only; the trial runner supplies a function that writes the payload).

* Atomic: a checkpoint is written into a temporary folder, its files are hashed into a
  ``manifest.json`` (SHA-256 of every file), and the folder is renamed into place in one
  step. A process killed mid-write leaves a temporary folder, never a half checkpoint.
* Verified on load: :meth:`CheckpointStore.latest_valid` re-hashes the newest
  checkpoint's files and, when they match, asks the caller's ``check`` (the trial
  runner's: does it load as data, with the keys Lightning needs?). A checkpoint that
  fails either is set aside as ``.corrupt-epoch-NNNNNN-<id>/`` (with ``rejected.json``
  saying why) and the previous one is tried.
* Kept: the last ``keep_last`` checkpoints and the best one by the objective. Folders
  set aside are pruned like checkpoints of their epoch: once ``keep_last`` newer valid
  checkpoints exist, they go.
* Interval: :func:`young_daly_epochs` sets how many epochs go between checkpoints from
  the cost of one checkpoint and the mean time between preemptions.

The folder lives under the run dir (``checkpoints/trial-NNNN/``), so a trial restarted
after a preemption, on any node that shares the run dir, or by a resumed driver, finds
it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MANIFEST = "manifest.json"
PREFIX = "epoch-"
#: Prefix of a checkpoint folder set aside because it failed verification.
CORRUPT_PREFIX = ".corrupt-"
#: The note inside a folder set aside: why it was.
REJECTED_NOTE = "rejected.json"


@dataclass(frozen=True)
class Entry:
    """One stored checkpoint.

    Attributes:
        epoch: Epochs completed when it was taken.
        path: Its folder.
        metric: The objective at that epoch, if known.
        meta: What the writer recorded beside it.
    """

    epoch: int
    path: Path
    metric: float | None
    meta: dict[str, Any]


@dataclass(frozen=True)
class Rejected:
    """A checkpoint :meth:`CheckpointStore.latest_valid` set aside.

    Attributes:
        name: Its folder's name when it was found (``epoch-000004``).
        epoch: Epochs it claimed to hold.
        reason: Why it was rejected (``checksum mismatch``, or the check's reason).
        aside: Where it was moved (None if it could not be moved).
    """

    name: str
    epoch: int
    reason: str
    aside: Path | None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    """A trial's checkpoints.

    Args:
        folder: The trial's checkpoint folder (created on first save).
        keep_last: Newest checkpoints kept (besides the best).
        mode: ``max`` or ``min``: which objective value is the best.
    """

    def __init__(self, folder: str | Path, keep_last: int = 2, mode: str = "max"):
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        self.folder = Path(folder)
        self.keep_last = keep_last
        self.mode = mode
        self.rejected: list[Rejected] = []

    def save(self, epoch: int, write: Callable[[Path], None], metric: float | None = None,
             meta: dict[str, Any] | None = None) -> Entry:
        """Write a checkpoint for ``epoch``: ``write(folder)`` fills a temporary folder,
        which is hashed and renamed into place atomically; older ones are pruned."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            write(tmp)
            files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
            manifest = {"epoch": epoch, "metric": metric, "files": files,
                        "meta": meta or {}, "written_at": time.time()}
            with (tmp / MANIFEST).open("w") as f:
                json.dump(manifest, f)
                f.flush()
                os.fsync(f.fileno())
            final = self.folder / f"{PREFIX}{epoch:06d}"
            if final.exists():  # a restarted trial reached this epoch again
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        entry = Entry(epoch, final, metric, meta or {})
        self.prune()
        return entry

    def mark_preempted(self, attempt: str, epoch: int, reason: str) -> None:
        """Leave a note that attempt ``attempt`` (a Ray trial id) ended by preemption."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"preempted-{attempt}.json").write_text(
            json.dumps({"epoch": epoch, "reason": reason, "at": time.time()}))

    def preempted(self, attempt: str) -> dict[str, Any] | None:
        """The note left by :meth:`mark_preempted` for ``attempt``, if any."""
        try:
            return json.loads((self.folder / f"preempted-{attempt}.json").read_text())
        except (OSError, ValueError):
            return None

    def entries(self) -> list[Entry]:
        """Stored checkpoints with a readable manifest, oldest first (not verified)."""
        out = []
        if not self.folder.is_dir():
            return out
        for path in sorted(self.folder.glob(f"{PREFIX}*")):
            try:
                manifest = json.loads((path / MANIFEST).read_text())
                out.append(Entry(int(manifest["epoch"]), path, manifest.get("metric"),
                                 manifest.get("meta", {})))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(out, key=lambda e: e.epoch)

    def verify(self, entry: Entry) -> bool:
        """Whether every file of ``entry`` is present and hashes as its manifest says."""
        return self.problem(entry) is None

    def problem(self, entry: Entry) -> str | None:
        """Why ``entry``'s files do not match its manifest, or None when they do."""
        try:
            manifest = json.loads((entry.path / MANIFEST).read_text())
            files = manifest["files"]
            for name, digest in files.items():
                if not (entry.path / name).is_file():
                    return f"{name} is missing"
                if _sha256(entry.path / name) != digest:
                    return f"checksum mismatch in {name}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return f"unreadable manifest ({type(exc).__name__})"
        return None

    def latest_valid(self, check: Callable[[Entry], str | None] | None = None
                     ) -> Entry | None:
        """The newest checkpoint that verifies; newer ones that do not are set aside.

        Args:
            check: Called with each checkpoint whose checksums match; returns why it
                cannot be used (it does not load, keys are missing) or None. Checkpoints
                it rejects are set aside like corrupt ones.

        Every checkpoint set aside is appended to :attr:`rejected` (newest first).
        """
        for entry in reversed(self.entries()):
            reason = self.problem(entry)
            if reason is None and check is not None:
                reason = check(entry)
            if reason is None:
                return entry
            self._set_aside(entry, reason)
        # A checkpoint with no manifest at all is not a checkpoint; nothing to resume.
        return None

    def _set_aside(self, entry: Entry, reason: str) -> None:
        aside: Path | None = entry.path.with_name(
            f"{CORRUPT_PREFIX}{entry.path.name}-{uuid.uuid4().hex[:6]}")
        try:
            os.replace(entry.path, aside)
            (aside / REJECTED_NOTE).write_text(json.dumps(
                {"checkpoint": entry.path.name, "epoch": entry.epoch, "reason": reason,
                 "at": time.time()}))
        except OSError:
            if not aside.exists():
                aside = None
        self.rejected.append(Rejected(entry.path.name, entry.epoch, reason, aside))

    def best(self) -> Entry | None:
        scored = [e for e in self.entries() if e.metric is not None]
        if not scored:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        return max(scored, key=lambda e: (sign * e.metric, e.epoch))

    def prune(self) -> None:
        """Keep the newest ``keep_last`` checkpoints and the best; remove the rest.

        Folders set aside go once their epoch is older than every kept newest
        checkpoint (they are kept a while for a look, never for ever), and temporary
        folders left by a writer that died go at once.
        """
        entries = self.entries()
        newest = entries[-self.keep_last:]
        keep = {e.path for e in newest}
        best = self.best()
        if best is not None:
            keep.add(best.path)
        for entry in entries:
            if entry.path not in keep:
                shutil.rmtree(entry.path, ignore_errors=True)
        if len(newest) >= self.keep_last:
            oldest_kept = newest[0].epoch
            for aside in self.folder.glob(f"{CORRUPT_PREFIX}*"):
                epoch = _aside_epoch(aside)
                if epoch is None or epoch < oldest_kept:
                    shutil.rmtree(aside, ignore_errors=True)
        for tmp in self.folder.glob(".tmp-*"):
            # Left by a process killed mid-write; no live writer shares this folder.
            shutil.rmtree(tmp, ignore_errors=True)


def _aside_epoch(path: Path) -> int | None:
    """The epoch of a folder set aside (``.corrupt-epoch-000004-1a2b3c`` -> 4)."""
    name = path.name[len(CORRUPT_PREFIX):]
    if not name.startswith(PREFIX):
        return None
    try:
        return int(name[len(PREFIX):].split("-", 1)[0])
    except ValueError:
        return None
