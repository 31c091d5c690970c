"""Cost-aware pruning: pause a trial when its chance of ending best no longer pays for
the money its next epochs cost, stop it once it plainly cannot, resume it when the
evidence changes.

Pure module, curve-based (see "Pruning on real curves" in the design notes). Every
comparison is made on sign-adjusted scores (higher is better: the metric times
:func:`hpsearch.spec.objective.mode_sign`'s sign), and every amount that is added to a score is
measured in the run, in the spread of the scores seen at the same epoch: no constant is in
the metric's units, so scaling the metric (accuracy in percent or as a fraction) or
negating it and flipping the mode (a loss) changes no decision.

At each epoch from 2 on, a trial is ranked against every trial seen at that epoch so far
(trials stopped or paused earlier count as behind it), on its score plus a small bonus
for still improving (IMPROVEMENT_BONUS epochs of its recent slope, at most BONUS_CAP
interquartile ranges of the scores at that epoch). It is kept if it ranks within a share
of them that starts generous, while epoch-1 and epoch-2 values are close to noise, and
narrows as the curves show their shape (:func:`keep_fraction`); until epoch 8 that share
is raised to a power of 1.3 (fading to 1 by epoch 16). Money enters in how sure the
policy must be: a trial whose epochs cost more than its peers' (measured epoch time x
its node's price, from the accountant) must rank higher to be kept, a cheap one may rank
lower. The leader (best score at its epoch, with or without the bonus) is always kept.

A trial cut by the ranks is *paused* (its checkpoint kept) while the policy is unsure:
when fewer than MIN_FINISHED trials have finished, or when any of its plausible finals
(from the run's predictor, :mod:`hpsearch.pruning.predictor`: its score plus the gains
of the finished trials nearest it in level, slope and hyperparameters, with a conformal
80% interval) still reaches the incumbent (the best finished trial), and also when even
the best plausible final ends short of it: the predictor learns from every trial that
finishes, and a stop on its word is final while its word is not (on the development
tasks, 5 of the 6 runs that missed on the loss objective had stopped the eventual best
this way: late gains no finished curve had shown yet). Such a pause is judged again once
no configuration is new, on the whole run's evidence. The guard judges a trial that
cannot reach the incumbent even on an optimistic path (its peak so far plus the largest
recovery a finished curve made from this epoch, or its own slope continued): the rule
says stop, and the running pruner (:mod:`hpsearch.pruning.cost_aware_pruner`) pauses it
like the others while configurations are new (the finished curves it measures recovery
on are then few, and mostly the early leaders', which recover less than a slow starter
may: on a development task's held-out seed the guard stopped the eventual best at epoch
11, which the last round would have resumed). Only a trial already resumed in the last
round is stopped by it. Which paused trial resumes when a worker frees up is the running
pruner's decision too.

One knob, ``aggressiveness`` (default 1): the kept share is raised to this power, so 2
keeps about its square (cuts more, cheaper, riskier) and 0.5 its square root.

This module holds the rule: its constants, the board of curves and the cut. The state
a running search keeps around it (paused trials, the predictions behind each pause,
the resume scan) is in :mod:`hpsearch.pruning.cost_aware_pruner`.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.predictor import FinalPredictor
from hpsearch.spec.objective import mode_sign
from hpsearch.spec.sections import COST_AWARE_FINISH_SHARE

if TYPE_CHECKING:
    from typing import Sequence

#: Epochs of the LCBench curves the schedules were measured on.
REFERENCE_EPOCHS = 52
#: Kept share by epoch: generous while epoch values are noise, steep from epoch 10 to 20.
ABSOLUTE_SCHEDULE = ((2, 0.70), (5, 0.40), (10, 0.20), (20, 0.04))
#: The same schedule by progress (epoch / max_epochs) as measured on 52-epoch curves,
#: so long runs are not cut on absolute epochs alone.
RELATIVE_SCHEDULE = ((2 / 52, 0.70), (5 / 52, 0.40), (10 / 52, 0.20), (20 / 52, 0.04))
#: Power on the kept share early on, fading linearly to 1 between the epochs of
#: SHARPNESS_FADE (on each clock of the schedule). About half the money spent before the
#: hit goes to epochs 1-5 of trials that end nowhere near the best, so cutting them
#: sooner pays; the mid-run cut is left as it was, because there the eventual best is
#: often a close 2nd-6th (epochs 13-25) and a narrower share throws it away.
EARLY_SHARPNESS = 1.3
SHARPNESS_FADE = (8, 16)
#: Epochs of a trial's recent slope (over up to SLOPE_EPOCHS) added to its score when
#: ranking: a trial still improving is judged a little ahead of where it stands. In
#: epochs, not metric units; tuned with the schedule on accuracy curves.
IMPROVEMENT_BONUS = 4.0
SLOPE_EPOCHS = 3
#: The bonus is at most this many interquartile ranges of the scores seen at the same
#: epoch (the run's own scale). Without a cap, a loss that falls steeply from a poor
#: start (2.2 -> 0.65) outranked the converged leader (0.13): a convex loss curve's raw
#: slope is large against the gaps between trials. Half an IQR lets an improving trial
#: pass its close neighbours, never jump the field.
BONUS_CAP = 0.5
#: No stop once the epochs left are at most this share of a trial: finishing costs less
#: than the evidence that it should not. The config's value, which it checks max_epochs
#: against (a search that could never stop a trial is refused); named here like the
#: other constants, so the sensitivity benchmark varies it the same way.
FINISH_SHARE = COST_AWARE_FINISH_SHARE
#: Fewest trials seen at an epoch before ranks there stop anyone (4 lets the first
#: trials of a 4-worker search judge each other instead of all running to the end).
MIN_PEERS = 4
#: Finished curves the incumbent guard and the prediction interval need before they
#: trust their gains (two: the least that shows a spread; with fewer a cut is a pause).
MIN_FINISHED = 2
#: The guard's reach (largest finished recovery, or own slope continued) is multiplied
#: by this. It judges on thin evidence (two finished curves may do), so it must be sure;
#: its verdict is a pause until the last round (CostAwarePruner). On the 13 development
#: tasks (accuracy and loss, seeds 0-4, 130 runs; with the first version of the resume
#: rule, when its verdict was a stop): at 1.5 115 hits (median money to the hit 0.22x /
#: 0.24x no pruning's, accuracy / loss), at 3 118 (0.23x / 0.23x), without the guard 119
#: (0.23x / 0.24x). As a pause (seed 0, 26 runs): at 1.5 26 hits (0.23x / 0.19x), at 3 26
#: (0.24x / 0.20x), at 6 26 (0.25x / 0.20x); without it the last round judges every
#: hopeless trial, and the benchmark's simulation ran several times slower (its scans).
GUARD_OPTIMISM = 3.0
#: No guard decision before this epoch (epoch-1 values are close to noise).
GUARD_FROM = 2
#: The cost adjustment ramps in linearly from epoch 2 to this epoch (early values are
#: noise: money should not decide on them).
COST_FULL_FROM = 10
#: Bounds of the cost adjustment of the kept share (a factor on it).
COST_FACTOR_RANGE = (1 / 3, 3.0)


#: What a pause's reason promises when its trial waits for the last round.
JUDGED_AGAIN = "judged again once no configuration is new"


def _interpolate(schedule: tuple[tuple[float, float], ...], x: float) -> float:
    """Log-linear interpolation of the kept share; flat beyond the ends."""
    xs = [p[0] for p in schedule]
    if x <= xs[0]:
        return schedule[0][1]
    if x >= xs[-1]:
        return schedule[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = schedule[i - 1], schedule[i]
    t = (x - x0) / (x1 - x0)
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def cost_factor(ratio: float | None) -> float:
    """Factor on the kept share for a trial whose epochs cost ``ratio`` x the median.

    ``1 / sqrt(ratio)``, bounded by :data:`COST_FACTOR_RANGE`: a trial 4x as expensive
    must rank in half the share, one 4x as cheap may rank in twice it.
    """
    if not ratio:
        return 1.0
    low, high = COST_FACTOR_RANGE
    return min(high, max(low, 1.0 / math.sqrt(ratio)))


def keep_fraction(epoch: int, max_epochs: int, aggressiveness: float = 1.0) -> float:
    """Share of the trials seen at ``epoch`` that is kept (before the cost adjustment).

    On each clock (absolute epochs, and progress as its 52-epoch equivalent) the
    schedule's share is raised to that clock's :func:`early_sharpness`; the larger of the
    two is kept, raised to ``aggressiveness``.
    """
    equivalent = REFERENCE_EPOCHS * epoch / max(1, max_epochs)
    absolute = _interpolate(ABSOLUTE_SCHEDULE, epoch) ** early_sharpness(epoch)
    relative = (_interpolate(RELATIVE_SCHEDULE, epoch / max(1, max_epochs))
                ** early_sharpness(equivalent))
    return max(absolute, relative) ** aggressiveness


def early_sharpness(epoch: float) -> float:
    """The power on the schedule's share at ``epoch`` (of a 52-epoch curve):
    :data:`EARLY_SHARPNESS` up to the first epoch of :data:`SHARPNESS_FADE`, 1 from the
    second on, linear between."""
    start, end = SHARPNESS_FADE
    fade = min(1.0, max(0.0, (epoch - start) / (end - start)))
    return EARLY_SHARPNESS + (1.0 - EARLY_SHARPNESS) * fade


def _quantile(ordered: "Sequence[float]", q: float) -> float:
    """The ``q`` quantile of sorted values, linear between order statistics."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    i = min(int(pos), len(ordered) - 2)
    return ordered[i] + (pos - i) * (ordered[i + 1] - ordered[i])


