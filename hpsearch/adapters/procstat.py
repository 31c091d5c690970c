"""One reader of Linux's ``/proc/<pid>/stat``, for the code that must tell whether a
process it recorded still runs (the run's watchdog, the DDP job folders' sweep).

The second field, the command name, is in parentheses and may hold spaces and ``)``, so
the fields are counted from after its last ``)``: the process state (field 3 of
``proc(5)``) is index 0 of what :func:`fields` returns, the start time (field 22, clock
ticks since boot) index 19.
"""

from __future__ import annotations

#: Indexes into :func:`fields`: ``proc(5)``'s field number minus 3.
STATE, START_TIME = 0, 19
#: States of a process that has ended: a zombie (its parent has yet to reap it), dead.
ENDED_STATES = ("Z", "X")


def fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None where the
    process does not exist, cannot be read, or there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            after = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return after if len(after) > START_TIME else None


def _not_ended(found: list[str] | None) -> bool:
    return found is not None and found[STATE] not in ENDED_STATES


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has)."""
    return _not_ended(fields(pid))


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None where it does not
    exist; with its pid, it names one process, as a pid alone does not once reused."""
    found = fields(pid)
    return None if found is None else found[START_TIME]


def same_process(pid: int, started: str) -> bool:
    """Whether the process that ``pid`` and ``started`` (its :func:`start_time`) named
    still runs: it exists, has not ended, and has not been replaced by another process
    that took the same pid since. One read of its stat file."""
    found = fields(pid)
    return _not_ended(found) and found[START_TIME] == started
