"""A preemption is an involuntary pause: the policy judges a preempted trial again, and it
restarts first only if still worth it; otherwise it is paused (resumed when picked) or
pruned (pure, fast: the core on an in-memory study, and the simulator)."""

from __future__ import annotations

import pytest

from benchmarks import lcbench, peers
from hpsearch import keys
from hpsearch.core.search import SearchCore
from hpsearch.core.starts import StartKind
from hpsearch.money.budget import Accountant
from hpsearch.money.ledger_entries import PREEMPTED
from hpsearch.money.nodes import Fleet
from hpsearch.money.statement import statement
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.none import NoPruning
from hpsearch.simulate import Curve, Preemptions, simulate
from hpsearch.spec.sections import Budget

from .test_core import PRICE, Scripted, S, epoch, make, start
from .test_simulate import ScriptedPreemptions

P, X = Decision.PAUSE, Decision.STOP


class Judges(Scripted):
    """Scripted, and says ``on_preempt[(trial, epoch)]`` about a preempted trial."""

    def __init__(self, verdicts=None, resume=None, on_preempt=None):
        super().__init__(verdicts, resume)
        self.on_preempt = on_preempt or {}

    def on_preempted(self, trial, epoch):
        self.seen.append(("preempted", trial, epoch))
        decision = self.on_preempt.get((trial, epoch))
        return CONTINUE if decision is None else Verdict(
            decision, f"ranks last ({decision.value})", predicted_final=0.25)


def two_epochs(core, clock, number):
    """Run ``number`` (started) through epochs 1 and 2, one second each."""
    for e in (1, 2):
        clock.now += 1
        assert epoch(core, number, e) is Decision.CONTINUE


# -- the core ----------------------------------------------------------------------------


def test_a_preempted_trial_the_policy_still_wants_restarts_first():
    policy = Judges({(1, 1): P}, resume=[1])
    core, study, clock, listener = make(n=3, policy=policy)
    start(core)  # 0
    start(core)  # 1
    two_epochs(core, clock, 0)
    assert epoch(core, 1, 1) is P and core.ended(1) is S.PAUSED
    assert core.preempted(0, "node lost") is S.PREEMPTED
    assert ("preempted", 0, 2) in policy.seen
    first = core.next_start()
    assert (first.kind, first.number) == (StartKind.RESUME, 0)  # before 1 and before 2
    assert ("requeued", 0, "preempted", "node lost") in listener.lines
    assert keys.ATTR_STOP_REASON not in study.attrs[0]


def test_a_preempted_trial_the_policy_no_longer_wants_is_paused_until_picked():
    policy = Judges(on_preempt={(0, 2): P})
    core, study, clock, listener = make(n=2, policy=policy)
    start(core)
    two_epochs(core, clock, 0)
    clock.now += 0.5
    assert core.preempted(0, "node lost") is S.PAUSED
    record = core.record(0)
    assert record.state is S.PAUSED and record.preemptions == 1 and record.failures == 0
    assert record.stop.reason == "preempted after epoch 2; ranks last (pause)"
    assert study.attrs[0][keys.ATTR_LIFECYCLE] == "paused"
    assert study.attrs[0][keys.ATTR_STOP_REASON] == (
        "scripted: preempted after epoch 2; ranks last (pause)")
    assert study.attrs[0][keys.ATTR_PREEMPTIONS] == 1
    assert ("end", 0, 2, S.PAUSED) in policy.seen
    assert ("finished", 0, S.PAUSED) in listener.lines
    assert not [line for line in listener.lines if line[0] == "requeued"]
    # Not restarted: the next configuration goes first, and the policy does not pick it.
    assert (core.next_start().kind, core.record(1).state) == (StartKind.NEW, S.PENDING)
    core.started(1)
    assert core.next_start().kind is StartKind.WAIT
    policy.resume = [0]
    again = core.next_start()
    assert (again.kind, again.number) == (StartKind.RESUME, 0)
    # Running again: a driver killed now must resume it, not keep it paused.
    assert study.attrs[0][keys.ATTR_LIFECYCLE] == "running"
    assert study.attrs[0][keys.ATTR_STOP_REASON] is None


