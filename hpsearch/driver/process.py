"""The process-wide settings a run changes, put back as they were when it ends."""

from __future__ import annotations

import logging
import os
import signal
import threading

from hpsearch.driver.logs import FILE_ONLY_LOGGERS


class ProcessState:
    """Everything process-wide a run changes, put back as it was when the run ends.

    A run sets environment variables (its own, and Ray's: ``PYTHONBREAKPOINT``, ...),
    routes loggers to its log file, installs signal handlers and may capture warnings
    into logging; :func:`hpsearch.run` restores all of it, so two runs in one interpreter (a
    notebook) leave the process as they found it.
    """

    LOGGERS = ("hpsearch", "ray", "optuna", *FILE_ONLY_LOGGERS)

    def __enter__(self) -> "ProcessState":
        import warnings

        self.environ = dict(os.environ)
        self.loggers = {name: (logging.getLogger(name).level,
                               logging.getLogger(name).propagate)
                        for name in self.LOGGERS}
        self.captured = getattr(logging, "_warnings_showwarning", None) is not None
        self.showwarning = warnings.showwarning
        self.signals = {}
        if threading.current_thread() is threading.main_thread():
            self.signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc_info) -> None:
        import warnings

        for key in set(os.environ) - set(self.environ):
            del os.environ[key]
        os.environ.update(self.environ)
        for name, (level, propagate) in self.loggers.items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = propagate
        if not self.captured:
            logging.captureWarnings(False)
        warnings.showwarning = self.showwarning
        for sig, handler in self.signals.items():
            if handler is not None:
                signal.signal(sig, handler)
