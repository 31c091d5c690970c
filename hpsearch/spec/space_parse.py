"""The ``space`` key of ``space.yaml`` -> a :class:`~hpsearch.spec.space.Space`.

Pure module: the syntax of each param (``float``, ``int``, ``categorical``, ``const``,
or a bare constant), their checks (bounds, steps on an exact grid, choices, reserved
names), and the conditions (``condition: {parent: value}``), ordered so that parents
come before their children. Called by :mod:`hpsearch.spec.config` for the ``space`` key.
"""

from __future__ import annotations

import heapq
import math
import re
from typing import Any, Mapping

from hpsearch.errors import ConfigError
from hpsearch.keys import RESERVED_PREFIX
from hpsearch.scalars import parse_bool, parse_float_value, parse_int_value
from hpsearch.spec.space import (CategoricalParam, ConstParam, FloatParam, IntParam, Param,
                                 Space, to_decimal)

#: Largest grid a float ``step`` may produce; finer steps are effectively continuous.
MAX_GRID_POINTS = 100_000

# A number in exponent form without a dot (``1e-4``): YAML 1.1, which PyYAML implements,
# reads it as a string. Constants and choices written so are read as floats.
_EXPONENT_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    allowed = (*allowed, "condition")
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
    for key in ("low", "high", "choices", "value"):
        if key in allowed and key not in raw:
            raise ConfigError(f"{path}.{key}", "is required")


def scalar_value(value: Any, path: str) -> Any:
    """A constant, choice or condition value: a string, number, bool or null.

    A string in exponent form without a dot (``1e-4``, which PyYAML reads as a string)
    becomes a float; floats must be finite.
    """
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise ConfigError(path, "must be a string, number, bool or null", value)
    if isinstance(value, str) and _EXPONENT_RE.fullmatch(value):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, "must be a finite number", value)
    return value


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
        span = to_decimal(high) - to_decimal(low)
        if span % to_decimal(step) != 0:
            raise ConfigError(
                f"{path}.step", f"must divide high - low ({float(span):g}) exactly", step
            )
        if not is_int and span / to_decimal(step) > MAX_GRID_POINTS:
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
    # Plain ints, bools, nulls and strings that cannot be an exponent need no check; the
    # rest go through scalar_value. Comprehensions and a set keep a list of millions of
    # choices linear and fast; the slow loop only runs to locate a duplicate.
    out = list(choices)
    for i in [i for i, c in enumerate(out) if not (
            c is None or type(c) is int or type(c) is bool
            or (type(c) is str and "e" not in c and "E" not in c))]:
        out[i] = scalar_value(out[i], f"{path}.choices[{i}]")
    if len(set(out)) != len(out):
        # Optuna looks choices up by ==, so 1, 1.0 and true would be recorded as one
        # (equal values hash alike, so the dict finds the earlier one).
        first: dict[Any, int] = {}
        for i, c in enumerate(out):
            j = first.setdefault(c, i)
            if j != i:
                s = out[j]
                same = "is a duplicate" if type(c) is type(s) else (
                    f"equals choices[{j}] ({s!r}); Optuna cannot tell them apart")
                raise ConfigError(f"{path}.choices[{i}]", same, c)
    return CategoricalParam(tuple(out))


def _parse_const(raw: Mapping[str, Any], path: str) -> ConstParam:
    _check_keys(raw, ("type", "value"), path)
    return ConstParam(scalar_value(raw["value"], f"{path}.value"))


def _parse_condition(raw: Any, path: str) -> dict[str, tuple]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(path, "must be a mapping of param name -> value (or a list of "
                          "values), e.g. {optimizer: sgd}", raw)
    out: dict[str, tuple] = {}
    for parent, values in raw.items():
        where = f"{path}.{parent}"
        if not isinstance(parent, str) or not parent:
            raise ConfigError(where, "must name a param", parent)
        items = values if isinstance(values, list) else [values]
        if not items:
            raise ConfigError(where, "must be a value or a non-empty list of values", values)
        out[parent] = tuple(scalar_value(v, where) for v in items)
    return out


