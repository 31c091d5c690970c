"""Faults of the run dir: one driver at a time, read-only and full disks.

Pure module (files and the standard library only).

* :class:`RunLock`: an exclusive ``fcntl.flock`` on ``RUN_DIR/.lock``, held by the
  driver for its whole run, with the holder's PID, host and start time written in it.
  The kernel drops the lock when the process dies, however it dies (SIGKILL included),
  so there is never a stale lock to clean up. A second driver is refused with
  :class:`RunDirBusy` (exit code 2) before it writes anything. ``report`` and
  ``dashboard`` only read and take no lock.
* :func:`check_writable`: a run dir (or, for a new one, its nearest existing parent) that
  cannot be written is refused up front (:class:`ConfigError`, exit code 2).
* :func:`disk_full_cause`: whether an exception, anywhere in its chain, comes from a
  full disk (``ENOSPC``/``EDQUOT``, SQLite's "database or disk is full", or the same
  text inside an error a trial process sent back). The driver then stops the run
  cleanly with :class:`DiskFull` (exit code :data:`EXIT_DISK_FULL`), every unfinished
  trial left resumable: a full disk is not a trial's failure.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpsearch.errors import ConfigError, HpsearchError

#: The lock file in a run dir.
LOCK_FILE = ".lock"
#: Exit code of a run stopped by a full disk (BSD sysexits' EX_TEMPFAIL: retry later).
EXIT_DISK_FULL = 75
#: Exit code after SIGTERM (128 + 15, what a shell reports for a process it ended).
EXIT_TERMINATED = 143
#: errno values that mean "no space left" (ENOSPC) or "quota exceeded" (EDQUOT).
_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e)
#: Texts of full-disk errors whose errno was lost on the way (SQLite, pickled errors).
_FULL_TEXTS = ("no space left on device", "database or disk is full", "disk quota exceeded",
               "[errno 28]")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class RunDirBusy(ConfigError):
    """Another driver holds the run dir's lock (exit code 2, nothing written)."""

    def __init__(self, run_dir: Path, holder: dict[str, Any]):
        self.holder = holder
        who = (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
               + (f", since {holder['started']}" if holder.get("started") else ""))
        super().__init__(
            "--run-dir",
            f"another hpsearch driver ({who}) is running on this run dir; wait for it "
            f"to end or stop it (report and dashboard may read it meanwhile)",
            _shown(run_dir))


class DiskFull(HpsearchError):
    """A write failed because the disk is full: the run stopped, everything resumable.

    Args:
        path: Where the write failed (a file or folder; the run dir when unknown).
        run_dir: The run dir, for the resume command.
    """

    exit_code = EXIT_DISK_FULL

    def __init__(self, path: str | Path, run_dir: str | Path):
        self.path = str(path)
        self.run_dir = str(run_dir)
        super().__init__(
            f"disk full at {_shown(Path(path))}: free space and run python -m hpsearch "
            f"resume {_shown(Path(run_dir))} (unfinished trials resume from their "
            f"checkpoints)")


class RunLock:
    """An exclusive, process-lifetime lock on a run dir (``RUN_DIR/.lock``).

    Args:
        run_dir: The run dir; it must exist when :meth:`acquire` is called.
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        """Take the lock or raise :class:`RunDirBusy` naming the holder.

        The holder's record (JSON: pid, host, started) is written only once the lock is
        held, so a refused driver writes nothing (not even a truncation).
        """
        import fcntl

        if self._fd is not None:
            return self
        # Not inherited by child processes (PEP 446): the lock dies with this process.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirBusy(self.run_dir, self.holder()) from None
            raise
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (record + "\n").encode(), 0)
        except OSError:
            pass  # the record only informs a refused driver; the lock is what counts
        self._fd = fd
        return self

    def holder(self) -> dict[str, Any]:
        """The holder's record as written in the lock file ({} if unreadable)."""
        for _ in range(20):  # the holder writes its record right after it locks
            try:
                text = self.path.read_text()
                if text.strip():
                    return dict(json.loads(text))
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        return {}

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would race with a new driver)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_writable(run_dir: str | Path, *files: str | Path | None) -> None:
    """Refuse a run dir that cannot be written, before anything is written.

    Checks the run dir (or the nearest existing parent of a new one), the files in it a
    run appends to, and ``files`` (e.g. a SQLite study elsewhere) with their folders.
    ``os.access`` answers for the real user and a read-only mount alike (root may write
    where the permission bits say no, and is not refused there).

    Raises:
        ConfigError: ``--run-dir: is read-only ...`` (exit code 2).
    """
    run_dir = Path(run_dir)
    targets = [_nearest_existing(run_dir)]
    if run_dir.is_dir():
        targets += [run_dir / name for name in
                    (LOCK_FILE, "ledger.jsonl", "optuna.db", "space.yaml", "hpsearch.log")]
    for extra in files:
        if extra is not None:
            targets += [_nearest_existing(Path(extra).parent), Path(extra)]
    for target in targets:
        if target.exists() and not os.access(target, os.W_OK | (os.X_OK if target.is_dir()
                                                                  else 0)):
            where = "" if target == run_dir else f": cannot write {_shown(target)}"
            raise ConfigError("--run-dir", f"is read-only{where}; use a writable run dir",
                              _shown(run_dir))


@dataclass(frozen=True)
class DiskFullCause:
    """A full-disk error found in an exception chain.

    Attributes:
        path: The file the failed write was for, when the error says so.
    """

    path: str | None


def _chain(exc: BaseException | None):
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        # __cause__/__context__, SQLAlchemy's .orig, Ray's RayTaskError.cause.
        todo += [getattr(cur, name, None) for name in ("__cause__", "__context__", "orig",
                                                        "cause")
                 if isinstance(getattr(cur, name, None), BaseException)]


def disk_full_cause(exc: BaseException | None, text: str = "") -> DiskFullCause | None:
    """The full-disk error behind ``exc`` (or in ``text``, a trial's error trace), or None.

    Args:
        exc: Any exception; its ``__cause__``/``__context__`` chain is searched.
        text: An error's text when the exception object is not at hand.
    """
    texts = [text.lower()] if text else []
    for cur in _chain(exc):
        if isinstance(cur, OSError) and cur.errno in _FULL_ERRNOS:
            name = cur.filename if isinstance(cur.filename, (str, bytes, os.PathLike)) else None
            return DiskFullCause(os.fsdecode(name) if name is not None else None)
        texts.append(str(cur).lower())
    if any(mark in t for t in texts for mark in _FULL_TEXTS):
        return DiskFullCause(None)
    return None


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged write could still use on ``path``'s filesystem, or None."""
    try:
        stats = os.statvfs(_nearest_existing(Path(path)))
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize
