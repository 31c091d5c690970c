"""The search space: parameter types and their *only* conversion to Optuna and Ray.

Pure module: Optuna and Ray are imported inside the conversion methods, never at module
level. Bounds are inclusive everywhere in hpsearch. Ray's integer domains take an
exclusive upper bound, so the conversion adds one; steps are converted to the exact grid
``low + k * step`` that Optuna samples, so both libraries draw from the same values.

Constants (``channels: 16`` or ``{type: const, value: 16}``) are Optuna params with one
choice: they reach ``build(params)``, show in the study and the dashboard like any
param, and are never sampled (every sampler returns the only choice).

Conditional params (``condition: {optimizer: sgd}``) are *active* only when every parent
named in their condition is active and holds one of the listed values; an inactive param
is absent from the params a trial gets and from its Optuna trial. Sampling is therefore
define-by-run (:meth:`Space.suggest`): the space is kept in an order where parents come
before their children, and each active param is suggested in that order.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, Mapping, Union

from hpsearch.errors import ConfigError
from hpsearch.keys import RESERVED_PREFIX
from hpsearch.scalars import parse_bool, parse_float_value, parse_int_value

#: Largest grid a float ``step`` may produce; finer steps are effectively continuous.
MAX_GRID_POINTS = 100_000

#: Most configurations ``search.sampler: grid`` enumerates (Optuna lists them all).
MAX_GRID_CONFIGURATIONS = 100_000

# A number in exponent form without a dot (``1e-4``): YAML 1.1, which PyYAML implements,
# reads it as a string. Constants and choices written so are read as floats.
_EXPONENT_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


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
        return any(_same(value, c) for c in self.choices)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "choices": list(self.choices)}


@dataclass(frozen=True)
class ConstParam:
    """A fixed scalar value (str, int, float, bool or null): passed to ``build`` and
    recorded in the study as a one-choice categorical, never sampled."""

    value: Any

    def contains(self, value: Any) -> bool:
        return _same(value, self.value)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "const", "value": self.value}


Param = Union[FloatParam, IntParam, CategoricalParam, ConstParam]

#: ``{parent name: the parent's values that activate the param}``.
Condition = Mapping[str, tuple]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type (``1``, ``1.0`` and ``True`` are three values here)."""
    return a == b and type(a) is type(b)


class Space(Mapping[str, Param]):
    """An ordered, immutable mapping of parameter name -> parameter, with conditions.

    The order is the order of ``space.yaml`` except that a conditional param always comes
    after the params its condition names (:func:`parse_space` puts it there).

    Args:
        params: ``{name: param}`` in sampling order.
        conditions: ``{name: {parent: allowed values}}`` for the conditional params; every
            parent must exist and come before the param.
    """

    def __init__(self, params: Mapping[str, Param],
                 conditions: Mapping[str, Mapping[str, Iterable[Any]]] | None = None):
        self._params = dict(params)
        self._conditions: dict[str, dict[str, tuple]] = {
            name: {parent: tuple(values) for parent, values in condition.items()}
            for name, condition in (conditions or {}).items() if condition
        }
        position = {name: i for i, name in enumerate(self._params)}
        for name, condition in self._conditions.items():
            for parent in condition:
                if name not in position or position.get(parent, len(position)) >= position[name]:
                    raise ValueError(f"condition of {name!r}: {parent!r} must be a param "
                                     "placed before it")

    def __getitem__(self, key: str) -> Param:
        return self._params[key]

    def __iter__(self):
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Space) and self._params == other._params
                and self._conditions == other._conditions)

    def __hash__(self) -> int:
        return hash((tuple(self._params.items()),
                     tuple((n, tuple(c.items())) for n, c in self._conditions.items())))

    def __repr__(self) -> str:
        if self._conditions:
            return f"Space({self._params!r}, conditions={self._conditions!r})"
        return f"Space({self._params!r})"

    # -- conditions ---------------------------------------------------------------------

    @property
    def is_conditional(self) -> bool:
        """Whether some param has a condition (then sampling is define-by-run)."""
        return bool(self._conditions)

    def condition(self, name: str) -> Condition | None:
        """``{parent: allowed values}`` of param ``name``, or None if it is unconditional."""
        condition = self._conditions.get(name)
        return None if condition is None else dict(condition)

    def is_active(self, name: str, values: Mapping[str, Any]) -> bool:
        """Whether param ``name`` is active given the values of the params before it.

        A param is active when every parent of its condition is active (present in
        ``values``) and holds one of the allowed values (same type: ``1`` is not ``true``).
        """
        condition = self._conditions.get(name)
        if not condition:
            return True
        for parent, allowed in condition.items():
            if parent not in values or not any(_same(values[parent], a) for a in allowed):
                return False
        return True

    def constants(self) -> dict[str, Any]:
        """``{name: value}`` of the const params (active or not)."""
        return {n: p.value for n, p in self._params.items() if isinstance(p, ConstParam)}

    # -- plain data ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain data, the shape ``space.yaml`` uses (``parse_space`` reads it back)."""
        out: dict[str, Any] = {}
        for name, p in self._params.items():
            spec = p.to_dict()
            condition = self._conditions.get(name)
            if condition:
                spec["condition"] = {parent: values[0] if len(values) == 1 else list(values)
                                     for parent, values in condition.items()}
            out[name] = spec
        return out

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether ``params`` holds exactly the active params, each value legal."""
        seen: dict[str, Any] = {}
        for name, p in self._params.items():
            if self.is_active(name, seen):
                if name not in params or not p.contains(params[name]):
                    return False
                seen[name] = params[name]
            elif name in params:
                return False
        return len(seen) == len(params)

    # -- conversions --------------------------------------------------------------------

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Suggest every active param on an Optuna trial (define-by-run), in order.

        Args:
            trial: An ``optuna.trial.Trial`` (from ``study.ask()``); values fixed on it
                (an enqueued trial) are returned as fixed.

        Returns:
            ``{name: value}`` of the active params; inactive ones are absent, from the
            returned params and from the trial alike.
        """
        out: dict[str, Any] = {}
        for name, p in self._params.items():
            if not self.is_active(name, out):
                continue
            if isinstance(p, FloatParam):
                out[name] = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, IntParam):
                out[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, ConstParam):
                out[name] = trial.suggest_categorical(name, [p.value])
            else:
                out[name] = trial.suggest_categorical(name, list(p.choices))
        return out

    def to_optuna(self) -> dict[str, Any]:
        """Return ``{name: optuna.distributions.BaseDistribution}`` of every param.

        Conditional params are included whether or not they are active: the mapping is
        the union of the spaces a trial can have. Sample with :meth:`suggest`, which
        leaves inactive params out.
        """
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
            elif isinstance(p, ConstParam):
                out[name] = CategoricalDistribution([p.value])
            else:
                out[name] = CategoricalDistribution(list(p.choices))
        return out

    def grid(self, field: str = "search.sampler") -> dict[str, list[Any]]:
        """The values of each param for Optuna's GridSampler: ``{name: values}``.

        Categoricals give their choices, constants their value, ints and stepped floats
        their ``low + k * step`` grid.

        Raises:
            ConfigError: (naming ``field``) for a float without a step, a conditional
                space, or more than ``MAX_GRID_CONFIGURATIONS`` configurations.
        """
        if self._conditions:
            name = next(iter(self._conditions))
            raise ConfigError(field, f"grid cannot enumerate conditional params (space.{name} "
                              "has a condition); use tpe or random", "grid")
        out: dict[str, list[Any]] = {}
        size = 1
        for name, p in self._params.items():
            if isinstance(p, FloatParam) and p.step is None:
                raise ConfigError(field, "grid needs params with finitely many values "
                                  "(categorical, const, int, or float with a step); "
                                  f"space.{name} is a continuous float", "grid")
            if isinstance(p, CategoricalParam):
                n = len(p.choices)
            elif isinstance(p, ConstParam):
                n = 1
            elif isinstance(p, IntParam):
                n = (p.high - p.low) // p.step + 1
            else:
                n = int((_dec(p.high) - _dec(p.low)) / _dec(p.step)) + 1
            size *= n
            if size > MAX_GRID_CONFIGURATIONS:
                raise ConfigError(field, f"grid enumerates at most {MAX_GRID_CONFIGURATIONS} "
                                  f"configurations; this space has more (space.{name} alone "
                                  f"has {n} values)", "grid")
        for name, p in self._params.items():
            if isinstance(p, CategoricalParam):
                out[name] = list(p.choices)
            elif isinstance(p, ConstParam):
                out[name] = [p.value]
            else:
                out[name] = p.grid()  # type: ignore[union-attr]
        return out

    def grid_size(self, field: str = "search.sampler") -> int:
        """Configurations in :meth:`grid` (raises as it does)."""
        size = 1
        for values in self.grid(field).values():
            size *= len(values)
        return size

    def to_ray(self) -> dict[str, Any]:
        """Return ``{name: ray.tune domain}`` sampling the same inclusive ranges.

        Raises:
            ValueError: For a conditional space: a Ray Tune search space cannot leave a
                param out (hpsearch itself samples with Optuna, see :meth:`suggest`).
        """
        from ray import tune

        if self._conditions:
            raise ValueError("a Ray Tune search space cannot express conditional params; "
                             "sample with Space.suggest on an Optuna trial")
        out: dict[str, Any] = {}
        for name, p in self._params.items():
            if isinstance(p, ConstParam):
                out[name] = tune.choice([p.value])
            elif isinstance(p, (FloatParam, IntParam)) and p.low == p.high:
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
# Parsing (called by hpsearch.spec.config for the ``space`` key).


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