def test_a_preempted_trial_the_policy_rejects_is_pruned_with_a_reason_naming_it():
    policy = Judges(on_preempt={(0, 2): X})
    core, study, clock, _ = make(n=2, policy=policy)
    start(core)
    two_epochs(core, clock, 0)
    clock.now += 0.5  # half an epoch lost
    assert core.preempted(0, "node lost") is S.PRUNED
    assert study.states[0] is S.PRUNED and study.finals[0] is None
    assert study.attrs[0][keys.ATTR_STOP_REASON] == (
        "scripted: preempted after epoch 2; ranks last (stop)")
    assert study.attrs[0][keys.ATTR_PREDICTED_FINAL] == 0.25
    assert core.record(0).stop.policy == "scripted"
    assert ("end", 0, 2, S.PRUNED) in policy.seen
    # Its lost work is billed as lost, and it never starts again.
    (interval,) = core.accountant.ledger.intervals
    assert interval.outcome == PREEMPTED and interval.wasted_s() == pytest.approx(0.5)
    begin = core.next_start()
    assert (begin.kind, begin.number) == (StartKind.NEW, 1)


def test_the_session_end_prunes_a_preempted_trial_left_paused():
    core, study, clock, _ = make(n=1, policy=Judges(on_preempt={(0, 2): P}))
    start(core)
    two_epochs(core, clock, 0)
    core.preempted(0, "node lost")
    assert core.next_start().kind is StartKind.FINISHED
    assert core.close() == []
    assert study.states[0] is S.PRUNED
    assert study.attrs[0][keys.ATTR_STOP_REASON] == (
        "scripted: preempted after epoch 2; ranks last (pause)")


def test_a_restore_keeps_a_preempted_trial_paused():
    core, study, clock, _ = make(n=2, policy=Judges(on_preempt={(0, 2): P}))
    start(core)
    two_epochs(core, clock, 0)
    core.preempted(0, "node lost")
    assert core.close(interrupted=True) == []  # a driver stopped: nothing settled
    later_policy = Judges()
    accountant = Accountant(PRICE, Budget(), core.accountant.ledger, 4, clock)
    later = SearchCore(study=study, accountant=accountant, policy=later_policy,
                       max_epochs=4, new_trials=1, clock=clock)
    assert later.restore(study.histories()) == []  # not an orphan: paused on purpose
    assert later.record(0).state is S.PAUSED
    assert [h.state for h in later_policy.restored] == [S.PAUSED]
    begin = later.next_start()
    assert (begin.kind, begin.number) == (StartKind.NEW, 1)
    later.started(1)
    assert later.next_start().kind is StartKind.WAIT  # 0 waits for the policy's pick
    later_policy.resume = [0]
    assert later.next_start().number == 0


def test_max_restarts_still_fails_a_trial_preempted_too_often_paused_or_not():
    # Each preemption counts, whatever the policy says about it (a pause is no failure).
    policy = Judges(on_preempt={(0, 1): P}, resume=[0])
    core, study, clock, _ = make(n=1, policy=policy, max_restarts=1, max_failures=0)
    start(core)
    clock.now += 1
    epoch(core, 0, 1)
    assert core.preempted(0, "node lost") is S.PAUSED
    assert core.next_start().number == 0  # picked
    core.started(0)
    clock.now += 1
    epoch(core, 0, 2)
    assert core.preempted(0, "node lost") is S.FAILED
    assert "more than preemption.max_restarts" in study.attrs[0][keys.ATTR_ERROR]
    assert core.record(0).failures == 0
    assert ("preempted", 0, 2) not in policy.seen  # out of restarts: nothing to judge


