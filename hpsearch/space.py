"""The search space: parameter types and their *only* conversion to Optuna and Ray.

Pure module: Optuna and Ray are imported inside the conversion methods, never at module
level. Bounds are inclusive everywhere in hpsearch. Ray's integer domains take an
exclusive upper bound, so the conversion adds one; steps are converted to the exact grid
``low + k * step`` that Optuna samples, so both libraries draw from the same values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, Union

from hpsearch.errors import ConfigError
from hpsearch.keys import RESERVED_PREFIX
from hpsearch.scalars import parse_bool, parse_float_value, parse_int_value

#: Largest grid a float ``step`` may produce; finer steps are effectively continuous.
MAX_GRID_POINTS = 100_000


def _dec(x: float) -> Decimal:
    return Decimal(repr(x))


@dataclass(frozen=True)
class FloatParam:
    """A float in ``[low, high]`` (inclusive), optionally log-scaled or on a step grid."""

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def grid(self) -> list[float]:
        """The values ``low + k * step`` up to ``high``, computed without drift."""
        assert self.step is not None
        n = int((_dec(self.high) - _dec(self.low)) / _dec(self.step))
        return [float(_dec(self.low) + k * _dec(self.step)) for k in range(n + 1)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal sample of this parameter."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is not None:
            k = (_dec(float(value)) - _dec(self.low)) / _dec(self.step)
            return abs(k - k.to_integral_value()) < Decimal("1e-9")
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "float", "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = self.step
        return out


@dataclass(frozen=True)
class IntParam:
    """An integer in ``[low, high]`` (inclusive), optionally log-scaled or stepped."""

    low: int
    high: int
    log: bool = False
    step: int = 1

    def grid(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.low <= value <= self.high and (value - self.low) % self.step == 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "int", "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.step != 1:
            out["step"] = self.step
        return out


@dataclass(frozen=True)
class CategoricalParam:
    """One of a fixed list of scalar choices (str, int, float, bool or null)."""

    choices: tuple[Any, ...]

    def contains(self, value: Any) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "choices": list(self.choices)}


Param = Union[FloatParam, IntParam, CategoricalParam]


class Space(Mapping[str, Param]):
    """An ordered, immutable mapping of parameter name -> parameter."""

    def __init__(self, params: Mapping[str, Param]):
        self._params = dict(params)

    def __getitem__(self, key: str) -> Param:
        return self._params[key]

    def __iter__(self):
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self._params == other._params

    def __hash__(self) -> int:
        return hash(tuple(self._params.items()))

    def __repr__(self) -> str:
        return f"Space({self._params!r})"

    def to_dict(self) -> dict[str, Any]:
        """Plain data, the shape ``space.yaml`` uses."""
        return {name: p.to_dict() for name, p in self._params.items()}

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether ``params`` has exactly this space's names, each value in bounds."""
        return set(params) == set(self._params) and all(
            p.contains(params[n]) for n, p in self._params.items()
        )

    def to_optuna(self) -> dict[str, Any]:
        """Return ``{name: optuna.distributions.BaseDistribution}``."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, Any] = {}
        for name, p in self._params.items():
            if isinstance(p, FloatParam):
                out[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
            elif isinstance(p, IntParam):
                out[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
            else:
                out[name] = CategoricalDistribution(list(p.choices))
        return out

    def to_ray(self) -> dict[str, Any]:
        """Return ``{name: ray.tune domain}`` sampling the same inclusive ranges."""
        from ray import tune

        out: dict[str, Any] = {}
        for name, p in self._params.items():
            if isinstance(p, (FloatParam, IntParam)) and p.low == p.high:
                # Ray's log domains round-trip through exp(log(x)) and may leave the point.
                out[name] = tune.choice([p.low])
            elif isinstance(p, FloatParam):
                if p.step is not None:
                    out[name] = tune.choice(p.grid())
                elif p.log:
                    out[name] = tune.loguniform(p.low, p.high)
                else:
                    out[name] = tune.uniform(p.low, p.high)
            elif isinstance(p, IntParam):
                if p.step != 1:
                    out[name] = tune.choice(p.grid())
                elif p.log:
                    # Ray's integer upper bound is exclusive; ours is inclusive.
                    out[name] = tune.lograndint(p.low, p.high + 1)
                else:
                    out[name] = tune.randint(p.low, p.high + 1)
            else:
                out[name] = tune.choice(list(p.choices))
        return out


# ---------------------------------------------------------------------------------------
# Parsing (called by hpsearch.config for the ``space`` key).


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
    for key in ("low", "high", "choices"):
        if key in allowed and key not in raw:
            raise ConfigError(f"{path}.{key}", "is required")


def _parse_numeric(raw: Mapping[str, Any], path: str, is_int: bool) -> Param:
    number = parse_int_value if is_int else parse_float_value
    _check_keys(raw, ("type", "low", "high", "log", "step"), path)
    low = number(raw["low"], f"{path}.low")
    high = number(raw["high"], f"{path}.high")
    log = parse_bool(raw.get("log", False), f"{path}.log")
    step_raw = raw.get("step")
    step = None if step_raw is None else number(step_raw, f"{path}.step")
    if low > high:
        raise ConfigError(f"{path}.low", f"must be <= high ({high!r})", low)
    if log and low <= 0:
        raise ConfigError(f"{path}.low", "must be > 0 with log: true", low)
    if step is not None:
        if step <= 0:
            raise ConfigError(f"{path}.step", "must be > 0", step)
        if log and not (is_int and step == 1):
            raise ConfigError(f"{path}.step", "cannot be combined with log: true", step)
        span = _dec(high) - _dec(low)
        if span % _dec(step) != 0:
            raise ConfigError(
                f"{path}.step", f"must divide high - low ({float(span):g}) exactly", step
            )
        if not is_int and span / _dec(step) > MAX_GRID_POINTS:
            raise ConfigError(
                f"{path}.step", f"gives more than {MAX_GRID_POINTS} values; drop it", step
            )
    if is_int:
        return IntParam(low, high, log, 1 if step is None else step)
    if not math.isfinite(high - low):
        raise ConfigError(f"{path}.high", "range is too large", high)
    return FloatParam(low, high, log, step)


def _parse_categorical(raw: Mapping[str, Any], path: str) -> CategoricalParam:
    _check_keys(raw, ("type", "choices"), path)
    choices = raw["choices"]
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{path}.choices", "must be a non-empty list", choices)
    seen: list[Any] = []
    for i, c in enumerate(choices):
        if c is not None and not isinstance(c, (str, int, float, bool)):
            raise ConfigError(f"{path}.choices[{i}]", "must be a string, number, bool or null", c)
        if isinstance(c, float) and not math.isfinite(c):
            raise ConfigError(f"{path}.choices[{i}]", "must be a finite number", c)
        # Optuna looks choices up by ==, so 1, 1.0 and true would be recorded as one.
        for j, s in enumerate(seen):
            if c == s:
                same = "is a duplicate" if type(c) is type(s) else (
                    f"equals choices[{j}] ({s!r}); Optuna cannot tell them apart")
                raise ConfigError(f"{path}.choices[{i}]", same, c)
        seen.append(c)
    return CategoricalParam(tuple(choices))


def parse_space(raw: Any, path: str = "space") -> Space:
    """Validate the ``space`` mapping of ``space.yaml`` into a :class:`Space`."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(path, "must be a non-empty mapping of parameter name -> definition", raw)
    params: dict[str, Param] = {}
    for name, spec in raw.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(where, "parameter names must be non-empty strings", name)
        if name.startswith(RESERVED_PREFIX):
            raise ConfigError(where, f"names starting with '{RESERVED_PREFIX}' are reserved")
        if not isinstance(spec, Mapping):
            raise ConfigError(where, "must be a mapping with a 'type'", spec)
        kind = spec.get("type")
        if kind == "float":
            params[name] = _parse_numeric(spec, where, is_int=False)
        elif kind == "int":
            params[name] = _parse_numeric(spec, where, is_int=True)
        elif kind == "categorical":
            params[name] = _parse_categorical(spec, where)
        else:
            raise ConfigError(f"{where}.type", "must be float, int or categorical", kind)
    return Space(params)
