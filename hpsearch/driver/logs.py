"""The run's log file and console: hpsearch's and Ray's records go to ``hpsearch.log``,
Ray's worker-death notices off the terminal."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("hpsearch")


class WorkerDeathNotices:
    """Keeps Ray's "(raylet) A worker died or was killed ..." notices off the console.

    Ray prints one to stdout for every trial process that dies; hpsearch handles those
    deaths itself (a preemption restarts the trial, a failure is recorded) and says so in
    one line of its own, so the notice goes to hpsearch.log instead.
    """

    MARK = "A worker died or was killed"

    def __init__(self, stream):
        self.stream = stream
        self.swallow_newline = False

    def write(self, text: str) -> int:
        if self.MARK in text:
            log.info("ray: %s", text.strip())
            self.swallow_newline = True
            return len(text)
        if self.swallow_newline and text == "\n":
            self.swallow_newline = False
            return len(text)
        self.swallow_newline = False
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


#: Loggers whose records go to hpsearch.log only: Tune prints every trial's traceback,
#: and the driver's core worker (``ray._private.worker``) logs an "Unhandled error"
#: block with the traceback whenever an object ref holding a trial's error is collected;
#: hpsearch says what failed in one line of its own.
FILE_ONLY_LOGGERS = ("ray.tune", "ray.train", "ray._private.worker")


class _LogFile(logging.FileHandler):
    """hpsearch.log, silent when a record cannot be written (a full disk stops the run
    with its own one-line error; a traceback per log record would bury it)."""

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handleError(record)


def attach_log(run_dir: Path) -> logging.Handler:
    """Send hpsearch's and Ray's records to the run's ``hpsearch.log`` (the loggers'
    settings are put back by :class:`~hpsearch.driver.process.ProcessState` when the run
    ends)."""
    handler = _LogFile(run_dir / "hpsearch.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("hpsearch").addHandler(handler)
    logging.getLogger("hpsearch").setLevel(logging.INFO)
    for name in FILE_ONLY_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    # Optuna's per-trial INFO lines are the study's business, not the terminal's.
    logging.getLogger("optuna").setLevel(logging.WARNING)
    # The new output engine ignores verbose=0 and prints its own tables.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # hpsearch checks the objective itself (a trial that never logs it aborts the run
    # with a clear error); Tune's check would crash the whole run on a restart's final
    # bookkeeping result instead.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # Tune adds its JSON, CSV and TensorBoard loggers unless told not to; the tuner
    # passes the first two itself (tune/: result.json, progress.csv). TensorBoard files
    # nobody reads, and tensorboardX prints "NaN or Inf found in input tensor." to the
    # terminal whenever a diverging trial reports an infinite loss.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    return handler


def detach_log(handler: logging.Handler) -> None:
    logging.getLogger("hpsearch").removeHandler(handler)
    for name in FILE_ONLY_LOGGERS:
        logging.getLogger(name).removeHandler(handler)
    handler.close()
