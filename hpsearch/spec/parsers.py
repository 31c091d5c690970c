"""How a ``space.yaml`` key is declared: its parser, its one-line meaning and its default.

Pure module. A parser takes ``(raw value, dotted path)`` and returns the converted value,
or raises a :class:`~hpsearch.errors.ConfigError` naming the path and the bad value.
Numbers: PyYAML reads ``1e-4`` (no dot) as a *string*; float parsers accept such strings
deliberately when they parse as a finite float; integer parsers accept integers only
(booleans are never numbers).
"""

from __future__ import annotations

import re
from dataclasses import MISSING, field
from typing import Any, Callable

from hpsearch.errors import ConfigError
from hpsearch.scalars import parse_float_value, parse_int_value

Parser = Callable[[Any, str], Any]

#: A URL with a scheme (``sqlite:///x.db``, ``http://169.254.169.254/...``).
URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


def floats(min_value: float | None = None, *, exclusive: bool = False) -> Parser:
    """A float (or a string that parses as a finite one), at least ``min_value`` (more
    than it when ``exclusive``)."""

    def parse(value: Any, path: str) -> float:
        out = parse_float_value(value, path)
        if min_value is not None and (out <= min_value if exclusive else out < min_value):
            op = ">" if exclusive else ">="
            raise ConfigError(path, f"must be {op} {min_value:g}", value)
        return out

    return parse


def ints(min_value: int | None = None, max_value: int | None = None,
         why: str = "") -> Parser:
    """An integer within ``[min_value, max_value]``; ``why`` follows the too-large error."""

    def parse(value: Any, path: str) -> int:
        out = parse_int_value(value, path)
        if min_value is not None and out < min_value:
            raise ConfigError(path, f"must be >= {min_value}", value)
        if max_value is not None and out > max_value:
            raise ConfigError(path, f"must be <= {max_value}{why}", value)
        return out

    return parse


def text(pattern: re.Pattern[str] | None = None, hint: str = "") -> Parser:
    """A non-empty string, matching ``pattern`` when given (``hint`` says what it must be)."""

    def parse(value: Any, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(path, "must be a non-empty string", value)
        if pattern is not None and not pattern.fullmatch(value):
            raise ConfigError(path, f"must be {hint}", value)
        return value

    return parse


def choice(*choices: str) -> Parser:
    """One of ``choices``."""

    def parse(value: Any, path: str) -> str:
        if value not in choices:
            raise ConfigError(path, f"must be one of {', '.join(choices)}", value)
        return value

    return parse


def optional(inner: Parser) -> Parser:
    """None, or what ``inner`` accepts."""

    def parse(value: Any, path: str) -> Any:
        return None if value is None else inner(value, path)

    return parse


def key(parser: Parser, doc: str, default: Any = MISSING, shown: str | None = None) -> Any:
    """Declare a config key: its parser, its one-line meaning and its default (``shown``
    is how the key reference shows a default that is resolved later)."""
    meta = {"parser": parser, "doc": doc}
    if shown is not None:
        meta["shown"] = shown
    if default is MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, doc: str) -> Any:
    """Declare a nested section whose keys all have defaults."""
    return field(default_factory=cls, metadata={"section": cls, "doc": doc})
