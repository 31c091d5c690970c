"""The cost-aware policy's invariance, pauses and resumes (issue 14), on hand-made curves
and synthetic pools driven through the simulator's search core.

Pure: no Ray, torch, Lightning or Optuna.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import lcbench
from hpsearch.trials import TrialHistory, TrialState
from hpsearch.pruning import cost_aware
from hpsearch.pruning.cost_aware import Board, CostAwarePolicy
from hpsearch.pruning.cost_aware_pruner import CostAwarePruner
from hpsearch.pruning.decisions import Decision
from hpsearch.simulate import Curve, simulate


def pruner_factory(mode: str, max_epochs: int, aggressiveness: float = 1.0):
    def make(accountant):
        return CostAwarePruner(CostAwarePolicy(mode, max_epochs,
                                               aggressiveness=aggressiveness), accountant)
    return make


def decisions(result) -> list[tuple[int, int, Decision]]:
    return [(trial, epoch, d) for _, trial, epoch, _, d in result.reports]


def run(curves: list[Curve], mode: str = "max", workers: int = 4, order=None,
        aggressiveness: float = 1.0):
    epochs = max(c.epochs for c in curves)
    order = list(range(len(curves))) if order is None else order
    return simulate(curves, order, workers, pruner_factory(mode, epochs, aggressiveness))


def transformed(pool: lcbench.Pool, f) -> list[Curve]:
    return [Curve(tuple(f(v) for v in c.values), c.cum_time_s) for c in pool.curves]


def seeded_order(n: int, seed: int) -> list[int]:
    return [int(i) for i in np.random.default_rng([seed, 1]).permutation(n)]


# ---------------------------------------------------------------------------------------
# Invariance to the metric's units and direction


#: Configurations of the synthetic pools below: enough for every kind of decision (pauses,
#: stops on the predicted interval, resumes) dozens of times a run, among 300-650
#: decisions, on every seed used here; the policy's cost grows faster than the pool, so
#: no larger.
POOL_N = 30


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decisions_do_not_change_when_the_metric_is_scaled_or_negated(seed):
    pool = lcbench.synthetic_pool(POOL_N, seed=seed)
    order = seeded_order(POOL_N, seed)
    base = run(pool.curves, "max", order=order)
    assert any(d is Decision.PAUSE for _, _, d in decisions(base))  # the test means something
    assert any(d is Decision.STOP for _, _, d in decisions(base))
    starts = [t for _, t in base.starts]
    assert len(starts) > len(set(starts))  # and some paused trial resumed
    percent = run(transformed(pool, lambda v: v * 100), "max", order=order)
    assert decisions(percent) == decisions(base)
    fraction = run(transformed(pool, lambda v: v / 100), "max", order=order)
    assert decisions(fraction) == decisions(base)
    negated = run(transformed(pool, lambda v: -v), "min", order=order)
    assert decisions(negated) == decisions(base)
    # A shift (an error rate, 100 - accuracy, minimised) changes nothing either.
    error = run(transformed(pool, lambda v: 100 - v), "min", order=order)
    assert decisions(error) == decisions(base)
    assert base.completed == negated.completed == percent.completed


def test_predictions_are_reported_in_the_metric_units():
    pool = lcbench.synthetic_pool(POOL_N, seed=0)
    order = seeded_order(POOL_N, 0)
    base = run(pool.curves, "max", order=order)
    scaled = run(transformed(pool, lambda v: -10 * v), "min", order=order)
    a, b = base.core.policy.predictions, scaled.core.policy.predictions
    assert a and len(a) == len(b)
    for p, q in zip(a, b):
        assert (p.trial, p.epoch) == (q.trial, q.epoch)
        assert q.low == pytest.approx(-10 * p.high) and q.high == pytest.approx(-10 * p.low)
        assert p.low <= p.high


# ---------------------------------------------------------------------------------------
# The leader on a loss metric


def test_the_leader_on_a_loss_is_never_stopped():
    # val_loss, mode min, epoch 2 of 6: the converged leader at 0.13 against falling
    # losses of 0.65-2.24 (the raw slope bonus ranked it 4th of 4).
    b = Board(mode="min")
    for trial, curve in {0: [0.15, 0.13], 1: [2.9, 2.24], 2: [2.5, 0.65], 3: [3.0, 1.2]}.items():
        for epoch, value in enumerate(curve, start=1):
            b.add(trial, epoch, value)
    pol = CostAwarePolicy("min", max_epochs=6)
    assert pol.decide(b, 0, 2).decision is Decision.CONTINUE
    # Even when it is the most expensive by far, and with the deepest cut.
    harsh = CostAwarePolicy("min", max_epochs=6, aggressiveness=4)
    assert harsh.decide(b, 0, 2, cost_rate=100.0,
                        peer_cost_rates=[1.0, 1.0, 1.0]).decision is Decision.CONTINUE
    # The capped bonus keeps the steepest faller behind it.
    assert b.ranked_score(2, 2) < b.ranked_score(0, 2)


def test_a_converged_loss_leader_trains_to_the_end():
    leader = Curve((0.15, 0.13, 0.13, 0.12, 0.12, 0.12), tuple(float(e) for e in range(1, 7)))
    fallers = [Curve(tuple(s * f for f in (1.0, 0.3, 0.25, 0.22, 0.21, 0.2)),
                     tuple(float(e) for e in range(1, 7))) for s in (2.9, 2.5, 3.0, 4.0, 3.5)]
    result = run([leader, *fallers], "min", workers=6)
    assert 0 in result.completed
    assert all(trial != 0 or d is Decision.CONTINUE for trial, _, d in decisions(result))


# ---------------------------------------------------------------------------------------
# Money decides how sure the policy must be


def _hopeless_board(late_gain: float = 0.005) -> Board:
    """Four finished leaders (the incumbent at 0.93; each gained 0.05 after epoch 10) and
    eight finished trials that stood at 0.77-0.79 at epoch 10 and gained ``late_gain``; twenty running trials at
    epoch 10, trial 100+i at 0.80 - 0.002 i."""
    b = Board()
    leaders = {1: (0.88, 0.93), 2: (0.875, 0.925), 3: (0.87, 0.92), 4: (0.865, 0.915)}
    laggards = {5 + k: (0.77 + 0.003 * k, 0.77 + 0.003 * k + late_gain) for k in range(8)}
    for t, (at10, final) in {**leaders, **laggards}.items():
        for e in range(1, 53):
            b.add(t, e, at10 if e <= 10 else final)
        b.finish(t)
    for i in range(20):
        for e in range(1, 11):
            b.add(100 + i, e, 0.80 - 0.002 * i)
    return b


def test_a_hopeless_expensive_trial_stops_before_a_cheap_one():
    b = _hopeless_board()
    pol = CostAwarePolicy("max", 52)
    peers = [1.0] * 31
    # 32 trials at epoch 10 (the finished ones' epoch-10 values count) keep the top 5
    # (0.2 ** 1.225 = 14%); trial 101 ranks 6th: 4x as cheap keeps the top 9, 4x as dear
    # the top 3. Finished trials that stood where it stands gained almost nothing.
    cheap = pol.decide(b, 101, 10, cost_rate=0.25, peer_cost_rates=peers)
    dear = pol.decide(b, 101, 10, cost_rate=4.0, peer_cost_rates=peers)
    assert cheap.decision is Decision.CONTINUE  # 4x as cheap: the share doubles
    # Even its best plausible final falls short: it stops spending now (a pause, as
    # later trials may teach the predictor otherwise) ...
    assert dear.decision is Decision.PAUSE
    assert "ends short of the best finished trial" in dear.reason and "x0.50" in dear.reason
    assert "judged again once no configuration is new" in dear.reason
    low, high = dear.predicted_interval
    assert low <= dear.predicted_final <= high < b.incumbent()
    # ... and it stops for good where even an optimistic path cannot reach the incumbent.
    for e in range(11, 16):
        b.add(101, e, 0.798)
    hopeless = pol.decide(b, 101, 15, cost_rate=4.0, peer_cost_rates=peers)
    assert hopeless.decision is Decision.STOP
    assert "optimistic path" in hopeless.reason


def test_a_cut_trial_whose_interval_reaches_the_incumbent_is_paused():
    # Trial 101 (0.798 at epoch 10) is cut when it is dear; where the finished trials that
    # stood beside it gained little, it is stopped. Where they gained enough to pass the
    # incumbent, the same cut is a pause.
    pol = CostAwarePolicy("max", 52, aggressiveness=3)
    b2 = _hopeless_board()
    for e in range(1, 11):
        b2.add(200, e, 0.89 if e == 10 else 0.795)
    verdict = pol.decide(b2, 200, 10, cost_rate=4.0, peer_cost_rates=[1.0] * 32)
    assert verdict.decision is Decision.CONTINUE  # it leads at epoch 10
    verdict = pol.decide(b2, 101, 10, cost_rate=4.0, peer_cost_rates=[1.0] * 32)
    assert verdict.decision is Decision.PAUSE and "ends short" in verdict.reason
    b3 = _hopeless_board(late_gain=0.16)
    verdict = pol.decide(b3, 101, 10, cost_rate=4.0, peer_cost_rates=[1.0] * 31)
    assert verdict.decision is Decision.PAUSE
    assert "may still reach the best finished trial" in verdict.reason


def test_with_too_few_finished_trials_a_cut_is_a_pause():
    b = Board()
    for i in range(10):
        for e in range(1, 6):
            b.add(i, e, 0.9 - 0.05 * i)
    verdict = CostAwarePolicy("max", 52).decide(b, 9, 5)
    assert verdict.decision is Decision.PAUSE
    assert "too few finished trials" in verdict.reason
    assert verdict.predicted_interval is None


# ---------------------------------------------------------------------------------------
# A slow starter is paused, not stopped, and resumed


def slow_starter_pool() -> list[Curve]:
    """Trial 0 starts behind three fast trials and overtakes them by epoch 6; trials
    4-11 are poor from the start. Every epoch takes 1 s; 20 epochs."""
    epochs = 20
    time = tuple(float(e) for e in range(1, epochs + 1))
    slow = [min(0.95, 0.30 + 0.12 * (e - 1)) if e > 1 else 0.30 for e in range(1, epochs + 1)]
    slow[1] = 0.35
    fast = [[min(0.80 - 0.01 * k, 0.6 + 0.05 * (e - 1)) for e in range(1, epochs + 1)]
            for k in range(3)]
    poor = [[0.2 + 0.005 * k] * epochs for k in range(8)]
    return [Curve(tuple(c), time) for c in (slow, *fast, *poor)]


def test_a_slow_starter_that_overtakes_is_paused_then_resumed_and_wins():
    curves = slow_starter_pool()
    # The fast trials first, then the slow starter, then the poor ones.
    result = run(curves, "max", workers=4, order=[1, 2, 3, 0, *range(4, 12)])
    mine = [(e, d) for t, e, d in decisions(result) if t == 0 and d is not Decision.CONTINUE]
    assert mine and mine[0] == (2, Decision.PAUSE), mine  # cut at epoch 2, paused
    assert all(d is not Decision.STOP for _, d in mine)
    assert [t for _, t in result.starts].count(0) >= 2  # resumed
    assert 0 in result.completed
    segments = [(s.first_epoch, s.last_epoch) for s in result.segments if s.trial == 0]
    assert segments[0] == (1, 2) and segments[-1][1] == 20
    best = max(result.completed, key=lambda t: curves[t].values[-1])
    assert best == 0


def test_paused_trials_resume_only_when_they_rank_within_the_share():
    # Without the poor trials nothing arrives to change the evidence at epoch 2: the slow
    # starter stays paused and is PRUNED when the search ends.
    curves = slow_starter_pool()[:4]
    curves += [Curve(c.values, c.cum_time_s) for c in slow_starter_pool()[1:4]]
    result = run(curves, "max", workers=4, order=[1, 2, 3, 0, 4, 5, 6])
    assert (0, 2, Decision.PAUSE) in decisions(result)
    assert [t for _, t in result.starts].count(0) == 1
    assert result.core.record(0).state is TrialState.PRUNED


def test_a_restored_paused_trial_stays_paused_and_can_resume():
    made = simulate([], [], 1, pruner_factory("max", 20)).core.policy
    histories = [TrialHistory(t, TrialState.PRUNED, {1: 0.2, 2: 0.2}) for t in range(4, 10)]
    histories += [TrialHistory(t, TrialState.RUNNING, {1: 0.6, 2: 0.65}) for t in (1, 2, 3)]
    histories.append(TrialHistory(0, TrialState.PAUSED, {1: 0.30, 2: 0.35}))
    made.restore(histories)
    assert made.board.stopped_at[0] == 2
    # Among ten at epoch 2 it ranks 4th, within the 63% kept: worth resuming.
    assert made.pick_resume([0]) == 0
    assert made.pick_resume([5]) is None  # not paused by this policy
    made.on_start(0)
    assert 0 not in made.board.stopped_at and made.pick_resume([0]) is None


class Chooser:
    """A resume chooser that gives one answer and records what it was asked."""

    def __init__(self, answer):
        self.answer, self.asked = answer, []

    def choose(self, paused, fresh):
        self.asked.append((sorted(paused), fresh))
        return self.answer


def test_a_chooser_picks_among_the_resumes_the_policy_allows_or_starts_a_new_one():
    from hpsearch.model.planner import ResumeChoice

    def restored(chooser):
        made = simulate([], [], 1, pruner_factory("max", 20)).core.policy
        made.chooser = chooser
        histories = [TrialHistory(t, TrialState.PRUNED, {1: 0.2, 2: 0.2}) for t in range(4, 10)]
        histories += [TrialHistory(t, TrialState.RUNNING, {1: 0.6, 2: 0.65}) for t in (1, 2, 3)]
        # Trials 0 and 10 rank within the kept share at epoch 2; 11 ranks last.
        histories += [TrialHistory(0, TrialState.PAUSED, {1: 0.30, 2: 0.35}),
                      TrialHistory(10, TrialState.PAUSED, {1: 0.31, 2: 0.36}),
                      TrialHistory(11, TrialState.PAUSED, {1: 0.1, 2: 0.1})]
        made.restore(histories)
        return made

    assert restored(None).pick_resume([0, 10, 11]) == 10  # the policy's own order
    # The chooser sees only what the policy allows, and its pick is taken ...
    made = restored(Chooser(ResumeChoice(0, 0.5)))
    assert made.pick_resume([0, 10, 11]) == 0
    assert made.chooser.asked == [([0, 10], True)]
    # ... as is its verdict that a new configuration is worth more ...
    assert restored(Chooser(ResumeChoice(None, 0.9))).pick_resume([0, 10, 11]) is None
    # ... and without an opinion the policy's order decides.
    assert restored(Chooser(None)).pick_resume([0, 10, 11]) == 10
    # Nothing allowed: the chooser is not asked.
    made = restored(Chooser(ResumeChoice(11, 1.0)))
    assert made.pick_resume([11]) is None and made.chooser.asked == []


def test_the_last_round_resumes_a_paused_trial_that_may_still_win_outside_its_interval():
    # Thirty finished trials stood at 0.555-0.566 after epoch 5: most gained 0-0.12 by
    # the end, two gained 0.33 (the incumbent, 0.886). Paused trial 50 stands at 0.56
    # after epoch 5: its 80% interval (most of its peers' gains) ends short of the
    # incumbent, but some of its plausible finals beat it and the guard would keep it.
    made = simulate([], [], 1, pruner_factory("max", 20)).core.policy
    stood = [(0.555 + 0.0004 * k, 0.12 * k / 27) for k in range(28)]
    stood += [(0.555, 0.33), (0.556, 0.33)]
    histories = [TrialHistory(0, TrialState.COMPLETE,
                              {e: 0.80 if e <= 5 else 0.85 for e in range(1, 21)})]
    histories += [TrialHistory(1 + k, TrialState.COMPLETE,
                               {e: at5 if e <= 5 else at5 + gain for e in range(1, 21)})
                  for k, (at5, gain) in enumerate(stood)]
    histories.append(TrialHistory(50, TrialState.PAUSED, {e: 0.56 for e in range(1, 6)}))
    made.restore(histories)
    pol, board = made.policy, made.board
    assert pol.interval(board, 50, 5)[1] < board.incumbent() <= pol.reach(board, 50, 5)
    assert pol.expected_improvement(board, 50, 5) > 0
    # While new configurations remain it waits: its interval falls short (and it ranks
    # 17th of 32 where the top 10 are kept) ...
    assert made.pick_resume([50]) is None
    # ... once none remain, it is what the pause promised: judged again, and resumed.
    assert made.pick_resume([50], fresh=False) == 50
    assert 50 in made.last_round
    # Where none of its plausible finals beats the incumbent (the two big gainers gained
    # 0.15 instead: the incumbent is trial 0's 0.85), the last round passes it by.
    stood[-2:] = [(0.555, 0.15), (0.556, 0.15)]
    histories[1:-1] = [TrialHistory(1 + k, TrialState.COMPLETE,
                                    {e: at5 if e <= 5 else at5 + gain for e in range(1, 21)})
                       for k, (at5, gain) in enumerate(stood)]
    again = simulate([], [], 1, pruner_factory("max", 20)).core.policy
    again.restore(histories)
    assert again.policy.expected_improvement(again.board, 50, 5) == 0
    assert again.pick_resume([50], fresh=False) is None


def _flat_then(at5: float, gain: float, epochs: int = 20) -> dict[int, float]:
    return {e: at5 if e <= 5 else at5 + gain for e in range(1, epochs + 1)}


def test_the_guard_pauses_until_the_last_round_which_judges_it_on_the_whole_runs_curves():
    # Two early leaders finished (0.80 after epoch 5, 0.85 at the end: 0.05 of recovery
    # from epoch 5). Trial 50, flat at 0.56 after epoch 5, cannot reach 0.85 even at three
    # times that recovery: the guard's verdict, which the pruner turns into a pause.
    made = simulate([], [], 1, pruner_factory("max", 20)).core.policy
    early = [TrialHistory(k, TrialState.COMPLETE, _flat_then(0.80, 0.05)) for k in (0, 1)]
    made.restore(early)
    for e in range(1, 5):
        made.board.add(50, e, 0.56)
    verdict = made.on_result(50, 5, 0.56)
    assert verdict.decision is Decision.PAUSE and 50 in made.paused
    assert "optimistic path" in verdict.reason
    assert verdict.reason.endswith("judged again once no configuration is new")
    # The rule itself still says stop; only the pruner makes it a pause.
    assert made.policy.decide(made.board, 50, 5).decision is Decision.STOP
    # While configurations are new nothing changed: it stays paused, and so it does once
    # none are, on the same evidence (nothing gained more than 0.05 from epoch 5).
    for t in range(60, 64):
        for e in range(1, 6):
            made.board.add(t, e, 0.50)
    assert made.pick_resume([50]) is None
    assert made.pick_resume([50], fresh=False) is None
    # Nor does a wide interval resume it while configurations are new: the guard would
    # pause it again after its next epoch (it ranks within the kept share at epoch 5).
    for t in range(64, 70):
        for e in range(1, 6):
            made.board.add(t, e, 0.30)
    policy = made.policy
    policy.interval = lambda board, trial, epoch: (0.50, 0.95)
    assert made.pick_resume([50]) is None
    policy._guard = lambda *args: None
    assert made.pick_resume([50]) == 50
    # The whole run's curves: thirty slow starters that stood at 0.55-0.57 after epoch 5
    # finished, five of them at 0.89 (the incumbent now). Its plausible finals now
    # beat the incumbent and an optimistic path reaches it: the last round resumes it.
    late = [TrialHistory(10 + k, TrialState.COMPLETE,
                         _flat_then(0.55 + 0.0007 * k, 0.34 if k % 6 == 0 else 0.1))
            for k in range(30)]
    judged = simulate([], [], 1, pruner_factory("max", 20)).core.policy
    judged.restore(early + late + [TrialHistory(50, TrialState.PAUSED,
                                                {e: 0.56 for e in range(1, 6)})])
    assert judged.policy._guard(judged.board, 50, 5, 0.56, None) is None
    assert judged.pick_resume([50], fresh=False) == 50 and 50 in judged.last_round
    # Resumed in the last round, its guard's stop is final: nothing is left to wait for.
    judged.on_start(50)
    for e in range(6, 12):
        judged.board.add(50, e, 0.40)
    assert judged.on_result(50, 12, 0.40).decision is Decision.STOP


# ---------------------------------------------------------------------------------------
# Runs on a synthetic pool: pauses and resumes happen, on both objectives


@pytest.mark.parametrize("objective", ["acc", "loss"])
def test_cost_aware_pauses_and_resumes_on_a_synthetic_pool(objective):
    pool = lcbench.synthetic_pool(POOL_N, seed=4, objective=lcbench.OBJECTIVES[objective])
    result = run(pool.curves, pool.objective.mode, order=seeded_order(POOL_N, 4))
    kinds = {d for _, _, d in decisions(result)}
    assert Decision.PAUSE in kinds
    starts = [t for _, t in result.starts]
    assert len(starts) > len(set(starts))  # some paused trial resumed
    assert result.completed
    assert len(result.completed) < POOL_N
    assert cost_aware.BONUS_CAP > 0
