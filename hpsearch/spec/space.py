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

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, Mapping, Union

from hpsearch.errors import ConfigError

#: Most configurations ``search.sampler: grid`` enumerates (Optuna lists them all).
MAX_GRID_CONFIGURATIONS = 100_000


def to_decimal(x: float) -> Decimal:
    """``x`` as the decimal its shortest repr reads (``0.1`` is exactly 1/10): steps and
    grids are computed on these, so ``low + k x step`` lands on the values written."""
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
        n = int((to_decimal(self.high) - to_decimal(self.low)) / to_decimal(self.step))
        return [float(to_decimal(self.low) + k * to_decimal(self.step)) for k in range(n + 1)]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a legal sample of this parameter."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is not None:
            k = (to_decimal(float(value)) - to_decimal(self.low)) / to_decimal(self.step)
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
    after the params its condition names
    (:func:`~hpsearch.spec.space_parse.parse_space` puts it there).

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
        """Plain data, the shape ``space.yaml`` uses
        (:func:`~hpsearch.spec.space_parse.parse_space` reads it back)."""
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
                n = int((to_decimal(p.high) - to_decimal(p.low)) / to_decimal(p.step)) + 1
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
