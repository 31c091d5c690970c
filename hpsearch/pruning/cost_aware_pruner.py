"""The cost-aware policy as a running search keeps it: the board of curves, the
accountant's measured epoch costs, the paused trials and the predictions behind every
pause, and the resume scan.

When a worker frees up, the core asks :meth:`CostAwarePruner.pick_resume`: while new
configurations remain, a paused trial may resume when it now ranks within the kept share
at the epoch it paused at (later trials at that epoch did worse), its interval still
reaches the incumbent and the guard would keep it; once none remain, any with a chance
to beat the incumbent that the guard would keep. Of those, a :class:`ResumeChooser` (the
curve sampler's model, when the search has one) picks the one to resume, or a new
configuration instead; without one, or when it has no opinion, the policy's own order:
the best expected improvement over the incumbent per unit of its epoch's cost. The rule
itself (the cut, the guard, the predictor's intervals) is
:mod:`hpsearch.pruning.cost_aware`.

Pure module.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hpsearch.pruning.cost_aware import JUDGED_AGAIN, Board, CostAwarePolicy
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.trials import TrialState

if TYPE_CHECKING:
    from typing import Any, Mapping, Sequence

    from hpsearch.money.budget import Accountant
    from hpsearch.trials import TrialHistory


@dataclass(frozen=True)
class Prediction:
    """One prediction the policy acted on: ``trial``'s final metric, predicted after
    ``epoch`` to lie in ``[low, high]`` (80%), in the metric's units."""

    trial: int
    epoch: int
    low: float
    high: float


class ResumeChooser(Protocol):
    """Picks among the paused trials the policy would let resume now
    (:meth:`hpsearch.model.planner.Planner.choose_resume`, bound to the run's study)."""

    def choose(self, paused: "Sequence[int]", fresh: bool) -> Any:
        """None: no opinion (the policy's order decides); else a choice whose ``trial``
        is one of ``paused``, or None to start a new configuration instead (only while
        ``fresh``: new configurations remain)."""


