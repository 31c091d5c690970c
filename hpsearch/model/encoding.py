"""Hyperparameters as numbers the model can split on, and candidate configurations.

Pure module. Each hyperparameter is a :class:`Dimension`: a number placed on its range
(0 to 1, on a log scale where the space says so: units do not matter), a categorical one
as the index of its choice over the number of choices; a parameter a configuration does
not have (an inactive conditional one) is :data:`MISSING`, outside every range, so a tree
separates it from every value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

#: The encoding of a parameter a configuration does not have.
MISSING = -1.0


@dataclass(frozen=True)
class Dimension:
    """One hyperparameter of the space.

    Attributes:
        name: Its name.
        low: Lower bound (numbers).
        high: Upper bound (numbers).
        log: Placed on a log scale (needs ``low > 0``).
        integer: Decoded values are whole numbers.
        step: Decoded values lie on ``low + k * step`` (None: continuous).
        choices: The choices of a categorical parameter (then low/high are unused).
    """

    name: str
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    integer: bool = False
    step: float | None = None
    choices: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.choices is None:
            if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.high < self.low:
                raise ValueError(f"{self.name}: needs low <= high (got {self.low}, {self.high})")
            if self.log and self.low <= 0:
                raise ValueError(f"{self.name}: a log scale needs low > 0 (got {self.low})")
        elif not self.choices:
            raise ValueError(f"{self.name}: a categorical needs at least one choice")

    def encode(self, value: Any) -> float:
        """``value`` on [0, 1] (:data:`MISSING` for None or an unknown choice)."""
        if value is None:
            return MISSING
        if self.choices is not None:
            for i, choice in enumerate(self.choices):
                if choice == value and type(choice) is type(value):
                    return i / max(1, len(self.choices) - 1)
            return MISSING
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return MISSING
        low, high, v = self.low, self.high, float(value)
        if self.log:
            low, high, v = math.log(low), math.log(high), math.log(max(v, self.low))
        return 0.0 if high <= low else min(1.0, max(0.0, (v - low) / (high - low)))

    def decode(self, unit: float) -> Any:
        """The value at ``unit`` (clipped to [0, 1]) of this dimension."""
        u = min(1.0, max(0.0, float(unit)))
        if self.choices is not None:
            return self.choices[min(len(self.choices) - 1, int(u * len(self.choices)))]
        if self.log:
            value = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            value = self.low + u * (self.high - self.low)
        if self.step:
            value = self.low + round((value - self.low) / self.step) * self.step
        value = min(self.high, max(self.low, value))
        return int(round(value)) if self.integer else float(value)


def encode(dims: Sequence[Dimension], params: Mapping[str, Any]) -> tuple[float, ...]:
    """A configuration as the model's numbers, in the order of ``dims``."""
    return tuple(d.encode(params.get(d.name)) for d in dims)


def random_candidates(dims: Sequence[Dimension], n: int,
                      rng: np.random.Generator) -> list[dict[str, Any]]:
    """``n`` configurations drawn uniformly over the encoded space (log-uniform where a
    dimension is on a log scale; each choice equally likely)."""
    units = rng.random((n, len(dims)))
    return [{d.name: d.decode(u) for d, u in zip(dims, row)} for row in units]


def local_candidates(dims: Sequence[Dimension], around: Sequence[Mapping[str, Any]],
                     per_point: int, scale: float,
                     rng: np.random.Generator) -> list[dict[str, Any]]:
    """``per_point`` neighbours of each configuration of ``around``: every numeric
    dimension moved by a normal step of ``scale`` (in encoded units), a categorical one
    redrawn with probability ``scale``."""
    out = []
    for params in around:
        base = encode(dims, params)
        for _ in range(per_point):
            moved = {}
            for d, u in zip(dims, base):
                if u == MISSING:
                    u = rng.random()
                if d.choices is not None:
                    moved[d.name] = (d.decode(rng.random()) if rng.random() < scale
                                     else d.decode(u))
                else:
                    moved[d.name] = d.decode(u + rng.normal(0.0, scale))
            out.append(moved)
    return out
