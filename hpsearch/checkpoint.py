"""Checkpoints you can trust: one trial's checkpoints in a folder of its own.

Pure module (files only; the trial runner supplies a function that writes the payload).

* Atomic: a checkpoint is written into a temporary folder, its files are hashed into a
  ``manifest.json`` (SHA-256 of every file), and the folder is renamed into place in one
  step. A process killed mid-write leaves a temporary folder, never a half checkpoint.
* Verified on load: :meth:`CheckpointStore.latest_valid` re-hashes the newest
  checkpoint's files and falls back to the previous one if they do not match.
* Kept: the last ``keep_last`` checkpoints and the best one by the objective.
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
        self.rejected: list[Path] = []

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
        try:
            manifest = json.loads((entry.path / MANIFEST).read_text())
            return all(_sha256(entry.path / name) == digest
                       for name, digest in manifest["files"].items())
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def latest_valid(self) -> Entry | None:
        """The newest checkpoint that verifies; corrupt newer ones are set aside."""
        for entry in reversed(self.entries()):
            if self.verify(entry):
                return entry
            self.rejected.append(entry.path)
            aside = entry.path.with_name(f".corrupt-{entry.path.name}-{uuid.uuid4().hex[:6]}")
            try:
                os.replace(entry.path, aside)
            except OSError:
                pass
        # A checkpoint with no manifest at all is not a checkpoint; nothing to resume.
        return None

    def best(self) -> Entry | None:
        scored = [e for e in self.entries() if e.metric is not None]
        if not scored:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        return max(scored, key=lambda e: (sign * e.metric, e.epoch))

    def prune(self) -> None:
        """Keep the newest ``keep_last`` checkpoints and the best; remove the rest."""
        entries = self.entries()
        keep = {e.path for e in entries[-self.keep_last:]}
        best = self.best()
        if best is not None:
            keep.add(best.path)
        for entry in entries:
            if entry.path not in keep:
                shutil.rmtree(entry.path, ignore_errors=True)
        for tmp in self.folder.glob(".tmp-*"):
            # Left by a process killed mid-write; no live writer shares this folder.
            shutil.rmtree(tmp, ignore_errors=True)