def test_with_policy_none_preempted_trials_always_restart_first():
    core, study, clock, listener = make(n=3, policy=NoPruning())
    for _ in range(2):
        start(core)
    for e in (1, 2, 3):
        clock.now += 1
        epoch(core, 0, e)
        epoch(core, 1, e)
    assert core.preempted(0, "node lost") is S.PREEMPTED
    assert core.preempted(1, "node lost") is S.PREEMPTED
    assert [core.next_start().number for _ in range(3)] == [0, 1, 2]
    assert [line[:3] for line in listener.lines] == [("requeued", 0, "preempted"),
                                                     ("requeued", 1, "preempted")]
    assert all(keys.ATTR_STOP_REASON not in study.attrs[n] for n in (0, 1))


def test_a_trial_preempted_before_its_first_epoch_or_after_its_last_restarts_unasked():
    policy = Judges(on_preempt={(0, 4): X})
    core, _, clock, _ = make(n=2, policy=policy)
    start(core)  # 0
    start(core)  # 1
    assert core.preempted(1, "node lost") is S.PREEMPTED  # no epoch yet
    for e in range(1, 5):
        clock.now += 1
        epoch(core, 0, e)
    assert core.preempted(0, "node lost") is S.PREEMPTED  # its last epoch was reported
    assert not [seen for seen in policy.seen if seen[0] == "preempted"]
    assert [core.next_start().number for _ in range(2)] == [1, 0]


@pytest.mark.parametrize("decision, state", [(P, S.PAUSED), (X, S.PRUNED)])
def test_a_trial_preempted_after_the_policy_stopped_it_keeps_that_decision(decision, state):
    # The policy paused or stopped it; its process was taken before it left.
    policy = Judges({(0, 2): decision}, on_preempt={(0, 2): Decision.CONTINUE})
    core, study, clock, _ = make(n=1, policy=policy)
    start(core)
    clock.now += 1
    epoch(core, 0, 1)
    clock.now += 1
    assert epoch(core, 0, 2) is decision
    assert core.preempted(0, "node lost") is state
    assert ("preempted", 0, 2) not in policy.seen  # decided already
    assert study.attrs[0][keys.ATTR_STOP_REASON] == f"scripted: scripted {decision.value}"
    assert core.record(0).preemptions == 1


def test_a_trial_preempted_after_the_budget_stopped_it_is_budget_stopped():
    core, study, clock, _ = make(n=2, budget=Budget(max_cost_per_trial=0.0025),
                                 policy=Judges())
    start(core)
    clock.now = 1
    epoch(core, 0, 1)
    clock.now = 2
    assert epoch(core, 0, 2) is Decision.STOP
    assert core.preempted(0, "node lost") is S.BUDGET_STOPPED
    assert study.states[0] is S.BUDGET_STOPPED
    begin = core.next_start()
    assert (begin.kind, begin.number) == (StartKind.NEW, 1)  # it does not restart


# -- the simulator, with cost_aware -------------------------------------------------------

#: Trial 0: fast first epochs with the worst values, then slow; trials 1-3 (2 s epochs)
#: better. Trial 0 is first at every epoch it reports (too few peers there to judge it,
#: so it goes on); by the time it is preempted (12 s in, 9 s after its epoch 3) the
#: others have passed its epoch 3: judged again, it ranks last of four there, and with no
#: trial finished yet to predict it, cost_aware pauses it. Nothing new reaches epoch 3
#: after that, so it is never resumed and the session end prunes it.
EPOCHS = 10


def timed(epoch_s: list[float], values: list[float]) -> Curve:
    cum, t = [], 0.0
    for d in epoch_s:
        t += d
        cum.append(t)
    return Curve(tuple(values), tuple(cum))


