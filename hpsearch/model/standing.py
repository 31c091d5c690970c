"""A trial's standing at each epoch: where it ranks among the trials of its own study,
as a normal score. The unit in which the model learns, free of the metric's units and
direction, and the same in every study of a space.

Pure module. At epoch ``e`` a trial with a score there is ranked against every trial of
the study seen at ``e`` and every trial that left the study before ``e`` (paused, pruned
or stopped earlier: behind it, as the policy's cut counts them); trials still training
short of ``e`` are not counted. Its share of those it beats (ties count half, itself
half) is mapped through the normal quantile function, so a trial at the median stands at
0 and the best of 200 at about 2.6. Scores are sign-adjusted (higher is better), so any
increasing transformation of the metric, and negating it with the mode flipped, leaves
every standing as it is.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class TrialCurve:
    """One trial as the model reads it.

    Attributes:
        number: The trial's number in its study.
        x: Its encoded hyperparameters (:func:`hpsearch.model.encoding.encode`).
        scores: Sign-adjusted score (higher is better) after each epoch reported.
        open: Still training or about to (running, queued): not behind anyone yet.
    """

    number: int
    x: tuple[float, ...]
    scores: Mapping[int, float] = field(default_factory=dict)
    open: bool = False

    @property
    def last_epoch(self) -> int:
        return max(self.scores) if self.scores else 0


def normal_scores(shares: np.ndarray) -> np.ndarray:
    """The standard normal quantiles of ``shares`` (in (0, 1))."""
    from scipy.special import ndtri

    return ndtri(np.clip(shares, 1e-6, 1 - 1e-6))


def standings(trials: Sequence[TrialCurve]) -> dict[int, dict[int, float]]:
    """Every trial's standing (a normal score) at each epoch it reported; see the module
    docstring. Trials without scores are absent."""
    numbers, epochs, scores = [], [], []
    for t in trials:
        for epoch, score in t.scores.items():
            numbers.append(t.number)
            epochs.append(epoch)
            scores.append(score)
    if not scores:
        return {}
    epoch_arr = np.array(epochs, dtype=np.int64)
    score_arr = np.array(scores, dtype=float)
    # A closed trial is behind every trial at a later epoch than its last.
    lasts = np.sort(np.array([t.last_epoch for t in trials if not t.open and t.scores],
                             dtype=np.int64))
    behind = np.searchsorted(lasts, epoch_arr, side="left")
    below = np.empty(len(score_arr))
    equal = np.empty(len(score_arr))
    seen = np.empty(len(score_arr))
    order = np.lexsort((score_arr, epoch_arr))
    bounds = np.flatnonzero(np.diff(epoch_arr[order])) + 1
    for rows in np.split(order, bounds):
        group = score_arr[rows]  # sorted: the lexsort's inner key
        left = np.searchsorted(group, group, side="left")
        right = np.searchsorted(group, group, side="right")
        below[rows], equal[rows], seen[rows] = left, right - left, len(rows)
    z = normal_scores((behind + below + equal / 2) / (seen + behind))
    out: dict[int, dict[int, float]] = {}
    for number, epoch, value in zip(numbers, epochs, z.tolist()):
        out.setdefault(number, {})[epoch] = value
    return out


def standing_of(score: float, epoch: int, trials: Sequence[TrialCurve],
                exclude: int | None = None) -> float:
    """The standing a score of ``score`` after ``epoch`` would have among ``trials``
    (all but ``exclude``), counted as :func:`standings` counts."""
    seen = sorted(s for t in trials if t.number != exclude
                  for e, s in t.scores.items() if e == epoch)
    behind = sum(1 for t in trials if t.number != exclude and not t.open and t.scores
                 and t.last_epoch < epoch)
    below = bisect.bisect_left(seen, score)
    equal = bisect.bisect_right(seen, score) - below
    share = (behind + below + (equal + 1) / 2) / (len(seen) + behind + 1)
    return float(normal_scores(np.array([share]))[0])
