"""The configuration ``hpsearch plan`` probes: one point standing for the whole space.

Pure module: it reads the space's parameters and picks a value for each (``mid``: the
middle of every range; ``high``: the top of every range and the largest numeric choice),
on each parameter's step grid, keeping only the parameters a trial would have.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from hpsearch.errors import ConfigError
from hpsearch.spec.space import CategoricalParam, ConstParam, FloatParam, IntParam, Space

POINTS = ("mid", "high")


def _on_grid(value: float, param: FloatParam | IntParam) -> float | int:
    """``value`` moved to the nearest legal value of ``param`` (its ``low + k x step``
    grid where it has a step; never outside ``[low, high]``); ties go up."""
    if isinstance(param, IntParam):
        step = param.step or 1
        last = (param.high - param.low) // step
        k = min(last, max(0, math.floor((value - param.low) / step + 0.5)))
        return param.low + k * step
    if param.step is None:
        return min(param.high, max(param.low, float(f"{value:.6g}")))
    # Decimal arithmetic: (0.25 - 0.1) / 0.1 is 1.4999999999999998 in floats.
    low, step = Decimal(repr(param.low)), Decimal(repr(param.step))
    last = int((Decimal(repr(param.high)) - low) / step)
    k = min(last, max(0, math.floor((Decimal(repr(float(value))) - low) / step
                                    + Decimal("0.5"))))
    return float(low + k * step)


def representative_params(space: Space, point: str = "mid") -> dict[str, Any]:
    """One configuration standing for the space.

    ``mid``: each float/int at the midpoint of its range (the geometric mean with
    ``log: true``), moved to the nearest value on its step grid (ints to the nearest
    integer, ties up; floats without a step to 6 significant digits); each categorical
    at its first choice. ``high``: each float/int at the largest value of its range
    (on its grid) and each categorical of numbers at its largest choice (the largest
    model where size grows with a param: width, depth, batch size), other categoricals
    at their first choice. Constants keep their value; a conditional param is included
    only where the values picked for its parents activate it (as in a trial).
    """
    if point not in POINTS:
        raise ConfigError("--point", f"must be one of {', '.join(POINTS)}", point)
    out: dict[str, Any] = {}
    for name, param in space.items():
        if not space.is_active(name, out):
            continue
        if isinstance(param, ConstParam):
            out[name] = param.value
            continue
        if isinstance(param, CategoricalParam):
            numbers = [c for c in param.choices
                       if isinstance(c, (int, float)) and not isinstance(c, bool)]
            if point == "high" and numbers and len(numbers) == len(param.choices):
                out[name] = max(numbers)
            else:
                out[name] = param.choices[0]
            continue
        if point == "high":
            target = param.high
        elif param.log:
            target = math.exp((math.log(param.low) + math.log(param.high)) / 2)
        else:
            target = (param.low + param.high) / 2
        out[name] = _on_grid(target, param)
    return out

