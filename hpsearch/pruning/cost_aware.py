"""Cost-aware pruning: stop a trial when its chance of ending best no longer pays for
the money its remaining training will cost.

Pure module, stop-only, curve-based (see "Pruning on real curves" in the design notes).
At each epoch from 2 on, a trial is ranked against every trial seen at that epoch so far
(trials stopped earlier count as behind it), on its value plus a small bonus for still
improving. It is kept if it ranks within a share of them that starts generous, while
epoch-1 and epoch-2 values are close to noise, and narrows as the curves show their
shape (:func:`keep_fraction`); until epoch 8 that share is raised to a power of 1.3
(fading to 1 by epoch 16), so the many trials plainly behind early go sooner, while the
mid-run cut, where the eventual best is often a close second, stays as it was. Money
enters in how sure the policy must be, not in the yardstick: a trial whose remaining
epochs cost more than its peers' must rank higher to be kept (the share shrinks with the
square root of its cost ratio), a cheap one may rank lower, and the leader is always
kept, however slow. Once trials have finished, a guard stops trials whose optimistic
extrapolation (the largest gain a finished curve made from this epoch on, or the trial's
own recent slope continued) cannot reach the incumbent.

One knob, ``aggressiveness`` (default 1): the kept share is raised to this power, so 2
keeps about its square (stops more, cheaper, riskier) and 0.5 its square root.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict

if TYPE_CHECKING:
    from typing import Sequence

    from hpsearch.money.budget import Accountant
    from hpsearch.core.lifecycle import TrialState
    from hpsearch.core.ports import TrialHistory

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
#: Epochs of a trial's recent slope (over up to SLOPE_EPOCHS) added to its value when
#: ranking: a trial still improving is judged a little ahead of where it stands.
IMPROVEMENT_BONUS = 4.0
SLOPE_EPOCHS = 3
#: No stop once the epochs left are at most this share of a trial: finishing costs less
#: than the evidence that it should not.
FINISH_SHARE = 0.1
#: Fewest trials seen at an epoch before ranks there stop anyone (4 lets the first
#: trials of a 4-worker search judge each other instead of all running to the end).
MIN_PEERS = 4
#: Finished curves the incumbent guard needs before it trusts their gains.
MIN_FINISHED = 2
#: The guard's reach (largest finished recovery, or own slope continued) is multiplied
#: by this.
GUARD_OPTIMISM = 1.5
#: No guard decision before this epoch.
GUARD_FROM = 2
#: The cost adjustment ramps in linearly from epoch 2 to this epoch (early values are
#: noise: money should not decide on them).
COST_FULL_FROM = 10
#: Bounds of the cost adjustment of the kept share (a factor on it).
COST_FACTOR_RANGE = (1 / 3, 3.0)


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


@dataclass
class Board:
    """Every trial's curve so far, in the metric's own direction.

    Values are stored as scores where higher is better (negated for ``mode: min``).
    """

    mode: str = "max"
    scores: dict[int, dict[int, float]] = field(default_factory=dict)
    stopped_at: dict[int, int] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)

    def sign(self) -> float:
        return 1.0 if self.mode == "max" else -1.0

    def add(self, trial: int, epoch: int, value: float) -> None:
        """Record ``trial``'s metric after ``epoch`` (repeats keep the first value)."""
        if value is None or math.isnan(value):
            return
        self.scores.setdefault(trial, {}).setdefault(epoch, self.sign() * value)

    def stop(self, trial: int, epoch: int) -> None:
        """``trial`` was stopped after ``epoch``: it counts as behind at later epochs."""
        self.stopped_at[trial] = epoch

    def finish(self, trial: int) -> None:
        """``trial`` trained to its last epoch."""
        self.finished.add(trial)

    def slope(self, trial: int, epoch: int) -> float:
        """Mean gain per epoch over the last (up to) SLOPE_EPOCHS epochs; 0 if falling."""
        curve = self.scores.get(trial, {})
        back = min(SLOPE_EPOCHS, epoch - 1)
        before = curve.get(epoch - back)
        if back <= 0 or before is None or epoch not in curve:
            return 0.0
        return max(0.0, (curve[epoch] - before) / back)

    def ranked_score(self, trial: int, epoch: int) -> float | None:
        """Score at ``epoch`` plus IMPROVEMENT_BONUS epochs of its recent slope."""
        curve = self.scores.get(trial, {})
        if epoch not in curve:
            return None
        return curve[epoch] + IMPROVEMENT_BONUS * self.slope(trial, epoch)

    def final(self, trial: int) -> float | None:
        curve = self.scores.get(trial)
        return curve[max(curve)] if curve else None

    def incumbent(self) -> float | None:
        finals = [f for t in self.finished if (f := self.final(t)) is not None]
        return max(finals) if finals else None




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

    def decide(self, board: Board, trial: int, epoch: int,
               cost_rate: float | None = None,
               peer_cost_rates: list[float] | None = None) -> Verdict:
        """Decide whether ``trial`` (already on the board at ``epoch``) goes on.

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
        own = board.ranked_score(trial, epoch)
        if own is None:
            return CONTINUE
        predicted = self._predict(board, trial, epoch)
        guard = self._guard(board, trial, epoch, predicted)
        if guard is not None:
            return guard
        scores = [s for t in board.scores
                  if t != trial and (s := board.ranked_score(t, epoch)) is not None]
        behind = sum(1 for t, at in board.stopped_at.items() if at < epoch and t != trial)
        n = len(scores) + behind + 1
        if n < MIN_PEERS:
            return CONTINUE
        rank = 1 + sum(1 for s in scores if s > own)
        if rank == 1:
            return CONTINUE
        share = keep_fraction(epoch, self.max_epochs, self.aggressiveness)
        ratio = self._cost_ratio(cost_rate, peer_cost_rates)
        ramp = min(1.0, max(0.0, (epoch - 2) / max(1, COST_FULL_FROM - 2)))
        factor = cost_factor(ratio) ** ramp
        kept = max(1, math.ceil(min(1.0, share * factor) * n))
        if rank <= kept:
            return CONTINUE
        note = f" x{factor:.2f}: its epochs cost {ratio:.2f}x the median" if ratio else ""
        return Verdict(
            Decision.STOP,
            f"rank {rank}/{n} at epoch {epoch}/{self.max_epochs}; keeps the top {kept} "
            f"({share:.0%}{note})",
            self._to_metric(board, predicted),
        )

    # -- parts --------------------------------------------------------------------------

    @staticmethod
    def _cost_ratio(cost_rate: float | None, peers: list[float] | None) -> float | None:
        """This trial's epoch cost over the median of its peers', or None if unknown."""
        peers = [p for p in (peers or []) if p and p > 0]
        if not cost_rate or cost_rate <= 0 or not peers:
            return None
        return cost_rate / statistics.median(peers)

    def _gains(self, board: Board, epoch: int) -> list[float]:
        """How much finished trials gained from ``epoch`` to their end (score units)."""
        gains = []
        for t in board.finished:
            curve = board.scores.get(t, {})
            if epoch in curve:
                gains.append(curve[max(curve)] - curve[epoch])
        return gains

    def _predict(self, board: Board, trial: int, epoch: int) -> float:
        """Expected final score: now plus what finished trials typically gained from here."""
        now = board.scores[trial][epoch]
        gains = self._gains(board, epoch)
        return now + (statistics.median(gains) if gains else 0.0)

    def _guard(self, board: Board, trial: int, epoch: int, predicted: float) -> Verdict | None:
        """Stop a trial that cannot reach the incumbent even on an optimistic path.

        Optimistic: from the best value the trial has shown so far (curves dip mid-run
        and recover), plus the larger of the largest recovery a finished curve made after
        this epoch (its final minus its lowest value from here) and the trial's own
        recent slope continued to the last epoch, times GUARD_OPTIMISM.
        """
        incumbent = board.incumbent()
        finished = [board.scores[t] for t in board.finished if epoch in board.scores.get(t, {})]
        if incumbent is None or len(finished) < MIN_FINISHED or epoch < GUARD_FROM:
            return None
        curve = board.scores[trial]
        peak = max(v for e, v in curve.items() if e <= epoch)
        recovery = max(c[max(c)] - min(v for e, v in c.items() if e >= epoch)
                       for c in finished)
        slope_reach = board.slope(trial, epoch) * (self.max_epochs - epoch)
        optimistic = peak + GUARD_OPTIMISM * max(0.0, recovery, slope_reach)
        if optimistic >= incumbent:
            return None
        sign = board.sign()
        return Verdict(
            Decision.STOP,
            f"cannot reach the best finished trial ({sign * incumbent:.4g}): even an "
            f"optimistic path ends at {sign * optimistic:.4g} (epoch {epoch}/{self.max_epochs})",
            self._to_metric(board, predicted),
        )

    @staticmethod
    def _to_metric(board: Board, score: float) -> float:
        return board.sign() * score


class CostAwarePruner:
    """The cost-aware policy as a running search keeps it: the board of curves and the
    accountant's measured epoch costs. It implements the core's
    :class:`~hpsearch.core.ports.Policy`, so the Ray backend and the simulator drive it
    through the same :class:`~hpsearch.core.search.SearchCore` and decide alike.

    Args:
        policy: The decision rule.
        accountant: The run's money; its measured epoch times give the cost rates.
    """

    name = "cost_aware"

    def __init__(self, policy: CostAwarePolicy, accountant: "Accountant"):
        self.policy = policy
        self.accountant = accountant
        self.board = Board(mode=policy.mode)

    def restore(self, histories: "Sequence[TrialHistory]") -> None:
        """Put an earlier session's curves back on the board."""
        for history in histories:
            for epoch, value in sorted(history.values.items()):
                self.board.add(history.number, epoch, value)
            if history.state.finished:
                self.on_end(history.number, history.last_epoch, history.state)

    def on_start(self, trial: int) -> None:
        pass

    def on_result(self, trial: int, epoch: int, value: float) -> Verdict:
        """Record ``trial``'s value after ``epoch`` and decide (the core fed the
        accountant first)."""
        self.board.add(trial, epoch, value)
        peers = [c for t in self.accountant.timing.trials if t != trial
                 and (c := self.accountant.epoch_cost(t)) is not None]
        verdict = self.policy.decide(self.board, trial, epoch,
                                     self.accountant.epoch_cost(trial), peers)
        if verdict.decision is Decision.STOP:
            self.board.stop(trial, epoch)
        return verdict

    def on_end(self, trial: int, epoch: int, state: "TrialState") -> None:
        """``trial`` left its worker after ``epoch``: trained to the end, or stopped by
        someone else (it counts as behind from then on). A trial that will start again
        (preempted, retried, paused) stays as it is."""
        if state.waiting:
            return
        if epoch >= self.policy.max_epochs:
            self.board.finish(trial)
        elif trial not in self.board.stopped_at:
            self.board.stop(trial, epoch)

    def pick_resume(self, waiting: "Sequence[int]") -> int | None:
        return None
