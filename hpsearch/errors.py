"""Errors hpsearch reports to its users.

Every error a user can cause by their input is a :class:`ConfigError` naming the field
path and the bad value; the CLI prints it as one line and exits with code 2.
"""

from __future__ import annotations

from typing import Any

#: Exit code for bad input (config, space, trainable path); nothing was written.
EXIT_CONFIG = 2
#: Exit code for a run that could not be carried out (cluster unreachable, ...).
EXIT_RUNTIME = 1
#: Exit code after Ctrl-C.
EXIT_INTERRUPTED = 130


class HpsearchError(Exception):
    """Base class of errors hpsearch reports without a traceback."""

    exit_code = EXIT_RUNTIME


_MISSING = object()


class ConfigError(HpsearchError):
    """A value in ``space.yaml`` (or an override) is invalid.

    Args:
        field: Dotted path of the offending key, e.g. ``space.lr.low``.
        reason: What is wrong, phrased so the user knows what to change.
        value: The offending value; omitted from the message when not given.
    """

    exit_code = EXIT_CONFIG

    def __init__(self, field: str, reason: str, value: Any = _MISSING):
        self.field = field
        self.reason = reason
        self.value = None if value is _MISSING else value
        text = f"{field}: {reason}" if field else reason
        if value is not _MISSING:
            text += f" (got {_short_repr(value)})"
        super().__init__(text)


#: Longest repr of an offending value in an error line (a list of millions of choices
#: or a deeply nested value is shown abridged, never as a megabyte or a RecursionError).
MAX_VALUE_REPR = 200


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = None
    if text is not None and len(text) <= MAX_VALUE_REPR:
        return text
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 3, MAX_VALUE_REPR, MAX_VALUE_REPR
    return short.repr(value)[: MAX_VALUE_REPR * 2]


class TrialSetupError(HpsearchError):
    """A trial cannot run as configured (raised inside trials, recorded as FAIL)."""