def spot_curves(extra: int = 0) -> list[Curve]:
    slow = timed([1, 1, 1] + [10] * (EPOCHS - 3), [10.0 + e for e in range(EPOCHS)])
    good = [timed([2] * EPOCHS, [50.0 + k + 3 * e for e in range(EPOCHS)])
            for k in range(3 + extra)]
    return [slow, *good]


def cost_aware():
    return peers.make("cost_aware", max_epochs=EPOCHS, n_trials=4, seed=0)


@pytest.mark.parametrize("fleet", [Fleet.PER_TRIAL, Fleet.HELD])
def test_cost_aware_pauses_a_preempted_trial_it_no_longer_wants_in_the_simulator(fleet):
    # A fifth configuration waits for a worker: the preempted trial's must come back
    # (on a fixed cluster, a leaked worker would leave it none).
    curves = spot_curves(extra=1)
    result = simulate(curves, range(len(curves)), 4, cost_aware(), fleet=fleet,
                      preemptions=ScriptedPreemptions({0: 12.0}, restart_s=60.0))
    core = result.core
    assert result.preempted == [(12.0, 0, 9.0, 0.0)]  # 9 s lost, no restart paid
    assert [trial for _, trial in result.starts].count(0) == 1  # never restarted
    assert result.starts[-1] == (12.0, 4)  # its worker went to the next configuration
    record = core.record(0)
    assert record.state is S.PRUNED and record.preemptions == 1
    assert record.stop.reason.startswith("preempted after epoch 3; rank 4/4 at epoch 3")
    assert core.study.states[0] is S.PRUNED
    assert sorted(result.completed) == [1, 2, 3, 4]
    money = statement(core.accountant.ledger, result.end_s)
    wasted = sum(i.wasted_s() for i in core.accountant.ledger.intervals if i.trial == 0)
    assert wasted == pytest.approx(9.0)  # its lost work is counted
    if fleet is Fleet.PER_TRIAL:  # workers released when idle: money is busy time
        assert money.total == pytest.approx(result.busy_s() / 3600)
        assert money.idle == pytest.approx(0.0)


def test_with_policy_none_the_same_preempted_trial_restarts_and_pays_its_restart():
    curves = spot_curves()
    result = simulate(curves, range(len(curves)), 4, NoPruning(),
                      preemptions=ScriptedPreemptions({0: 12.0}, restart_s=60.0))
    assert result.preempted == [(12.0, 0, 9.0, 60.0)]
    assert [trial for _, trial in result.starts].count(0) == 2
    assert sorted(result.completed) == [0, 1, 2, 3]


def test_a_preempted_trial_paused_then_resumed_pays_its_restart_when_it_resumes():
    class PauseOnPreemption(NoPruning):
        """Pauses a preempted trial; resumes it once another trial has completed."""

        def __init__(self):
            self.completed = 0

        def on_preempted(self, trial, epoch):
            return Verdict(P, "later")

        def on_end(self, trial, epoch, state):
            self.completed += state is S.COMPLETE

        def pick_resume(self, waiting, fresh=True):
            return waiting[0] if waiting and self.completed else None

    # One worker. Trial 0 (10 s epochs) is preempted 25 s in and paused; trial 1 runs
    # (5 s); then trial 0 resumes from epoch 2, 7 s of restart before its epoch 3.
    curves = [timed([10] * 4, [1, 2, 3, 4]), timed([5], [1])]
    result = simulate(curves, [0, 1], 1, PauseOnPreemption(),
                      preemptions=ScriptedPreemptions({0: 25.0}, restart_s=7.0))
    assert result.starts == [(0.0, 0), (25.0, 1), (30.0, 0)]
    assert [(t, trial, e) for t, trial, e, _, _ in result.reports] == [
        (10, 0, 1), (20, 0, 2), (30, 1, 1), (47, 0, 3), (57, 0, 4)]
    assert result.preempted == [(25.0, 0, 5.0, 7.0)]
    assert result.core.record(0).state is S.COMPLETE


