"""When a run cannot succeed: failed trials compared, and the run's verdict.

Pure module. A run whose trials all fail the same way would otherwise burn its whole
budget on one bug: :class:`FailFast` watches the first ``search.fail_fast`` trials of a
session as they end, and once that many have all failed with the same error (and none
completed or was pruned before) says the run must stop. :func:`session_verdict` judges
a session that ran to its end: if none of its trials completed, it failed.

"The same error" is :func:`error_signature`: the error's type and message with the
parts that differ from trial to trial (numbers, memory addresses, file paths, quoted
values) replaced by placeholders, so ``boom at epoch 2`` in trial 0 and ``boom at
epoch 3`` in trial 5 are the same error.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+~-]+)+[\\/]?")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}(?:-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}\b")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def error_signature(text: str) -> str:
    """``text`` (``Type: message``) with its volatile parts normalised.

    Memory addresses become ``<addr>``, ids (UUIDs, long hex strings such as Ray's
    trial and actor ids) ``<id>``, file paths ``<path>`` and numbers ``<n>``; runs of
    white space become one space. Two errors are "the same" when their signatures are
    equal.
    """
    out = _ADDRESS.sub("<addr>", text.strip())
    out = _UUID.sub("<id>", out)
    out = _HEX_ID.sub("<id>", out)
    out = _PATH.sub("<path>", out)
    out = _NUMBER.sub("<n>", out)
    return _SPACE.sub(" ", out)


class Verdict(enum.Enum):
    """What the run does after a trial ended."""

    CONTINUE = "continue"  #: go on
    STOP = "stop"  #: the first trials all failed the same way: stop the run


@dataclass
class Failure:
    """A trial that ended in FAIL: its number, its error and the log with its traceback."""

    number: int
    error: str
    log: str | None = None

    @property
    def signature(self) -> str:
        return error_signature(self.error)


@dataclass
class FailFast:
    """Watches how the first trials of a session end.

    Args:
        limit: ``search.fail_fast``: stop once this many trials, the first to end in
            the session, all failed with the same error; 0 never stops.

    Once a trial completes (or is pruned: it ran) or the first ``limit`` trials did not
    all fail the same way, the watch is over and every later trial gets CONTINUE.
    """

    limit: int
    failures: list[Failure] = field(default_factory=list)
    settled: bool = False

    def succeeded(self) -> None:
        """A trial completed or was pruned: the trainable works for some configurations."""
        self.settled = True

    def failed(self, failure: Failure) -> Verdict:
        """A trial failed for good (its retries used up); STOP when the run must stop."""
        self.failures.append(failure)
        if self.settled or self.limit <= 0:
            return Verdict.CONTINUE
        first = self.failures[0].signature
        if any(f.signature != first for f in self.failures):
            self.settled = True
            return Verdict.CONTINUE
        if len(self.failures) >= self.limit:
            self.settled = True
            return Verdict.STOP
        return Verdict.CONTINUE

    def message(self) -> str:
        """The error to print when the run stops: the error once, where its traceback is."""
        first = self.failures[0]
        where = f"; traceback in {first.log}" if first.log else ""
        return (f"the first {len(self.failures)} trials all failed with the same error, so "
                f"the run stops (search.fail_fast: {self.limit}; 0 never stops): "
                f"{first.error}{where}")


class SessionOutcome(enum.Enum):
    """How a session that ran to its end went."""

    OK = "ok"  #: every trial completed or was pruned
    SOME_FAILED = "some_failed"  #: some trials failed, others completed: exit 0
    ALL_FAILED = "all_failed"  #: trials failed and none completed: the run failed


def session_verdict(complete: int, pruned: int, failed: int) -> SessionOutcome:
    """Judge a session from the counts of its trials' final states.

    A session with no failure is OK (even one whose budget closed before any trial
    ended); one where trials failed and none completed or was pruned FAILED.
    """
    if failed == 0:
        return SessionOutcome.OK
    if complete + pruned == 0:
        return SessionOutcome.ALL_FAILED
    return SessionOutcome.SOME_FAILED


def logs_line(failures: list[Failure], limit: int = 5) -> str:
    """``logs/trial-0001.log, logs/trial-0004.log`` (the first ``limit``, then a count)."""
    logs = [f.log for f in failures if f.log]
    shown = ", ".join(logs[:limit])
    if len(logs) > limit:
        shown += f" and {len(logs) - limit} more"
    return shown