@dataclass
class Board:
    """Every trial's curve so far, as sign-adjusted scores (higher is better).

    Values are stored as ``mode_sign(mode) * value`` (negated for ``mode: min``); the
    scores seen at each epoch are also kept sorted, for the spread at that epoch.
    """

    mode: str = "max"
    scores: dict[int, dict[int, float]] = field(default_factory=dict)
    stopped_at: dict[int, int] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)
    at_epoch: dict[int, list[float]] = field(default_factory=dict)
    #: The trials with a score at each epoch.
    trials_at: dict[int, list[int]] = field(default_factory=dict)
    #: Bumped on every change: caches of ranks are valid for one version.
    version: int = 0
    #: Caches of values that cannot change: a slope once its two scores are in; a
    #: spread for as long as no score is added at its epoch.
    _slopes: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    _spreads: dict[int, tuple[int, float]] = field(default_factory=dict, repr=False)

    def sign(self) -> float:
        return mode_sign(self.mode)

    def add(self, trial: int, epoch: int, value: float) -> None:
        """Record ``trial``'s metric after ``epoch`` (repeats keep the first value)."""
        if value is None or math.isnan(value):
            return
        curve = self.scores.setdefault(trial, {})
        if epoch in curve:
            return
        curve[epoch] = self.sign() * value
        bisect.insort(self.at_epoch.setdefault(epoch, []), curve[epoch])
        self.trials_at.setdefault(epoch, []).append(trial)
        self.version += 1

    def stop(self, trial: int, epoch: int) -> None:
        """``trial`` was stopped or paused after ``epoch``: it counts as behind at later
        epochs."""
        self.stopped_at[trial] = epoch
        self.version += 1

    def resume(self, trial: int) -> None:
        """``trial`` runs again: it no longer counts as behind."""
        if self.stopped_at.pop(trial, None) is not None:
            self.version += 1

    def finish(self, trial: int) -> None:
        """``trial`` trained to its last epoch."""
        self.finished.add(trial)
        self.version += 1

    def spread(self, epoch: int) -> float:
        """The interquartile range of the scores seen at ``epoch`` (their range if that
        is 0; 0 with fewer than two): the run's own unit of score at that epoch."""
        seen = self.at_epoch.get(epoch, [])
        if len(seen) < 2:
            return 0.0
        cached = self._spreads.get(epoch)
        if cached is not None and cached[0] == len(seen):
            return cached[1]
        iqr = _quantile(seen, 0.75) - _quantile(seen, 0.25)
        spread = iqr if iqr > 0 else seen[-1] - seen[0]
        self._spreads[epoch] = (len(seen), spread)
        return spread

    def slope(self, trial: int, epoch: int) -> float:
        """Mean gain per epoch over the last (up to) SLOPE_EPOCHS epochs; 0 if falling."""
        cached = self._slopes.get((trial, epoch))
        if cached is not None:
            return cached
        curve = self.scores.get(trial, {})
        back = min(SLOPE_EPOCHS, epoch - 1)
        before = curve.get(epoch - back)
        if back <= 0 or before is None or epoch not in curve:
            return 0.0
        slope = self._slopes[(trial, epoch)] = max(0.0, (curve[epoch] - before) / back)
        return slope

    def bonus(self, trial: int, epoch: int) -> float:
        """IMPROVEMENT_BONUS epochs of the recent slope, at most BONUS_CAP spreads."""
        return min(IMPROVEMENT_BONUS * self.slope(trial, epoch),
                   BONUS_CAP * self.spread(epoch))

    def ranked_score(self, trial: int, epoch: int) -> float | None:
        """Score at ``epoch`` plus its (capped) bonus for still improving."""
        curve = self.scores.get(trial, {})
        if epoch not in curve:
            return None
        return curve[epoch] + self.bonus(trial, epoch)

    def final(self, trial: int) -> float | None:
        curve = self.scores.get(trial)
        return curve[max(curve)] if curve else None

    def incumbent(self) -> float | None:
        finals = [f for t in self.finished if (f := self.final(t)) is not None]
        return max(finals) if finals else None