def test_spot_runs_with_cost_aware_settle_every_preempted_trial_and_count_its_loss(
        monkeypatch):
    # Seeded: 40 synthetic configurations on 8 workers, a preemption every 15 running
    # seconds on average; some preempted trials are no longer worth their restart now.
    from hpsearch.pruning.cost_aware_pruner import CostAwarePruner

    verdicts: dict[int, list[Decision]] = {}
    judge = CostAwarePruner.on_preempted

    def recording(self, trial, epoch):
        verdict = judge(self, trial, epoch)
        verdicts.setdefault(trial, []).append(verdict.decision)
        return verdict

    monkeypatch.setattr(CostAwarePruner, "on_preempted", recording)
    n = 40
    pool = lcbench.synthetic_pool(n, seed=4)
    spot = Preemptions(rate_per_hour=3600 / 15, restart_s=3.0, checkpoint_s=0.0, seed=2)
    result = simulate(pool.curves, range(n), 8, peers.make(
        "cost_aware", max_epochs=lcbench.EPOCHS, n_trials=n, seed=0), spot)
    core, study = result.core, result.core.study
    held = sorted(t for t, ds in verdicts.items() if ds[-1] is not Decision.CONTINUE)
    assert held  # at least one (which ones depends on the predictor's intervals)
    judged = sorted(t for t in range(n) if str(study.attrs[t].get(
        keys.ATTR_STOP_REASON, "")).startswith("cost_aware: preempted after epoch"))
    assert set(judged) <= set(held)
    for trial in held:
        # Not restarted at once: resumed later by the policy (its restart paid then)
        # and judged again from there, or pruned with the preemption as its reason.
        last = [p for p in result.preempted if p[1] == trial][-1]
        if last[3] == 0.0:
            assert study.states[trial] is S.PRUNED and trial in judged
    for trial in judged:
        assert study.states[trial] is S.PRUNED
        last = [p for p in result.preempted if p[1] == trial][-1]
        assert last[3] == 0.0  # no restart paid after the preemption that ended it
    # Nothing left unsettled, no worker leaked, and every lost second billed as lost.
    assert not core.live and not core.queue
    assert all(core.record(t).state.finished for t in range(n))
    money = statement(core.accountant.ledger, result.end_s)
    assert money.total == pytest.approx(result.busy_s() / 3600)
    lost = sum(i.wasted_s() for i in core.accountant.ledger.intervals
               if i.outcome == PREEMPTED)
    assert lost == pytest.approx(sum(p[2] for p in result.preempted))
    restarted = [p for p in result.preempted if p[3] > 0]
    assert all(p[3] == 3.0 for p in restarted)
    assert len(restarted) == len(result.preempted) - len(judged)


# -- every policy ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool30() -> lcbench.Pool:
    return lcbench.synthetic_pool(30, seed=1)


@pytest.mark.parametrize("name", peers.PEERS)
def test_every_peer_settles_its_preempted_trials_on_spot(pool30, name):
    """Each policy answers for a preempted trial; the library pruners (no pause) and
    those that judge only at their own milestones always restart it."""
    n = len(pool30.curves)
    spot = Preemptions(rate_per_hour=3600 / 20, restart_s=3.0, seed=4)
    result = simulate(pool30.curves, range(n), 4, peers.make(
        name, max_epochs=lcbench.EPOCHS, n_trials=n, seed=0), spot)
    core = result.core
    assert len(result.preempted) > 5
    assert not core.live and not core.queue
    assert all(core.record(t).state.finished for t in range(n))
    assert statement(core.accountant.ledger, result.end_s).total == pytest.approx(
        result.busy_s() / 3600)
    judged = [t for t in range(n) if "preempted after epoch" in str(
        core.study.attrs[t].get(keys.ATTR_STOP_REASON, ""))]
    if not name.startswith("cost_aware"):
        assert judged == []
        assert all(p[3] == 3.0 for p in result.preempted)  # each one restarted
