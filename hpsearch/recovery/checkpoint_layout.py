"""How a trial's checkpoint folder is laid out: the names of its files and folders, the
manifest format, and one listing of the folder read as checkpoints.

Pure module (the storage operations are :class:`hpsearch.recovery.storage.Files`). A
checkpoint of epoch E is a data folder ``epoch-00000E-<token>/`` and its manifest
``epoch-00000E.json``; a checkpoint set aside is a note ``.corrupt-epoch-00000E-<id>.json``.
Folders ``epoch-00000E/`` holding their own ``manifest.json`` (the layout of hpsearch
before object stores) are read as checkpoints too, so a run dir from then resumes; the
old layout set a checkpoint aside by renaming its folder ``.corrupt-epoch-00000E-<id>``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hpsearch.recovery import storage

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
            store; a verified download otherwise), once
            :meth:`~hpsearch.recovery.checkpoint.CheckpointStore.latest_valid` returned
            it; else None.
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


class AsideNote(NamedTuple):
    """A checkpoint set aside: its note's name, its epoch, and its data folder (the
    note itself, for the old layout's renamed folder)."""

    name: str
    epoch: int
    data: str


@dataclass(frozen=True)
class Listing:
    """One listing of a trial's folder, read as checkpoints.

    Attributes:
        entries: Checkpoints with a readable manifest, oldest first (not verified).
        notes: Checkpoints set aside.
        others: Everything else (data folders, temporary files, other notes).
    """

    entries: list[Entry]
    notes: list[AsideNote]
    others: list[storage.Item]


def data_name(epoch: int) -> str:
    """A new data folder for a checkpoint of ``epoch`` (a fresh token each time)."""
    return f"{PREFIX}{epoch:06d}-{uuid.uuid4().hex[:8]}"


def manifest_name(epoch: int) -> str:
    return f"{PREFIX}{epoch:06d}.json"


def aside_name(entry: Entry) -> str:
    """A new name for the note that sets ``entry`` aside."""
    return f"{CORRUPT_PREFIX}{entry.name}-{uuid.uuid4().hex[:6]}.json"


def is_data(name: str) -> bool:
    """Whether ``name`` is a checkpoint's data folder (of either layout)."""
    return bool(_DATA_RE.match(name) or _LEGACY_RE.match(name))


def entry_of(manifest: dict[str, Any], data: str, name: str) -> Entry:
    """The :class:`Entry` a manifest describes.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: Not a valid manifest.
    """
    files = manifest["files"]
    if not isinstance(files, dict):
        raise TypeError("files")
    # The old layout's manifest maps each name to its digest alone.
    files = {k: (v if isinstance(v, dict) else {"sha256": v}) for k, v in files.items()}
    metric = manifest.get("metric")
    return Entry(int(manifest["epoch"]), None if metric is None else float(metric),
                 dict(manifest.get("meta") or {}), files, data, name)


def read_json(files: storage.Files, name: str) -> dict[str, Any] | None:
    """File ``name`` read as JSON, or None when it is missing or unreadable."""
    try:
        data = files.read(name)
        return None if data is None else json.loads(data)
    except (OSError, ValueError):
        return None


def _read_manifest(files: storage.Files, name: str, legacy_dir: str | None) -> Entry | None:
    manifest = read_json(files, name)
    try:
        data = legacy_dir if legacy_dir is not None else str(manifest["data"])
        return entry_of(manifest, data, name)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # no valid manifest: no checkpoint


def scan(files: storage.Files) -> Listing:
    """The trial's folder, from one listing (a manifest of the new layout wins over an
    old-layout folder of the same epoch)."""
    by_epoch: dict[int, Entry] = {}
    legacy: dict[int, Entry] = {}
    notes, others = [], []
    for item in files.list():
        if not item.is_dir and _MANIFEST_RE.match(item.name):
            found = _read_manifest(files, item.name, None)
            if found is not None:
                by_epoch[found.epoch] = found
        elif item.is_dir and _LEGACY_RE.match(item.name):
            found = _read_manifest(files, f"{item.name}/{MANIFEST}", item.name)
            if found is not None:
                legacy[found.epoch] = found
            else:
                others.append(item)
        elif not item.is_dir and _ASIDE_RE.match(item.name):
            note = read_json(files, item.name) or {}
            notes.append(AsideNote(item.name, int(_ASIDE_RE.match(item.name).group(1)),
                                   str(note.get("data", ""))))
        elif item.is_dir and _OLD_ASIDE_RE.match(item.name):
            # The old layout set a checkpoint aside by renaming its folder.
            notes.append(AsideNote(item.name, int(_OLD_ASIDE_RE.match(item.name).group(1)),
                                   item.name))
        else:
            others.append(item)
    for epoch, entry in legacy.items():
        by_epoch.setdefault(epoch, entry)
    return Listing(sorted(by_epoch.values(), key=lambda e: e.epoch), notes, others)
