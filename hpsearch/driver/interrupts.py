"""Signals and interruptions: SIGTERM handled like Ctrl-C, bookkeeping that a signal
must not cut, and the errors a stopped run ends with (interrupted, disk full)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from hpsearch.errors import EXIT_INTERRUPTED, HpsearchError
from hpsearch.recovery import faults
from hpsearch.report.progress import display_path
from hpsearch.spec import study_storage

log = logging.getLogger("hpsearch")


class Signals:
    """SIGTERM handled like Ctrl-C, for the span of a run (the previous handler restored).

    The first SIGTERM (or Ctrl-C) asks Ray Tune to stop gracefully (it saves its
    experiment state and stops the trials); a second one interrupts at once. Either way
    the driver closes the ledger's open intervals and exits with the resume hint: 130
    after Ctrl-C, 143 after SIGTERM. Ray's own driver handler would ``sys.exit(15)``
    wherever the main thread is, leaving the ledger open.
    """

    def __init__(self):
        self.terminated = False
        self._previous = None

    def __enter__(self) -> "Signals":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame) -> None:
        self.terminated = True
        log.warning("SIGTERM received: stopping the run as after Ctrl-C")
        # Whatever handles Ctrl-C now: Tune's graceful stop during fit(), else Python's
        # KeyboardInterrupt.
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    @property
    def exit_code(self) -> int:
        return faults.EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


class SignalsHeld:
    """Ignores SIGINT and SIGTERM for a few lines of bookkeeping (closing the ledger
    after an interruption must not itself be interrupted); restores them on exit."""

    def __enter__(self) -> "SignalsHeld":
        self._saved = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, signal.SIG_IGN)
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


def disk_full(exc: BaseException, run_path: Path, url: str) -> faults.DiskFull | None:
    """The :class:`~hpsearch.recovery.faults.DiskFull` to raise for ``exc``, or None."""
    if isinstance(exc, faults.DiskFull):
        return exc
    if isinstance(exc, HpsearchError):
        return None  # already says what happened
    cause = faults.disk_full_cause(exc)
    if cause is None:
        return None
    where = cause.path
    if where is None:
        text = "".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e).lower()
        sqlite = study_storage.sqlite_file(url)
        where = str(sqlite) if sqlite is not None and "database or disk" in text else None
    return faults.DiskFull(where or run_path, run_path)


def interrupted_text(run_path: Path, unfinished: int | None = None) -> str:
    """The error line of an interrupted run: what resumes, and how (``unfinished``: how
    many trials, when known)."""
    what = (f"{unfinished} unfinished trial(s) will resume from their checkpoints"
            if unfinished is not None else
            "unfinished trials will resume from their checkpoints")
    return (f"interrupted: {what}: run the same command again (or python -m hpsearch "
            f"resume {display_path(run_path)})")
