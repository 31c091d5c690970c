"""Loading a trial's checkpoints that can be trusted: verified, or set aside.

Pure module (files only). :meth:`Loader.newest_valid` brings the newest checkpoint's
files to this machine (a download from an object store, hashed on the way; on a disk it
hashes them where they are) and, when they match, asks the caller's ``check`` (the trial
runner's: does it load as data, with the keys Lightning needs?) about that local copy.
A checkpoint that fails either is set aside: a note ``.corrupt-epoch-00000E-<id>.json``
(its manifest and why it was rejected) is written, then its manifest is deleted, and the
previous one is tried.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint_layout import Entry, aside_name


@dataclass(frozen=True)
class Rejected:
    """A checkpoint :meth:`Loader.newest_valid` set aside.

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


class Loader:
    """Verifies a trial's checkpoints and brings their files to this machine.

    Args:
        files: The trial's folder.
    """

    def __init__(self, files: storage.Files):
        self.files = files
        #: Every checkpoint set aside, newest first.
        self.rejected: list[Rejected] = []
        self._scratch: Path | None = None

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

    def fetch(self, entry: Entry, scratch: Path | None = None) -> tuple[Entry, str | None]:
        """``entry`` with a verified local copy of its files, and None; or why its files
        cannot be used. A local store's own folder is verified where it is; otherwise
        the files are downloaded into ``scratch`` (default: a folder of the loader's own,
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

    def newest_valid(self, entries: list[Entry],
                     check: Callable[[Entry], str | None] | None = None,
                     scratch: Path | None = None) -> Entry | None:
        """The newest of ``entries`` (oldest first) that verifies, fetched (see
        :meth:`fetch`); newer ones that do not are set aside.

        Args:
            entries: The stored checkpoints, oldest first.
            check: Called with each checkpoint whose checksums match (its local copy);
                returns why it cannot be used (it does not load, keys are missing) or
                None. Checkpoints it rejects are set aside like corrupt ones.
            scratch: Where downloads go.
        """
        for entry in reversed(entries):
            fetched, reason = self.fetch(entry, scratch)
            if reason is None and check is not None:
                reason = check(fetched)
            if reason is None:
                return fetched
            self._set_aside(entry, reason)
        # A checkpoint with no manifest at all is not a checkpoint; nothing to resume.
        return None

    def _set_aside(self, entry: Entry, reason: str) -> None:
        """Note why, then delete the manifest: the checkpoint stops existing in one step,
        its files stay (named by the note) until the note is pruned."""
        name = aside_name(entry)
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

    def close(self) -> None:
        """Remove this loader's downloads."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