@dataclass(frozen=True)
class Cut:
    """Where a trial stands in the rank cut at one epoch.

    Attributes:
        rank: 1 = best (bonus included); ties share the better rank.
        n: Trials judged at that epoch (those stopped earlier count, as behind).
        kept: How many of them the share keeps.
        share: The schedule's kept share (before the cost factor).
        factor: The cost factor on it.
        ratio: The trial's epoch cost over its peers' median, if known.
        leader: It has the best score at that epoch (with or without its bonus).
    """

    rank: int
    n: int
    kept: int
    share: float
    factor: float
    ratio: float | None
    leader: bool

    @property
    def keeps(self) -> bool:
        return self.leader or self.rank <= self.kept


@dataclass
class CostAwarePolicy:
    """The decision rule; see the module docstring.

    Args:
        mode: ``max`` or ``min``.
        max_epochs: Epochs of a full trial.
        min_epochs: No decision before this epoch (and never before epoch 2).
        aggressiveness: Exponent on the kept share (1 = default).
    """

    mode: str
    max_epochs: int
    min_epochs: int = 1
    aggressiveness: float = 1.0
    predictor: FinalPredictor = field(default_factory=FinalPredictor, repr=False,
                                      compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def decide(self, board: Board, trial: int, epoch: int,
               cost_rate: float | None = None,
               peer_cost_rates: list[float] | None = None) -> Verdict:
        """Decide whether ``trial`` (already on the board at ``epoch``) goes on, pauses or
        stops.

        Args:
            board: Every curve so far.
            trial: The trial reporting.
            epoch: Epochs it has completed.
            cost_rate: What one more epoch of this trial costs (any unit).
            peer_cost_rates: The same for the other trials of the run.
        """
        if epoch < max(2, self.min_epochs) or (
                self.max_epochs - epoch <= FINISH_SHARE * self.max_epochs):
            return CONTINUE
        if board.ranked_score(trial, epoch) is None:
            return CONTINUE
        predicted = self._predict(board, trial, epoch)
        interval = self.interval(board, trial, epoch)
        guard = self._guard(board, trial, epoch, predicted, interval)
        if guard is not None:
            return guard
        cut = self.cut(board, trial, epoch, self._cost_ratio(cost_rate, peer_cost_rates))
        if cut is None or cut.keeps:
            return CONTINUE
        note = (f" x{cut.factor:.2f}: its epochs cost {cut.ratio:.2f}x the median"
                if cut.ratio else "")
        why = (f"rank {cut.rank}/{cut.n} at epoch {epoch}/{self.max_epochs}; keeps the top "
               f"{cut.kept} ({cut.share:.0%}{note})")
        incumbent = board.incumbent()
        sign = board.sign()
        metric_interval = self._interval_to_metric(board, interval)
        reach = self.reach(board, trial, epoch)
        if reach is None or incumbent is None:
            unsure = "too few finished trials to predict it"
        else:
            # Reaching or short, a cut is a pause (so is the guard's stop, in the pruner).
            reaches = reach >= incumbent
            unsure = (f"its predicted final (80%: {_fmt_interval(metric_interval)}, at best "
                      f"{sign * reach:.4g}) "
                      + ("may still reach" if reaches else "ends short of")
                      + f" the best finished trial ({sign * incumbent:.4g})"
                      + ("" if reaches else f"; {JUDGED_AGAIN}"))
        return Verdict(Decision.PAUSE, f"{why}; paused: {unsure}",
                       self._to_metric(board, predicted), metric_interval)

    # -- parts --------------------------------------------------------------------------

    def _ranked(self, board: Board, epoch: int) -> tuple[list[float], float, int]:
        """Sorted ranked scores at ``epoch``, the best raw score there, and how many
        trials were stopped before it (cached for one board version)."""
        key = (id(board), board.version, epoch)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 256:
                self._cache.clear()
            ranked = sorted(self.rank_keys(board, epoch))
            behind = sum(1 for at in board.stopped_at.values() if at < epoch)
            hit = self._cache[key] = (ranked, board.at_epoch[epoch][-1], behind)
        return hit

    def rank_key(self, board: Board, trial: int, epoch: int) -> float | None:
        """What the cut ranks ``trial`` on at ``epoch``: its score plus its capped bonus
        for still improving (:meth:`Board.ranked_score`); None without a score there."""
        return board.ranked_score(trial, epoch)

    def rank_keys(self, board: Board, epoch: int) -> list[float]:
        """:meth:`rank_key` of every trial with a score at ``epoch``: the same
        arithmetic with the spread hoisted out of the loop (a cut ranks every trial seen
        at its epoch), so a subclass that changes the key overrides both."""
        cap = BONUS_CAP * board.spread(epoch)
        scores, slope = board.scores, board.slope
        return [scores[t][epoch] + min(IMPROVEMENT_BONUS * slope(t, epoch), cap)
                for t in board.trials_at[epoch]]

    def cut(self, board: Board, trial: int, epoch: int,
            ratio: float | None = None) -> Cut | None:
        """Where ``trial`` stands in the rank cut at ``epoch`` now (None: too few peers
        to judge, or no score there). ``ratio`` is its epoch cost over its peers'."""
        own = self.rank_key(board, trial, epoch)
        if own is None:
            return None
        ranked, best_raw, behind = self._ranked(board, epoch)
        stopped = board.stopped_at.get(trial)
        if stopped is not None and stopped < epoch:
            behind -= 1  # never behind itself
        n = len(ranked) + behind
        if n < MIN_PEERS:
            return None
        rank = 1 + len(ranked) - bisect.bisect_right(ranked, own)
        leader = rank == 1 or board.scores[trial][epoch] >= best_raw
        share = keep_fraction(epoch, self.max_epochs, self.aggressiveness)
        ramp = min(1.0, max(0.0, (epoch - 2) / max(1, COST_FULL_FROM - 2)))
        factor = cost_factor(ratio) ** ramp
        kept = max(1, math.ceil(min(1.0, share * factor) * n))
        return Cut(rank, n, kept, share, factor, ratio, leader)

    @staticmethod
    def _cost_ratio(cost_rate: float | None, peers: list[float] | None) -> float | None:
        """This trial's epoch cost over the median of its peers', or None if unknown."""
        peers = [p for p in (peers or []) if p and p > 0]
        if not cost_rate or cost_rate <= 0 or not peers:
            return None
        return cost_rate / statistics.median(peers)

    def _predict(self, board: Board, trial: int, epoch: int) -> float:
        """Expected final score (the predictor's point; its score now without one)."""
        forecast = self.predictor.forecast(board, trial, epoch, MIN_FINISHED)
        return board.scores[trial][epoch] if forecast is None else forecast.point

    def interval(self, board: Board, trial: int, epoch: int) -> tuple[float, float] | None:
        """The 80% interval of ``trial``'s final score (score units) from the run's
        predictor (:mod:`hpsearch.pruning.predictor`); None with fewer than MIN_FINISHED
        finished trials seen at ``epoch``."""
        forecast = self.predictor.forecast(board, trial, epoch, MIN_FINISHED)
        return None if forecast is None else (forecast.low, forecast.high)

    def reach(self, board: Board, trial: int, epoch: int) -> float | None:
        """The best of ``trial``'s plausible finals (score units): a cut trial whose
        reach ends short of the incumbent is paused until no configuration is new (the
        resume scan judges it then); None without a forecast."""
        forecast = self.predictor.forecast(board, trial, epoch, MIN_FINISHED)
        if forecast is None:
            return None
        return max(forecast.high, *forecast.samples) if forecast.samples else forecast.high

    def expected_improvement(self, board: Board, trial: int, epoch: int) -> float | None:
        """Mean gain over the incumbent of ``trial``'s final, over the predictor's
        plausible finals, in spreads of the scores at that epoch (unit-free); None
        without an incumbent or a forecast."""
        incumbent = board.incumbent()
        forecast = self.predictor.forecast(board, trial, epoch, MIN_FINISHED)
        if incumbent is None or forecast is None or not forecast.samples:
            return None
        mean = sum(max(0.0, v - incumbent) for v in forecast.samples) / len(forecast.samples)
        spread = board.spread(epoch)
        return mean / spread if spread > 0 else mean

    def _guard(self, board: Board, trial: int, epoch: int, predicted: float,
               interval: tuple[float, float] | None) -> Verdict | None:
        """Stop a trial that cannot reach the incumbent even on an optimistic path.

        Optimistic: from the best value the trial has shown so far (curves dip mid-run
        and recover), plus the larger of the largest recovery a finished curve made after
        this epoch (its final minus its lowest value from here) and the trial's own
        recent slope continued to the last epoch, times GUARD_OPTIMISM. All of it in
        score differences: invariant to the metric's scale and direction.
        """
        incumbent = board.incumbent()
        recovery = self._recovery(board, epoch)
        if incumbent is None or recovery is None or epoch < GUARD_FROM:
            return None
        curve = board.scores[trial]
        peak = max(v for e, v in curve.items() if e <= epoch)
        slope_reach = board.slope(trial, epoch) * (self.max_epochs - epoch)
        optimistic = peak + GUARD_OPTIMISM * max(0.0, recovery, slope_reach)
        if optimistic >= incumbent:
            return None
        sign = board.sign()
        return Verdict(
            Decision.STOP,
            f"cannot reach the best finished trial ({sign * incumbent:.4g}): even an "
            f"optimistic path ends at {sign * optimistic:.4g} (epoch {epoch}/{self.max_epochs})",
            self._to_metric(board, predicted), self._interval_to_metric(board, interval))

    def _recovery(self, board: Board, epoch: int) -> float | None:
        """The largest recovery a finished curve made after ``epoch`` (its final minus
        its lowest value from there), or None with fewer than MIN_FINISHED of them
        (cached while no trial finishes: finished curves do not change)."""
        key = ("recovery", id(board), epoch, len(board.finished))
        if key not in self._cache:
            finished = [board.scores[t] for t in board.finished
                        if epoch in board.scores.get(t, {})]
            self._cache[key] = None if len(finished) < MIN_FINISHED else max(
                c[max(c)] - min(v for e, v in c.items() if e >= epoch) for c in finished)
        return self._cache[key]

    @staticmethod
    def _to_metric(board: Board, score: float) -> float:
        return board.sign() * score

    @staticmethod
    def _interval_to_metric(board: Board, interval: tuple[float, float] | None
                            ) -> tuple[float, float] | None:
        """A score interval in the metric's units, low end first."""
        if interval is None:
            return None
        a, b = board.sign() * interval[0], board.sign() * interval[1]
        return (min(a, b), max(a, b))


def _fmt_interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.4g} to {interval[1]:.4g}"
