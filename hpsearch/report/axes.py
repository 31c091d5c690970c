"""The axes of the report's plots: the metric axis (which pins values far outside the
COMPLETE trials' range to its edge) and the money axis.

Pure module: no unit and no direction in the rules, so scaling the metric or flipping
its sign pins the same trials.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from statistics import median
from typing import Iterable

from hpsearch.scalars import finite as _finite

#: How far the metric axis reaches beyond the COMPLETE trials' values, in multiples of
#: a spread (see :func:`metric_axis`): when their own range is the spread they fill at
#: least a fifth of the axis, so a pruned trial that diverged (a loss of 1e6, an
#: accuracy at chance) cannot flatten them.
CLIP_MARGIN = 2.0
#: Padding of an axis range on each side, as a share of its span.
AXIS_PAD = 0.08
#: The band at an edge of the metric axis where pinned values are drawn (share of the
#: span of the values drawn in place), apart from the lowest or highest of those.
PIN_BAND = 0.1


class Pin(enum.Enum):
    """Where a value is drawn on the metric axis: in place, or pinned to an edge."""

    BELOW = -1
    IN_PLACE = 0
    ABOVE = 1


@dataclass(frozen=True)
class MetricAxis:
    """The metric axis of the plots: its range, and the window of values drawn in place.

    Attributes:
        low: Bottom of the axis range (metric units).
        high: Top of the axis range.
        window: ``(low, high)`` of the values drawn where they are; a value outside is
            *pinned*: drawn in a band at the edge of the axis it lies beyond, apart from
            the values drawn in place. None when every value is drawn in place.
        pinned_low: Where values pinned below are drawn (None: no such value).
        pinned_high: Where values pinned above are drawn.
    """

    low: float
    high: float
    window: tuple[float, float] | None = None
    pinned_low: float | None = None
    pinned_high: float | None = None

    def place(self, value: float) -> tuple[float, Pin]:
        """Where to draw ``value``: ``(value, IN_PLACE)``, or the band of the edge it lies
        beyond, ``(y, BELOW)`` or ``(y, ABOVE)`` (inside the axis range)."""
        if self.window is None or self.window[0] <= value <= self.window[1]:
            return value, Pin.IN_PLACE
        if value < self.window[0]:
            return (self.low if self.pinned_low is None else self.pinned_low), Pin.BELOW
        return (self.high if self.pinned_high is None else self.pinned_high), Pin.ABOVE


def _padded(low: float, high: float) -> tuple[float, float]:
    pad = AXIS_PAD * (high - low) if high > low else 0.1 * abs(high) or 0.5
    return low - pad, high + pad


def metric_axis(complete: Iterable[float | None],
                others: Iterable[float | None]) -> MetricAxis | None:
    """The metric axis for the values of COMPLETE trials and of every other trial.

    The axis follows the COMPLETE trials: a value farther from their range than
    ``CLIP_MARGIN`` times a spread is pinned to the edge instead of stretching the axis.
    The spread is the larger of the COMPLETE trials' range and the median distance of
    all values from their median (so two close COMPLETE trials do not pin the bulk of
    the pruned ones, only the far ones); their magnitude if both are 0. Without a
    COMPLETE trial nothing is pinned. The rule uses no direction and no unit: scaling
    the metric or flipping its sign pins the same trials. None when there is no finite
    value.
    """
    done = [v for v in map(_finite, complete) if v is not None]
    rest = [v for v in map(_finite, others) if v is not None]
    values = done + rest
    if not values:
        return None
    low, high = min(done, default=0.0), max(done, default=0.0)
    spread = max(high - low, median([abs(v - median(values)) for v in values]))
    spread = spread or abs(high)
    if not done or spread == 0:
        return MetricAxis(*_padded(min(values), max(values)))
    # A hair wider, so that a value on the edge stays put whatever the metric's units.
    reach = CLIP_MARGIN * spread * (1 + 1e-9)
    window = (low - reach, high + reach)
    inside = [v for v in values if window[0] <= v <= window[1]]
    if len(inside) == len(values):
        return MetricAxis(*_padded(min(values), max(values)))
    bottom, top = _padded(min(inside), max(inside))
    band = PIN_BAND * (top - bottom)
    below, above = any(v < window[0] for v in values), any(v > window[1] for v in values)
    return MetricAxis(bottom - band if below else bottom, top + band if above else top,
                      window=window, pinned_low=bottom - band / 2 if below else None,
                      pinned_high=top + band / 2 if above else None)



def cost_axis(costs: Iterable[float | None]) -> tuple[float, float]:
    """A money axis: from 0 to a little above the largest cost; ``(0, 1)`` without one.

    Money is never negative and 0 is its natural origin, so equal costs (a fixed price
    per trial) still read as amounts rather than as a point in the middle of nowhere.
    """
    top = max((c for c in map(_finite, costs) if c is not None), default=0.0)
    return (0.0, top * (1 + AXIS_PAD)) if top > 0 else (0.0, 1.0)
