"""Checkpoints you can trust: one trial's checkpoints in a folder of its own, on any
storage (this machine's disk, a disk every node mounts, an object store).

Pure module (files only; the trial runner supplies a function that writes the payload;
the storage operations are :class:`hpsearch.recovery.storage.Files`). One protocol for
every storage, since an object store has no rename:

* Atomic: a checkpoint of epoch E is its files, written first into a folder of their
  own (``epoch-00000E-<token>/``), then its manifest ``epoch-00000E.json`` (SHA-256 and
  size of every file), written last and whole (one PUT on an object store; temporary
  file, fsync and rename on a disk). A checkpoint without a valid manifest does not
  exist: a writer killed before the manifest leaves files that nothing refers to, and
  the next prune deletes them. Writing epoch E again replaces its manifest in one step;
  the old files are then unreferenced and go too.
* Verified on load: :meth:`CheckpointStore.latest_valid` brings the newest checkpoint's
  files to this machine (a download from an object store, hashed on the way; on a disk
  it hashes them where they are) and, when they match, asks the caller's ``check`` (the
  trial runner's: does it load as data, with the keys Lightning needs?) about that local
  copy. A checkpoint that fails either is set aside: a note
  ``.corrupt-epoch-00000E-<id>.json`` (its manifest and why it was rejected) is written,
  then its manifest is deleted, and the previous one is tried.
* Kept: the last ``keep_last`` checkpoints and the best one by the objective. Notes set
  aside (and their files) are pruned like checkpoints of their epoch: once ``keep_last``
  newer valid checkpoints exist, they go.
* Measured: every checkpoint's bytes and seconds (write, hash, upload, manifest), the
  requests the storage bills, and the bytes the store holds over time
  (:meth:`CheckpointStore.usage`, a :class:`hpsearch.money.storage.CheckpointUse`), for
  the report's storage money, and each checkpoint's seconds
  (:meth:`CheckpointStore.checkpoint_s`) for :func:`young_daly_epochs`.

Folders ``epoch-00000E/`` holding their own ``manifest.json`` (the layout of hpsearch
before object stores) are read as checkpoints too, so a run dir from then resumes.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from hpsearch.money.storage import CheckpointUse
from hpsearch.recovery import storage
from hpsearch.spec.config import mode_sign

#: The manifest inside an old-layout checkpoint folder.
MANIFEST = "manifest.json"
PREFIX = "epoch-"
#: Prefix of a note that sets a checkpoint aside because it failed verification.
CORRUPT_PREFIX = ".corrupt-"
#: Version of the manifest's format.
FORMAT = 2

_MANIFEST_RE = re.compile(r"^epoch-(\d{6,})\.json$")
_DATA_RE = re.compile(r"^epoch-(\d{6,})-[0-9a-f]+$")
_LEGACY_RE = re.compile(r"^epoch-(\d{6,})$")
_ASIDE_RE = re.compile(r"^\.corrupt-epoch-(\d{6,})-[0-9a-f]+\.json$")
_OLD_ASIDE_RE = re.compile(r"^\.corrupt-epoch-(\d{6,})-[0-9a-f]+$")


@dataclass(frozen=True)
class Entry:
    """One stored checkpoint.

    Attributes:
        epoch: Epochs completed when it was taken.
        metric: The objective at that epoch, if known.
        meta: What the writer recorded beside it.
        files: ``{file name: {"sha256": ..., "bytes": ...}}``.
        data: Its files' folder, relative to the trial's folder.
        manifest: Its manifest's name, relative to the trial's folder.
        local: A folder on this machine holding its files (its own folder on a local
            store; a verified download otherwise), once :meth:`CheckpointStore.latest_valid`
            returned it; else None.
    """

    epoch: int
    metric: float | None
    meta: dict[str, Any]
    files: dict[str, dict[str, Any]]
    data: str
    manifest: str
    local: Path | None = None

    @property
    def name(self) -> str:
        """``epoch-000004``: how messages name it."""
        return f"{PREFIX}{self.epoch:06d}"

    @property
    def path(self) -> Path | None:
        """The local folder holding its files (see ``local``)."""
        return self.local

    @property
    def size(self) -> int:
        """Bytes of its files (0 for an old-layout manifest, which recorded none)."""
        return sum(int(f.get("bytes") or 0) for f in self.files.values())


@dataclass(frozen=True)
class Rejected:
    """A checkpoint :meth:`CheckpointStore.latest_valid` set aside.

    Attributes:
        name: The checkpoint's name (``epoch-000004``).
        epoch: Epochs it claimed to hold.
        reason: Why it was rejected (``checksum mismatch in trial.ckpt``, or the check's).
        aside: The name of the note that sets it aside (None if it could not be written).
    """

    name: str
    epoch: int
    reason: str
    aside: str | None


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


def _entry(manifest: dict[str, Any], data: str, name: str) -> Entry:
    files = manifest["files"]
    if not isinstance(files, dict):
        raise TypeError("files")
    # The old layout's manifest maps each name to its digest alone.
    files = {k: (v if isinstance(v, dict) else {"sha256": v}) for k, v in files.items()}
    metric = manifest.get("metric")
    return Entry(int(manifest["epoch"]), None if metric is None else float(metric),
                 dict(manifest.get("meta") or {}), files, data, name)


class CheckpointStore:
    """A trial's checkpoints.

    Past the project's ~250-line rule for a class, on purpose: it is one storage
    protocol (write the files, the manifest last; verify on load, fall back, keep the
    last K and the best, delete the rest) whose steps share the folder's listing and
    the manifest format; each method is short.

    Args:
        folder: The trial's checkpoint folder: a local path, a storage URL (see
            :func:`hpsearch.spec.storage_url.parse_url`) or a
            :class:`~hpsearch.recovery.storage.Location` (created on first save).
        keep_last: Newest checkpoints kept (besides the best).
        mode: ``max`` or ``min``: which objective value is the best.
        clock: Monotonic seconds (what checkpoints take, how long bytes are held).
    """

    def __init__(self, folder: str | Path | storage.Location, keep_last: int = 2,
                 mode: str = "max", clock: Callable[[], float] = time.monotonic):
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        if not isinstance(folder, storage.Location):
            folder = storage.open_location(str(folder))
        self.files = storage.Files(folder)
        self.keep_last = keep_last
        self.mode = mode
        self.clock = clock
        self.rejected: list[Rejected] = []
        self._use = CheckpointUse()
        self._save_s: list[float] = []  # each checkpoint's seconds, for checkpoint_s
        self._held_since: float | None = None
        self._scratch: Path | None = None

    @property
    def folder(self) -> Path | None:
        """The trial's folder on this machine's disk (None on an object store)."""
        return self.files.local

    @property
    def url(self) -> str:
        """Where the trial's checkpoints are, as a path or URL."""
        return self.files.location.url

    # -- writing ------------------------------------------------------------------------

    def save(self, epoch: int, write: Callable[[Path], None], metric: float | None = None,
             meta: dict[str, Any] | None = None) -> Entry:
        """Write a checkpoint for ``epoch``: ``write(folder)`` fills a local folder with
        its files, which are hashed and stored, then the manifest; older ones are
        pruned. An exception from ``write`` (or the storage) leaves no checkpoint."""
        started = self.clock()
        data = f"{PREFIX}{epoch:06d}-{uuid.uuid4().hex[:8]}"
        local = self.files.local
        staging = local / data if local is not None else Path(
            tempfile.mkdtemp(prefix="hps-ckpt-"))
        written = 0
        try:
            staging.mkdir(parents=True, exist_ok=True)
            write(staging)
            files = {}
            for path in sorted(p for p in staging.iterdir() if p.is_file()):
                files[path.name] = {"sha256": storage.sha256_file(path),
                                    "bytes": path.stat().st_size}
                if local is None:
                    self.files.upload(path, f"{data}/{path.name}")
                written += files[path.name]["bytes"]
            manifest = {"format": FORMAT, "epoch": epoch, "metric": metric, "files": files,
                        "data": data, "meta": meta or {}, "written_at": time.time()}
            body = json.dumps(manifest).encode()
            self.files.write(f"{PREFIX}{epoch:06d}.json", body)
            written += len(body)
        except BaseException:
            if local is None:
                self._quietly(lambda: self.files.delete_dir(data))
            else:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            if local is None:
                shutil.rmtree(staging, ignore_errors=True)
        entry = _entry(manifest, data, f"{PREFIX}{epoch:06d}.json")
        self.prune()
        seconds = self.clock() - started
        use = self._use
        self._use = replace(use, checkpoints=use.checkpoints + 1,
                            bytes_written=use.bytes_written + written,
                            seconds=use.seconds + seconds)
        self._save_s.append(seconds)
        return replace(entry, local=local / data if local is not None else None)

    def mark_preempted(self, attempt: str, epoch: int, reason: str) -> None:
        """Leave a note that attempt ``attempt`` (a Ray trial id) ended by preemption."""
        self.files.write(f"preempted-{attempt}.json", json.dumps(
            {"epoch": epoch, "reason": reason, "at": time.time()}).encode())

    def preempted(self, attempt: str) -> dict[str, Any] | None:
        """The note left by :meth:`mark_preempted` for ``attempt``, if any."""
        try:
            data = self.files.read(f"preempted-{attempt}.json")
            return None if data is None else json.loads(data)
        except (OSError, ValueError):
            return None

    # -- reading ------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Stored checkpoints with a readable manifest, oldest first (not verified)."""
        return self._scan()[0]

    def _scan(self) -> tuple[list[Entry], list[tuple[str, int, str]], list[storage.Item]]:
        """``(entries, notes set aside as (name, epoch, data folder), everything else)``
        of the trial's folder, from one listing."""
        by_epoch: dict[int, Entry] = {}
        legacy: dict[int, Entry] = {}
        notes, others = [], []
        for item in self.files.list():
            if not item.is_dir and _MANIFEST_RE.match(item.name):
                found = self._read_manifest(item.name, None)
                if found is not None:
                    by_epoch[found.epoch] = found
            elif item.is_dir and _LEGACY_RE.match(item.name):
                found = self._read_manifest(f"{item.name}/{MANIFEST}", item.name)
                if found is not None:
                    legacy[found.epoch] = found
                else:
                    others.append(item)
            elif not item.is_dir and _ASIDE_RE.match(item.name):
                note = self._read_json(item.name) or {}
                notes.append((item.name, int(_ASIDE_RE.match(item.name).group(1)),
                              str(note.get("data", ""))))
            elif item.is_dir and _OLD_ASIDE_RE.match(item.name):
                # The old layout set a checkpoint aside by renaming its folder.
                notes.append((item.name, int(_OLD_ASIDE_RE.match(item.name).group(1)),
                              item.name))
            else:
                others.append(item)
        for epoch, entry in legacy.items():
            by_epoch.setdefault(epoch, entry)  # a manifest of the new layout wins
        return sorted(by_epoch.values(), key=lambda e: e.epoch), notes, others

    def _read_json(self, name: str) -> dict[str, Any] | None:
        try:
            data = self.files.read(name)
            return None if data is None else json.loads(data)
        except (OSError, ValueError):
            return None

    def _read_manifest(self, name: str, legacy_dir: str | None) -> Entry | None:
        manifest = self._read_json(name)
        try:
            data = legacy_dir if legacy_dir is not None else str(manifest["data"])
            return _entry(manifest, data, name)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # no valid manifest: no checkpoint

    def problem(self, entry: Entry) -> str | None:
        """Why ``entry``'s files do not match its manifest, or None when they do
        (verifies its local copy: its own folder on a local store)."""
        folder = entry.local if entry.local is not None else (
            self.files.local / entry.data if self.files.local is not None else None)
        if folder is None:
            return "not fetched to this machine"
        for name, info in entry.files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if storage.sha256_file(path) != info.get("sha256"):
                return f"checksum mismatch in {name}"
        return None

    def verify(self, entry: Entry) -> bool:
        """Whether every file of ``entry`` is present and hashes as its manifest says."""
        return self.problem(entry) is None

    def fetch(self, entry: Entry, scratch: Path | None = None) -> tuple[Entry, str | None]:
        """``entry`` with a verified local copy of its files, and None; or why its files
        cannot be used. A local store's own folder is verified where it is; otherwise
        the files are downloaded into ``scratch`` (default: a folder of the store's own,
        removed by :meth:`close`), replacing an earlier download."""
        if self.files.local is not None:
            local = replace(entry, local=self.files.local / entry.data)
            return local, self.problem(local)
        if scratch is None:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="hps-resume-"))
            scratch = self._scratch
        for old in scratch.iterdir() if scratch.is_dir() else ():
            shutil.rmtree(old, ignore_errors=True)  # one resume copy is enough
        folder = scratch / entry.data
        for name, info in entry.files.items():
            digest = self.files.download(f"{entry.data}/{name}", folder / name)
            if digest is None:
                return entry, f"{name} is missing"
            if digest != info.get("sha256"):
                return entry, f"checksum mismatch in {name}"
        return replace(entry, local=folder), None

    def latest_valid(self, check: Callable[[Entry], str | None] | None = None,
                     scratch: Path | None = None) -> Entry | None:
        """The newest checkpoint that verifies, with its files on this machine
        (``Entry.local``); newer ones that do not are set aside.

        Args:
            check: Called with each checkpoint whose checksums match (its local copy);
                returns why it cannot be used (it does not load, keys are missing) or
                None. Checkpoints it rejects are set aside like corrupt ones.
            scratch: Where downloads go (see :meth:`fetch`).

        Every checkpoint set aside is appended to :attr:`rejected` (newest first).
        """
        entries = self.entries()
        while entries:
            entry = entries.pop()
            fetched, reason = self.fetch(entry, scratch)
            if reason is None and check is not None:
                reason = check(fetched)
            if reason is None:
                self._hold(sum(e.size for e in entries) + entry.size)
                return fetched
            self._set_aside(entry, reason)
        # A checkpoint with no manifest at all is not a checkpoint; nothing to resume.
        return None

    def _set_aside(self, entry: Entry, reason: str) -> None:
        """Note why, then delete the manifest: the checkpoint stops existing in one step,
        its files stay (named by the note) until the note is pruned."""
        name = f"{CORRUPT_PREFIX}{entry.name}-{uuid.uuid4().hex[:6]}.json"
        note = {"checkpoint": entry.name, "epoch": entry.epoch, "reason": reason,
                "at": time.time(), "data": entry.data, "files": entry.files,
                "metric": entry.metric, "meta": entry.meta}
        aside: str | None = name
        try:
            self.files.write(name, json.dumps(note).encode())
        except OSError:
            aside = None
        try:
            self.files.delete(entry.manifest)
        except OSError:
            pass
        self.rejected.append(Rejected(entry.name, entry.epoch, reason, aside))

    def best(self, entries: list[Entry] | None = None) -> Entry | None:
        """The checkpoint with the best objective (the newest among equals)."""
        scored = [e for e in (self.entries() if entries is None else entries)
                  if e.metric is not None]
        if not scored:
            return None
        sign = mode_sign(self.mode)
        return max(scored, key=lambda e: (sign * e.metric, e.epoch))

    # -- pruning and accounting ---------------------------------------------------------

    def prune(self) -> None:
        """Keep the newest ``keep_last`` checkpoints and the best; remove the rest.

        Notes set aside (and their files) go once their epoch is older than every kept
        newest checkpoint (they are kept a while for a look, never for ever); files no
        manifest or note refers to (a writer killed before its manifest, an epoch
        written again) and temporary files go at once: no live writer shares a trial's
        folder.
        """
        entries, notes, others = self._scan()
        newest = entries[-self.keep_last:]
        keep = {e.manifest for e in newest}
        best = self.best(entries)
        if best is not None:
            keep.add(best.manifest)
        kept = [e for e in entries if e.manifest in keep]
        for entry in entries:
            if entry.manifest not in keep:
                self.files.delete(entry.manifest)
                self.files.delete_dir(entry.data)
        held = {e.data for e in kept}
        if len(newest) >= self.keep_last:
            oldest_kept = newest[0].epoch
            for name, epoch, data in notes:
                if epoch < oldest_kept:
                    self._remove(name, is_dir=name == data)
            notes = [n for n in notes if n[1] >= oldest_kept]
        held |= {data for *_, data in notes}
        for item in others:
            if (_DATA_RE.match(item.name) or _LEGACY_RE.match(item.name)) \
                    and item.name not in held:
                self.files.delete_dir(item.name)
            elif item.name.startswith(".tmp-"):
                self._remove(item.name, item.is_dir)
        self._hold(sum(e.size for e in kept))

    def _remove(self, name: str, is_dir: bool) -> None:
        if is_dir:
            self.files.delete_dir(name)
        else:
            self.files.delete(name)

    def _hold(self, stored: int) -> None:
        now = self.clock()
        use = self._use
        byte_s = use.byte_s
        if self._held_since is not None:
            byte_s += use.stored_bytes * (now - self._held_since)
        self._held_since = now
        self._use = replace(use, byte_s=byte_s, stored_bytes=stored)

    def usage(self) -> CheckpointUse:
        """What this store's checkpoints cost this process so far: checkpoints, bytes
        and seconds written, the storage's billed requests, the bytes held now and bytes
        held times seconds up to this call."""
        if self._held_since is not None:
            self._hold(self._use.stored_bytes)
        return replace(self._use, writes=self.files.requests.writes,
                       reads=self.files.requests.reads)

    def checkpoint_s(self) -> float | None:
        """The median seconds of one checkpoint written by this process, or None."""
        return statistics.median(self._save_s) if self._save_s else None

    def close(self) -> None:
        """Remove this process's downloads."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @staticmethod
    def _quietly(action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:  # cleanup after a failure: the original error is the one
            pass