class CostAwarePruner:
    """The cost-aware policy as a running search keeps it: the board of curves and the
    accountant's measured epoch costs. It implements the core's
    :class:`~hpsearch.core.ports.Policy`, so the Ray backend and the simulator drive it
    through the same :class:`~hpsearch.core.search.SearchCore` and decide alike.

    Args:
        policy: The decision rule.
        accountant: The run's money; its measured epoch times x node prices give the
            cost rates.
        chooser: Ranks the resumes the policy allows (the curve sampler's model), or
            None: the policy's own order.
    """

    name = "cost_aware"

    def __init__(self, policy: CostAwarePolicy, accountant: "Accountant",
                 chooser: ResumeChooser | None = None):
        self.policy = policy
        self.accountant = accountant
        self.chooser = chooser
        self.board = Board(mode=policy.mode)
        #: The predictions behind every pause and stop, for measuring calibration.
        self.predictions: list[Prediction] = []
        #: Trials paused (and not resumed since): the epoch they paused after, and how
        #: many trials had a score there then (a resume needs new evidence at it).
        self.paused: dict[int, tuple[int, int]] = {}
        #: Epoch costs by trial, with the epochs on the board they were measured at: a
        #: trial's cost changes when it reports (a new epoch time, or a new node).
        self._costs: dict[int, tuple[int, float | None]] = {}
        #: Trials resumed once no new configuration was left (never paused again).
        self.last_round: set[int] = set()
        #: Paused trials found not worth resuming, with the evidence they were judged on
        #: (finished trials, trials at their epoch, incumbent): not judged again on it.
        self._passed_over: dict[int, tuple] = {}

    def restore(self, histories: "Sequence[TrialHistory]") -> None:
        """Put an earlier session's curves back on the board (paused trials stay
        paused, behind their peers)."""
        for history in histories:
            self.policy.predictor.hyperparameters.add(history.number, history.params)
            for epoch, value in sorted(history.values.items()):
                self.board.add(history.number, epoch, value)
            if history.state.finished:
                self.on_end(history.number, history.last_epoch, history.state)
            elif history.state is TrialState.PAUSED:
                self.board.stop(history.number, history.last_epoch)
                self.paused[history.number] = (history.last_epoch, 0)

    def on_start(self, trial: int, params: "Mapping[str, Any] | None" = None) -> None:
        self.policy.predictor.hyperparameters.add(trial, params)
        self.board.resume(trial)
        self.paused.pop(trial, None)

    def _cost(self, trial: int) -> float | None:
        seen = len(self.board.scores.get(trial, ()))
        cached = self._costs.get(trial)
        if cached is None or cached[0] != seen:
            cached = self._costs[trial] = (seen, self.accountant.epoch_cost(trial))
        return cached[1]

    def _peer_costs(self, trial: int | None = None) -> list[float]:
        return [c for t in self.accountant.timing.trials if t != trial
                and (c := self._cost(t)) is not None]

    def _ratios(self):
        """A function of a trial: its epoch cost over the median of every other trial's
        (as :meth:`CostAwarePolicy._cost_ratio` of :meth:`_peer_costs`), from one sorted
        list of all costs (a resume scan asks it for every paused trial)."""
        costs = sorted(c for c in self._peer_costs() if c > 0)

        def ratio(trial: int) -> float | None:
            own = self._cost(trial)
            if not own or own <= 0:
                return None
            others = list(costs)
            if trial in self.accountant.timing.trials:
                i = bisect.bisect_left(others, own)
                if i < len(others) and others[i] == own:
                    others.pop(i)
            return self.policy._cost_ratio(own, others)

        return ratio

    def on_result(self, trial: int, epoch: int, value: float) -> Verdict:
        """Record ``trial``'s value after ``epoch`` and decide (the core fed the
        accountant first)."""
        self.board.add(trial, epoch, value)
        verdict = self.policy.decide(self.board, trial, epoch, self._cost(trial),
                                     self._peer_costs(trial))
        return self._decided(trial, epoch, verdict)

    def _decided(self, trial: int, epoch: int, verdict: Verdict) -> Verdict:
        """Record a PAUSE or STOP of ``trial`` after ``epoch`` on the board, in the
        predictions and among the paused trials; return ``verdict`` (a PAUSE of a trial
        resumed when nothing new was left becomes CONTINUE: no one to pause it for; the
        guard's STOP of any other trial becomes a PAUSE, judged again in the last round)."""
        if verdict.decision is Decision.PAUSE and trial in self.last_round:
            verdict = CONTINUE
        elif verdict.decision is Decision.STOP and trial not in self.last_round:
            # The guard judged on the finished curves of now, often the few early leaders,
            # whose recoveries understate a slow starter's; the last round judges it again
            # on the whole run's (a stop there is final).
            verdict = Verdict(Decision.PAUSE, f"{verdict.reason}; paused: {JUDGED_AGAIN}",
                              verdict.predicted_final, verdict.predicted_interval)
        if verdict.decision in (Decision.STOP, Decision.PAUSE):
            self.board.stop(trial, epoch)
            if verdict.predicted_interval is not None:
                self.predictions.append(Prediction(trial, epoch, *verdict.predicted_interval))
        if verdict.decision is Decision.PAUSE:
            self.paused[trial] = (epoch, len(self.board.trials_at.get(epoch, ())))
        return verdict

    def on_end(self, trial: int, epoch: int, state: "TrialState") -> None:
        """``trial`` left its worker after ``epoch``: trained to the end, or stopped by
        someone else (it counts as behind from then on). A trial that will start again
        (preempted, retried, paused) stays as it is."""
        if state.waiting:
            return
        self.paused.pop(trial, None)
        if epoch >= self.policy.max_epochs:
            self.board.finish(trial)
        elif trial not in self.board.stopped_at:
            self.board.stop(trial, epoch)

    def pick_resume(self, waiting: "Sequence[int]", fresh: bool = True) -> int | None:
        """The paused trial worth a free worker now, or None.

        While new configurations remain (``fresh``), a paused trial qualifies when trials
        have reached the epoch it paused after since it paused, it now ranks within the
        kept share there (they did worse: the evidence changed), the 80% interval of
        its final still reaches the incumbent and the guard would keep it. Once none
        remain, a paused trial competes only with an idle worker: any whose predicted
        finals beat the incumbent with some chance (some of its forecast's plausible finals
        do: the test its pause was promised, "may still reach the best finished trial")
        and that the guard would keep qualifies, whatever its 80% interval: the eventual
        best is often a slow starter whose late gains exceed what most finished curves
        gained. It then trains on until the guard stops it or it finishes, never paused
        again: there is nothing to pause it for; a budget caps this last round.

        Of those, the chooser's pick (it may prefer a new configuration while ``fresh``);
        without a chooser or when it has no opinion, the one with the best expected
        improvement over the incumbent per unit of its epoch's cost (measured epoch time
        x its node's price); before any trial finished, the best ranked per unit of cost.
        """
        incumbent = self.board.incumbent()
        ratios: list = []  # the peers' epoch-cost ratios, measured once per scan
        qualified = [(key, trial) for trial in waiting
                     if (key := self._resume_key(trial, fresh, incumbent, ratios)) is not None]
        if not qualified:
            return None
        pick = max(qualified)[1]
        if self.chooser is not None:
            choice = self.chooser.choose([trial for _, trial in qualified], fresh)
            if choice is not None:
                if choice.trial is None and fresh:
                    return None  # a new configuration is worth more
                if choice.trial is not None:
                    pick = choice.trial
        if not fresh:
            self.last_round.add(pick)
        return pick

    def _resume_key(self, trial: int, fresh: bool, incumbent: float | None,
                    ratios: list) -> tuple | None:
        """How much a resume of ``trial`` is worth (larger is better), or None if it does
        not qualify now (see :meth:`pick_resume`)."""
        board, policy = self.board, self.policy
        paused = self.paused.get(trial)
        if paused is None:
            return None
        epoch, seen = paused
        if fresh and len(board.trials_at.get(epoch, ())) <= seen:
            return None  # nothing new at its epoch: the evidence that paused it holds
        evidence = (len(board.finished), len(board.trials_at.get(epoch, ())), incumbent)
        if not fresh and self._passed_over.get(trial) == evidence:
            return None  # judged on this same evidence already (the scan is per free worker)
        interval = policy.interval(board, trial, epoch)
        if fresh and (interval is not None and incumbent is not None
                      and interval[1] < incumbent):
            return None  # not recorded as passed over: the last round judges it by another rule
        hopeless = policy._guard(board, trial, epoch, board.scores[trial][epoch],
                                 interval) is not None
        if fresh and hopeless:
            return None  # it would be paused again after its next epoch
        gain = policy.expected_improvement(board, trial, epoch)
        if not fresh and (gain is None or gain <= 0 or hopeless):
            self._passed_over[trial] = evidence
            return None  # no forecast yet, no chance, or no optimistic path: wait
        # Its epoch cost against its peers', as when it was paused.
        if not ratios:
            ratios.append(self._ratios())
        ratio = ratios[0](trial)
        cut = policy.cut(board, trial, epoch, ratio)
        if cut is None or (fresh and not cut.keeps):
            return None
        per_cost = 1.0 / ratio if ratio else 1.0
        # Expected improvement per cost where it can be predicted, else rank per cost;
        # ties go to the lower trial number (deterministic).
        return (gain is not None, (gain if gain is not None else 1.0 / cut.rank) * per_cost,
                -trial)

    def on_preempted(self, trial: int, epoch: int) -> Verdict:
        """Decide about ``trial``, preempted after ``epoch`` (on the board already), as
        if it had reported that epoch again now: a restart is worth its money only if
        the trial would be kept today; otherwise it pauses or stops as at an epoch end."""
        verdict = self.policy.decide(self.board, trial, epoch, self._cost(trial),
                                     self._peer_costs(trial))
        return self._decided(trial, epoch, verdict)
