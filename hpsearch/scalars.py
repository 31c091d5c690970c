"""Parsing of numbers from YAML values, shared by the config and the space.

PyYAML reads ``1e-4`` (no dot) as a string: float fields accept such strings on purpose.
Booleans are never numbers.
"""

from __future__ import annotations

import math
from typing import Any

from hpsearch.errors import ConfigError


def parse_float_value(value: Any, path: str) -> float:
    """Return ``value`` as a finite float; accept numeric strings such as ``"1e-4"``."""
    if isinstance(value, bool):
        raise ConfigError(path, "must be a number", value)
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise ConfigError(path, "must be a number", value) from None
    else:
        raise ConfigError(path, "must be a number", value)
    if not math.isfinite(out):
        raise ConfigError(path, "must be a finite number", value)
    return out


def parse_int_value(value: Any, path: str) -> int:
    """Return ``value`` as an int; floats with an integral value (``4.0``) are accepted."""
    if isinstance(value, bool):
        raise ConfigError(path, "must be an integer", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ConfigError(path, "must be an integer", value)


def parse_bool(value: Any, path: str) -> bool:
    """Return ``value`` if it is a YAML boolean; anything else is an error."""
    if not isinstance(value, bool):
        raise ConfigError(path, "must be true or false", value)
    return value


def finite(value: Any) -> float | None:
    """``value`` as a float, or None if it is missing, not a number or not finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