def _check_condition(name: str, condition: Mapping[str, tuple], params: Mapping[str, Param],
                     path: str) -> None:
    for parent, values in condition.items():
        where = f"{path}.{name}.condition.{parent}"
        if parent == name:
            raise ConfigError(where, "a param cannot be conditional on itself")
        if parent not in params:
            import difflib

            close = difflib.get_close_matches(parent, list(params), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(where, f"names no param of {path}{hint}", parent)
        p = params[parent]
        if isinstance(p, FloatParam):
            raise ConfigError(where, f"{path}.{parent} is a float, which a condition never "
                              "matches exactly; condition on a categorical, int or const param",
                              values[0] if len(values) == 1 else list(values))
        for v in values:
            if not p.contains(v):
                raise ConfigError(where, f"is not a value of {path}.{parent} "
                                  f"({_describe(p)})", v)


def _describe(p: Param) -> str:
    if isinstance(p, CategoricalParam):
        shown = ", ".join(repr(c) for c in p.choices[:10])
        return f"choices {shown}{', ...' if len(p.choices) > 10 else ''}"
    if isinstance(p, ConstParam):
        return f"the constant {p.value!r}"
    assert isinstance(p, IntParam)
    step = f" step {p.step}" if p.step != 1 else ""
    return f"int {p.low}..{p.high}{step}"


def _parents_first(names: list[str], conditions: Mapping[str, Mapping[str, tuple]],
                   path: str) -> list[str]:
    """``names`` reordered so that every parent comes before its children; otherwise in
    written order. Raises ConfigError naming a cycle."""
    index = {n: i for i, n in enumerate(names)}
    waiting = {n: set(conditions.get(n, ())) for n in names}
    children: dict[str, list[str]] = {n: [] for n in names}
    for child, parents in waiting.items():
        for parent in parents:
            children[parent].append(child)
    ready = [index[n] for n, parents in waiting.items() if not parents]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for child in children[name]:
            waiting[child].discard(name)
            if not waiting[child]:
                heapq.heappush(ready, index[child])
    if len(order) < len(names):
        # Follow unplaced parents from an unplaced param until one repeats: a cycle.
        node = min((n for n in names if waiting[n]), key=index.__getitem__)
        trail: list[str] = []
        while node not in trail:
            trail.append(node)
            node = min(waiting[node], key=index.__getitem__)
        cycle = trail[trail.index(node):] + [node]
        raise ConfigError(f"{path}.{cycle[0]}.condition",
                          f"conditions form a cycle: {' -> '.join(cycle)}")
    return order


def parse_space(raw: Any, path: str = "space") -> Space:
    """Validate the ``space`` mapping of ``space.yaml`` into a :class:`Space`.

    Each entry is a mapping with a ``type`` (``float``, ``int``, ``categorical``,
    ``const``) and optionally a ``condition``, or a bare scalar, which is a constant.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(path, "must be a non-empty mapping of parameter name -> definition", raw)
    params: dict[str, Param] = {}
    conditions: dict[str, dict[str, tuple]] = {}
    for name, spec in raw.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(where, "parameter names must be non-empty strings", name)
        if name.startswith(RESERVED_PREFIX):
            raise ConfigError(where, f"names starting with '{RESERVED_PREFIX}' are reserved")
        if isinstance(spec, (str, int, float, bool)):
            params[name] = ConstParam(scalar_value(spec, where))
            continue
        if not isinstance(spec, Mapping):
            raise ConfigError(where, "must be a mapping with a 'type', or a constant (a string, "
                              "number or bool)", spec)
        kind = spec.get("type")
        if kind == "float":
            params[name] = _parse_numeric(spec, where, is_int=False)
        elif kind == "int":
            params[name] = _parse_numeric(spec, where, is_int=True)
        elif kind == "categorical":
            params[name] = _parse_categorical(spec, where)
        elif kind == "const":
            params[name] = _parse_const(spec, where)
        else:
            raise ConfigError(f"{where}.type", "must be float, int, categorical or const", kind)
        if "condition" in spec:
            conditions[name] = _parse_condition(spec["condition"], f"{where}.condition")
    for name, condition in conditions.items():
        _check_condition(name, condition, params, path)
    order = _parents_first(list(params), conditions, path)
    return Space({n: params[n] for n in order}, conditions)
