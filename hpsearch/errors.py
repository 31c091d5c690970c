"""Errors hpsearch reports to its users, and the exit codes they map to.

Every error a user can cause by their input is a :class:`ConfigError` naming the field
path and the bad value; the CLI prints it as one line and exits with code 2.

Every :class:`HpsearchError` survives pickling: a trial raises it in a Ray worker and
the driver unpickles it with its message and attributes intact (Ray ships exceptions
between processes by pickling them). Subclasses get this for free, whatever their
``__init__`` takes, through :meth:`HpsearchError.__reduce__`.

Exit codes of ``python -m hpsearch`` (see also :mod:`hpsearch.cli`):

=====  ==================================================================================
code   meaning
=====  ==================================================================================
0      done (some trials may have failed while others completed: the run says how many)
1      the run could not succeed: its first trials all failed with the same error
       (``search.fail_fast``), or no trial of the session completed; or another runtime
       failure (a ledger that cannot be read, ...)
2      bad input: the config, the trainable's import path, or the trainable's contract
       (it returns something hpsearch cannot train, or never logs the objective). Config
       errors are found before anything is written; a broken contract is found by the
       first trial that shows it, and the run stops at once
130    interrupted (Ctrl-C); unfinished trials resume from their checkpoints
=====  ==================================================================================
"""

from __future__ import annotations

from typing import Any

#: Exit code for bad input (config, space, trainable path or contract).
EXIT_CONFIG = 2
#: Exit code for a run that could not be carried out or whose trials all failed.
EXIT_RUNTIME = 1
#: Exit code after Ctrl-C.
EXIT_INTERRUPTED = 130


def _rebuild(cls: type, args: tuple, kwargs: dict[str, Any]) -> "HpsearchError":
    """Unpickle an :class:`HpsearchError`: call its constructor with the original args."""
    return cls(*args, **kwargs)


class HpsearchError(Exception):
    """Base class of errors hpsearch reports without a traceback.

    The arguments a subclass was constructed with are kept, so that pickling (Ray
    sending the error from a trial process to the driver) rebuilds it by calling the
    same constructor: a subclass whose ``__init__`` takes other arguments than the
    message still arrives intact.
    """

    exit_code = EXIT_RUNTIME

    def __new__(cls, *args: Any, **kwargs: Any):
        self = super().__new__(cls, *args)
        self._init_args = (args, kwargs)
        return self

    def __reduce__(self):
        args, kwargs = getattr(self, "_init_args", (self.args, {}))
        return (_rebuild, (type(self), args, kwargs), dict(self.__dict__))


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
        #: Where in ``space.yaml`` the field is written (``path:line``), once known.
        self.where: str | None = None
        text = f"{field}: {reason}" if field else reason
        if value is not _MISSING:
            text += f" (got {_short_repr(value)})"
        super().__init__(text)

    def __str__(self) -> str:
        text = super().__str__()
        return f"{self.where}: {text}" if self.where else text


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
    """A trial cannot run as configured: the trainable breaks its contract (what
    ``build`` returns, the objective never logged, a checkpoint that is not plain data).

    Raised inside trials and recorded as FAIL; every other trial would fail the same
    way, so the run stops at once with exit code 2.
    """

    exit_code = EXIT_CONFIG


class RunAborted(HpsearchError):
    """The run stopped at once because a trial broke the trainable's contract (a
    :class:`TrialSetupError` or a config error found inside a trial)."""

    exit_code = EXIT_CONFIG


class RunFailed(HpsearchError):
    """The run could not succeed: its first trials all failed with the same error
    (``search.fail_fast``), or no trial of the session completed."""

    exit_code = EXIT_RUNTIME


class RunInterrupted(HpsearchError):
    """The run was interrupted (Ctrl-C: exit code 130, SIGTERM: 143); finished trials
    are kept in the study, unfinished ones resume from their checkpoints."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED):
        super().__init__(message)
        self.exit_code = exit_code
