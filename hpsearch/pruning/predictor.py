"""Where a trial's final metric will land: a nearest-neighbour model learned in the run,
with a conformal 80% interval.

Pure module. Everything is in sign-adjusted scores (higher is better) and measured in
the run's own unit at each epoch, the spread (interquartile range) of the scores seen
there, so scaling the metric or negating it with the mode flipped changes nothing.

The model. A trial seen after epoch ``e`` is described by

* its *level*: its score at ``e`` minus the median score there, in spreads;
* its *slope*: its mean gain per epoch over the last epochs, in spreads;
* its *hyperparameters*, each placed on the range of its values seen in the run (0 to
  1, on a log scale for positive values: units do not matter), a categorical one as
  equal or not.

Every trial that trained to the end is an example: its features at ``e`` and what it
gained from ``e`` to its end (in spreads). The prediction for a trial is its score plus
the median gain of its K nearest examples (K = sqrt of their number, at least
MIN_NEIGHBOURS); the interval adds the 10th and 90th percentile of the examples'
leave-one-out residuals (a jackknife conformal interval: each example predicted from the
others, so the interval is as wide as the model's own errors were in this run).

Why a widening: the examples are the trials the policy let finish, which stood high at
``e``; a trial being judged usually stands lower, where the model extrapolates. Its
residuals are therefore scaled by ``1 + distance to the nearest example / typical
distance of an example to its nearest other`` (an example's own place keeps the
jackknife width; a query as far from the examples as they are from each other gets
twice it, one twice as far three times). On the policy benchmark's 13 development tasks
(accuracy, seeds 0-4) this widening holds 86% of true finals in the 80% interval of the
trials the policy paused or stopped, with 64/65 hits; without the ``1 +`` (no widening
up to the typical distance) 78%, with 62/65 at the same money. On unbiased examples
(synthetic curves, examples drawn like the queries) it over-covers (about 93-99%). The calibration of the interval (share of true finals inside it) is measured
by the policy benchmark and quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: Fewest neighbours a prediction uses (with fewer examples: all of them). Three is the
#: least whose median ignores one odd curve.
MIN_NEIGHBOURS = 3
#: Weight of the hyperparameters against the curve in the distance (the curve features
#: count 1 each; the hyperparameters share this weight between them). The curve says
#: more about its own end than the configuration does once a few epochs are in; the
#: configuration tells apart curves that look alike early (a slow learning rate).
HP_WEIGHT = 1.0
#: Epochs of recent slope (the same window as the ranking's bonus).
SLOPE_EPOCHS = 3
#: The interval's quantiles (an 80% interval).
INTERVAL = (0.1, 0.9)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linear between order statistics."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    i = min(int(pos), len(ordered) - 2)
    return ordered[i] + (pos - i) * (ordered[i + 1] - ordered[i])


@dataclass(frozen=True)
class Forecast:
    """A predicted final score (sign-adjusted score units) with its 80% interval."""

    point: float
    low: float
    high: float
    #: Plausible finals (the point plus each widened residual), sorted: the predictive
    #: distribution the expected improvement averages over.
    samples: tuple[float, ...] = ()


@dataclass
class HyperparameterRanks:
    """Each hyperparameter's values seen in the run, for a unit-free encoding.

    A numeric value is placed on the range of that parameter's values seen so far (0 to
    1), on a log scale when every value seen is positive (a learning rate in 1e-4..1e-1
    spreads evenly; multiplying a parameter by a constant changes nothing); a
    categorical one is compared as equal or not.
    """

    params: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    _ranges: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    #: Distances by pair, valid while no range changes (new extremes soon stop coming).
    _pairs: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)

    def add(self, trial: int, params: Mapping[str, Any] | None) -> None:
        if not params or trial in self.params:
            return
        self.params[trial] = dict(params)
        for name, value in params.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                low, high, positive = self._ranges.get(name, (math.inf, -math.inf, True))
                changed = (min(low, value), max(high, value), positive and value > 0)
                if changed != (low, high, positive):
                    self._ranges[name] = changed
                    self._pairs.clear()

    def _place(self, name: str, value: float) -> float:
        low, high, positive = self._ranges[name]
        if positive:
            low, high, value = math.log(low), math.log(high), math.log(value)
        return 0.0 if high <= low else (value - low) / (high - low)

    def distance(self, a: int, b: int) -> float:
        """Mean squared difference of ``a``'s and ``b``'s encoded hyperparameters (0 to
        1; 0 when either has none)."""
        key = (a, b) if a < b else (b, a)
        cached = self._pairs.get(key)
        if cached is None:
            cached = self._pairs[key] = self._distance(a, b)
        return cached

    def _distance(self, a: int, b: int) -> float:
        pa, pb = self.params.get(a), self.params.get(b)
        if not pa or not pb:
            return 0.0
        total, n = 0.0, 0
        for name, va in pa.items():
            if name not in pb:
                continue
            vb = pb[name]
            if name in self._ranges and isinstance(va, (int, float)) and isinstance(
                    vb, (int, float)) and not isinstance(va, bool):
                total += (self._place(name, va) - self._place(name, vb)) ** 2
            else:
                total += 0.0 if va == vb else 1.0
            n += 1
        return total / n if n else 0.0


class FinalPredictor:
    """The run's model of final scores; see the module docstring.

    It reads curves from a board (``scores[trial][epoch]``, ``finished``, ``spread``,
    ``at_epoch``) and keeps nothing of its own but the hyperparameters and caches.
    """

    def __init__(self) -> None:
        self.hyperparameters = HyperparameterRanks()
        self._cache: dict[tuple, Any] = {}
        self._version: int | None = None
        self._forecasts: dict[tuple, Forecast | None] = {}

    def features(self, board: Any, trial: int, epoch: int) -> tuple[float, float] | None:
        curve = board.scores.get(trial, {})
        if epoch not in curve:
            return None
        spread = board.spread(epoch) or 1.0
        seen = board.at_epoch[epoch]
        level = (curve[epoch] - _quantile(seen, 0.5)) / spread
        back = min(SLOPE_EPOCHS, epoch - 1)
        before = curve.get(epoch - back) if back > 0 else None
        slope = 0.0 if before is None else (curve[epoch] - before) / back / spread
        return level, slope

    def _examples(self, board: Any, epoch: int) -> list[tuple[int, tuple[float, float], float]]:
        """Finished trials with a score at ``epoch``: (trial, features, gain in spreads)."""
        key = ("examples", id(board), epoch, len(board.finished),
               len(board.at_epoch.get(epoch, ())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        spread = board.spread(epoch) or 1.0
        out = []
        for t in sorted(board.finished):
            curve = board.scores.get(t, {})
            if epoch in curve:
                feats = self.features(board, t, epoch)
                out.append((t, feats, (curve[max(curve)] - curve[epoch]) / spread))
        if len(self._cache) > 512:
            self._cache.clear()
        self._cache[key] = out
        return out

    def _distance(self, a: tuple[int, tuple[float, float]],
                  b: tuple[int, tuple[float, float]]) -> float:
        (ta, (la, sa)), (tb, (lb, sb)) = a, b
        return math.sqrt((la - lb) ** 2 + (sa - sb) ** 2
                         + HP_WEIGHT * self.hyperparameters.distance(ta, tb))

    def _neighbours(self, query: tuple[int, tuple[float, float]],
                    examples: list, exclude: int | None = None) -> tuple[list[float], float]:
        """Gains of the K nearest examples, and the distance to the nearest."""
        ranked = sorted((self._distance(query, (t, f)), g) for t, f, g in examples
                        if t != exclude)
        k = max(MIN_NEIGHBOURS, int(math.sqrt(len(ranked))))
        near = ranked[:k]
        return sorted(g for _, g in near), near[0][0]

    def _residuals(self, board: Any, epoch: int) -> tuple[list[float], float]:
        """Leave-one-out residuals (gain minus predicted gain, spreads, sorted) of the
        examples at ``epoch``, and the typical nearest-example distance among them."""
        key = ("residuals", id(board), epoch, len(board.finished),
               len(board.at_epoch.get(epoch, ())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        examples = self._examples(board, epoch)
        residuals, gaps = [], []
        for t, f, g in examples:
            gains, nearest = self._neighbours((t, f), examples, exclude=t)
            residuals.append(g - _quantile(gains, 0.5))
            gaps.append(nearest)
        gaps.sort()
        hit = self._cache[key] = (sorted(residuals), _quantile(gaps, 0.5) if gaps else 0.0)
        return hit

    def forecast(self, board: Any, trial: int, epoch: int,
                 min_examples: int = 2) -> Forecast | None:
        """``trial``'s predicted final score after ``epoch`` (score units), or None with
        fewer than ``min_examples`` finished trials seen at that epoch (or no score).
        Cached for one version of the board."""
        if self._version != (id(board), board.version):
            self._version, self._forecasts = (id(board), board.version), {}
        key = (trial, epoch, min_examples)
        if key not in self._forecasts:
            self._forecasts[key] = self._forecast(board, trial, epoch, min_examples)
        return self._forecasts[key]

    def _forecast(self, board: Any, trial: int, epoch: int,
                  min_examples: int) -> Forecast | None:
        feats = self.features(board, trial, epoch)
        examples = [e for e in self._examples(board, epoch) if e[0] != trial]
        if feats is None or len(examples) < max(2, min_examples):
            return None
        gains, nearest = self._neighbours((trial, feats), examples)
        point_gain = _quantile(gains, 0.5)
        residuals, typical = self._residuals(board, epoch)
        if len(residuals) < 2:
            residuals = [g - point_gain for g in gains]
        widen = 1.0 + (nearest / typical if typical > 0 else 0.0)
        spread = board.spread(epoch) or 1.0
        now = board.scores[trial][epoch]
        low = point_gain + widen * _quantile(residuals, INTERVAL[0])
        high = point_gain + widen * _quantile(residuals, INTERVAL[1])
        samples = tuple(now + spread * (point_gain + widen * r) for r in residuals)
        return Forecast(now + spread * point_gain, now + spread * min(low, point_gain),
                        now + spread * max(high, point_gain), samples)
