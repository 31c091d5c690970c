"""Writing one checkpoint atomically on any storage: its files first, its manifest last.

Pure module (files only). An object store has no rename, so one protocol serves every
storage: the files go into a data folder of their own, then the manifest (SHA-256 and
size of every file) is written whole (one PUT on an object store; temporary file, fsync
and rename on a disk). A writer killed before the manifest leaves files that nothing
refers to; retention deletes them (:mod:`hpsearch.recovery.checkpoint_retention`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint_layout import (FORMAT, Entry, data_name, entry_of,
                                                 manifest_name)


def write_checkpoint(files: storage.Files, epoch: int, write: Callable[[Path], None],
                     metric: float | None,
                     meta: dict[str, Any] | None) -> tuple[Entry, int]:
    """Store a checkpoint of ``epoch``: ``write(folder)`` fills a local folder with its
    files, which are hashed and stored, then the manifest.

    Returns:
        The new checkpoint (its ``local`` folder set on a local store) and the bytes
        written (files and manifest).

    Raises:
        Whatever ``write`` or the storage raised; nothing of the checkpoint is left then.
    """
    data = data_name(epoch)
    local = files.local
    staging = local / data if local is not None else Path(
        tempfile.mkdtemp(prefix="hps-ckpt-"))
    written = 0
    try:
        staging.mkdir(parents=True, exist_ok=True)
        write(staging)
        listed = {}
        for path in sorted(p for p in staging.iterdir() if p.is_file()):
            listed[path.name] = {"sha256": storage.sha256_file(path),
                                 "bytes": path.stat().st_size}
            if local is None:
                files.upload(path, f"{data}/{path.name}")
            written += listed[path.name]["bytes"]
        manifest = {"format": FORMAT, "epoch": epoch, "metric": metric, "files": listed,
                    "data": data, "meta": meta or {}, "written_at": time.time()}
        body = json.dumps(manifest).encode()
        files.write(manifest_name(epoch), body)
        written += len(body)
    except BaseException:
        if local is None:
            _quietly(lambda: files.delete_dir(data))
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if local is None:
            shutil.rmtree(staging, ignore_errors=True)
    entry = entry_of(manifest, data, manifest_name(epoch))
    return replace(entry, local=local / data if local is not None else None), written


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # cleanup after a failure: the original error is the one
        pass
