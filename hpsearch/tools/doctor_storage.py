"""The doctor's checks of where a run writes: the run dir, the Optuna storage and the
checkpoint storage (from here, and from every node of a cluster).

Nothing is left behind: a writability probe creates and deletes one temporary file, and
the checkpoint storage gets a token written, read back and deleted.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from hpsearch.adapters.system import ClusterInfo
from hpsearch.tools.doctor_checks import FAIL, OK, WARN, Check


def checkpoint_storage_checks(url: str, default: bool, info: ClusterInfo | None = None,
                              local_error: str | None = None) -> list[Check]:
    """Whether the checkpoints can be written where they go: from here
    (``local_error``, or ``info.storage_error``) and, on a cluster, from every alive
    node (``info.storage``: the probe of :func:`hpsearch.adapters.system.cluster_info`).
    """
    from hpsearch.recovery.storage import fix_hint, shown

    where = "the run dir's checkpoints/" if default else shown(url)
    error = local_error or (info.storage_error if info is not None else "")
    if error:
        return [Check("checkpoint storage", FAIL, f"{where}: cannot be written from here: "
                                                  f"{error}", fix_hint(url, False))]
    if info is None or info.error:
        text = (f"{where} (this machine's disk)" if default else
                f"{where}: a token was written, read back and deleted")
        return [Check("checkpoint storage", OK, text)]
    address = {n.node_id: n.address for n in info.nodes}
    failed = {n: e for n, e in info.storage.items() if e is not None}
    checks = [Check("checkpoint storage", FAIL,
                    f"node {address.get(node, '?')} ({node[:8]}) cannot reach {where}: "
                    f"{why}", fix_hint(url, default)) for node, why in failed.items()]
    if not failed:
        checks.append(Check("checkpoint storage", OK,
                            f"{where}: every alive node ({len(info.storage)}) read the "
                            f"driver's token there and wrote its own"))
    return checks


def storage_write_error(url: str) -> str | None:
    """Why a token cannot be written, read back and deleted at ``url`` from here."""
    from hpsearch.adapters.ray.storage import StorageProbe

    probe = StorageProbe(url)
    try:
        probe.open()
        if probe.files.read(f"{probe.folder}/driver") != probe.token.encode():
            return "what was written cannot be read back"
    except Exception as exc:  # no credentials, no route, a missing package, ...
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    finally:
        probe.close()
    return None


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable(path: Path) -> str | None:
    """Why a directory could not be created at (or a file written into) ``path``, or
    None when it can: a temporary file is created and deleted in ``path`` or in its
    nearest existing parent; nothing else is touched."""
    base = _nearest_existing(path)
    if not base.is_dir():
        return f"{base} is a file, not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".hpsearch-doctor-", dir=base)
    except OSError as exc:
        return f"cannot create a file in {base} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def run_dir_check(run_dir: Path, default: bool) -> Check:
    """Whether the run dir exists or can be created, and can be written."""
    from hpsearch.report.progress import display_path

    shown = display_path(run_dir.absolute())
    why = writable(run_dir)
    if why is not None:
        return Check("run dir", FAIL, f"{shown} cannot be created or written: {why}",
                     "choose another run dir (`--run-dir DIR`, or another `name`) or make "
                     "that directory writable")
    if run_dir.is_dir():
        state = "exists and is writable"
        if (run_dir / "space.yaml").is_file():
            state += " (a run dir: `run` continues its study)"
    else:
        state = f"will be created (in {_nearest_existing(run_dir)}, writable)"
    return Check("run dir", OK, f"{shown} {state}"
                                + (" (the default: runs/<name>)" if default else ""))


def runs_check(cwd: Path | None = None) -> Check:
    """Without a space.yaml: can ``./runs`` hold run dirs?"""
    runs = (cwd or Path.cwd()) / "runs"
    why = writable(runs)
    if why is not None:
        return Check("run dir", FAIL, f"runs/ (where run dirs go by default) is not "
                                      f"writable: {why}",
                     "run from a writable directory, or give `run --run-dir DIR`")
    return Check("run dir", OK, f"{runs} is writable (run dirs go to runs/<name> by "
                                "default; give SPACE.yaml to check its own)")


def storage_check(url: str, run_dir: Path, default: bool = False,
                  connect: Callable[[str], str | None] | None = None) -> Check:
    """The Optuna storage: a SQLite file's directory is writable; any other URL connects.

    Args:
        url: The storage URL ``run`` would use.
        run_dir: The run dir (to show paths relative to it).
        default: Whether ``url`` is the default ``<run dir>/optuna.db``.
        connect: ``url -> error or None`` for non-SQLite URLs (default
            :func:`hpsearch.adapters.system.rdb_error`).
    """
    from hpsearch.report.progress import display_url
    from hpsearch.spec.study_storage import sqlite_file

    shown = display_url(url, run_dir.absolute())
    db = sqlite_file(url)
    if db is not None:
        # SQLite writes a journal next to the file: its directory must be writable too.
        if not db.exists():
            why = writable(db.parent)
        elif not db.is_file():
            why = f"{db} is not a file"
        elif not os.access(db, os.W_OK):
            why = f"{db} is read-only"
        else:
            why = writable(db.parent)
        if why is not None:
            fix = ("it is the run dir's optuna.db: fix the run dir (see above), or point "
                   "`storage` elsewhere" if default else
                   "point `storage` at a writable path (`--set storage=sqlite:////abs/"
                   "path.db`), or drop it to use <run dir>/optuna.db")
            return Check("storage", FAIL, f"{shown}: the SQLite file cannot be created or "
                                          f"written: {why}", fix)
        state = "exists" if db.exists() else "will be created"
        where = ", in the run dir" if default else ""
        return Check("storage", OK, f"{shown} (SQLite; {state}{where})")
    if url.startswith("sqlite:"):
        return Check("storage", WARN, f"{shown}: not a SQLite file URL (sqlite:///path)",
                     "use `sqlite:////absolute/path.db` or `sqlite:///relative/path.db`")
    if connect is None:
        from hpsearch.adapters.system import rdb_error

        connect = rdb_error
    error = connect(url)
    if error is not None:
        return Check("storage", FAIL, f"{shown}: cannot connect: {error}",
                     "check the URL, that the database server is up and reachable from "
                     "here and the credentials; the driver package must be installed "
                     "(e.g. psycopg2-binary for postgresql://, pymysql for "
                     "mysql+pymysql://)")
    return Check("storage", OK, f"{shown}: connected")
