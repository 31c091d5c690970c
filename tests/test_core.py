"""The search core's decisions, event by event, on an in-memory study (pure, fast)."""

from __future__ import annotations

import math

import pytest

from hpsearch import keys
from hpsearch.money.budget import Accountant
from hpsearch.spec.sections import Budget
from hpsearch.core.lifecycle import LifecycleError
from hpsearch.core.ports import EpochReport, MemoryStudy
from hpsearch.trials import TrialHistory, TrialState
from hpsearch.core.search import SearchCore
from hpsearch.core.starts import StartKind
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import DONE, FAILED, PREEMPTED, STOPPED
from hpsearch.pruning.none import NoPruning
from hpsearch.money.pricing import Price

S = TrialState
PRICE = Price(3.6, "USD", "test", False, 3.6, 1.0, billing_granularity_s=0)  # 0.001/s


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scripted(NoPruning):
    """Decides what ``verdicts`` says for (trial, epoch); records what it is told."""

    name = "scripted"

    def __init__(self, verdicts=None, resume=None):
        self.verdicts = verdicts or {}
        self.resume = list(resume or [])
        self.seen: list[tuple] = []
        self.restored: list[TrialHistory] = []

    def restore(self, histories):
        self.restored = list(histories)

    def on_start(self, trial, params=None):
        self.seen.append(("start", trial))

    def on_result(self, trial, epoch, value):
        self.seen.append(("result", trial, epoch, value))
        decision = self.verdicts.get((trial, epoch))
        return CONTINUE if decision is None else Verdict(decision, f"scripted {decision.value}",
                                                         predicted_final=0.5)

    def on_end(self, trial, epoch, state):
        self.seen.append(("end", trial, epoch, state))

    def pick_resume(self, waiting, fresh=True):
        return self.resume.pop(0) if self.resume and self.resume[0] in waiting else None


class Listener:
    def __init__(self):
        self.lines: list[tuple] = []

    def trial_finished(self, record):
        self.lines.append(("finished", record.number, record.state))

    def trial_requeued(self, record, event, reason):
        self.lines.append(("requeued", record.number, event.value, reason))


def make(n=3, policy=None, budget=None, max_epochs=4, study=None, **kwargs):
    clock = Clock()
    accountant = Accountant(PRICE, budget or Budget(), Ledger(), max_epochs, clock)
    study = study or MemoryStudy([{"i": i} for i in range(n)])
    listener = Listener()
    core = SearchCore(study=study, accountant=accountant, policy=policy or Scripted(),
                      max_epochs=max_epochs, new_trials=n, listener=listener, clock=clock,
                      **kwargs)
    return core, study, clock, listener


def start(core, clock=None):
    begin = core.next_start()
    assert begin.kind in (StartKind.NEW, StartKind.RESUME), begin
    core.started(begin.number)
    return begin


def epoch(core, number, e, value=None, epoch_s=1.0, **kw) -> Decision:
    return core.reported(EpochReport(number, e, float(e if value is None else value),
                                     epoch_s, **kw))


def run_to_end(core, clock, number, frm=1, to=4):
    for e in range(frm, to + 1):
        clock.now += 1
        assert epoch(core, number, e) is Decision.CONTINUE
    return core.ended(number)


# -- starting ------------------------------------------------------------------------


def test_new_trials_are_handed_out_until_none_is_left_then_finished():
    core, study, clock, _ = make(n=2)
    first, second = core.next_start(), core.next_start()
    assert (first.kind, first.number, first.params) == (StartKind.NEW, 0, {"i": 0})
    assert second.number == 1
    waiting = core.next_start()
    assert waiting.kind is StartKind.WAIT  # two live trials may still need a worker
    for number in (0, 1):
        core.started(number)
        run_to_end(core, clock, number)
    assert core.next_start().kind is StartKind.FINISHED
    assert study.states == {0: S.COMPLETE, 1: S.COMPLETE}
    assert study.finals == {0: 4.0, 1: 4.0}


def test_a_preempted_trial_restarts_before_new_configurations_and_paused_ones():
    policy = Scripted({(0, 1): Decision.PAUSE}, resume=[0])
    core, _, clock, listener = make(n=3, policy=policy)
    start(core)  # 0
    start(core)  # 1
    assert epoch(core, 0, 1) is Decision.PAUSE
    assert core.ended(0) is S.PAUSED
    clock.now = 5
    epoch(core, 1, 1)
    assert core.preempted(1, "simulated", saved=False) is S.PREEMPTED
    assert core.next_start().number == 1  # the preempted one first
    assert core.next_start().number == 0  # then the policy's pick among the paused
    assert core.next_start().number == 2  # then new
    assert ("requeued", 1, "preempted", "simulated") in listener.lines
    # The paused trial's resume is told (the progress line says it), once.
    assert listener.lines.count(("requeued", 0, "resumed", "picked by scripted")) == 1


def test_queued_restarts_do_not_wait_for_admission():
    # One more epoch would pass the cap, but a restart's money was committed already.
    core, _, clock, _ = make(n=2, budget=Budget(max_cost=0.0035))
    start(core)
    clock.now = 2
    epoch(core, 0, 1, epoch_s=2.0)
    core.preempted(0, "notice", saved=True)
    again = core.next_start()
    assert (again.kind, again.number) == (StartKind.RESUME, 0)


def test_the_budget_closes_admission_and_the_session():
    core, _, clock, _ = make(n=3, budget=Budget(max_cost=0.003))
    start(core)
    clock.now = 3.5
    assert epoch(core, 0, 1, epoch_s=3.5) is Decision.STOP  # spent 0.0035 >= 0.003
    assert core.ended(0) is S.BUDGET_STOPPED
    closed = core.next_start()
    assert closed.kind is StartKind.FINISHED and "budget.max_cost reached" in closed.reason
    assert core.closed_reason and core.stop_reason.startswith("budget.max_cost reached")


def test_an_unplaceable_trial_fails_the_queue_and_stops_new_trials():
    class NoSpot:
        active = True

        def choose(self):
            return None, "no spot node alive"

        def price_for_node(self, node):
            return PRICE

    core, study, clock, _ = make(n=3, placement=NoSpot())
    # Trial 0 was left running by a stopped driver: it is queued to resume.
    study.states[0] = S.RUNNING
    study.next = 1
    core.restore([TrialHistory(0, S.RUNNING, {1: 0.5})])
    finished = core.next_start()
    assert finished.kind is StartKind.FINISHED and finished.reason == "no spot node alive"
    assert core.record(0).state is S.FAILED and core.new_left == 0
    assert study.attrs[0][keys.ATTR_ERROR] == "no spot node alive"


def test_a_preempted_trial_that_cannot_be_placed_again_fails_instead_of_crashing():
    class SpotGone:
        active = True
        gone = False

        def choose(self):
            return (None, "no spot node alive") if self.gone else (True, None)

    placement = SpotGone()
    core, study, clock, _ = make(n=1, placement=placement)
    start(core)
    epoch(core, 0, 1)
    placement.gone = True  # its spot node was taken back, and no fallback is allowed
    assert core.preempted(0, "node lost") is S.PREEMPTED
    finished = core.next_start()
    assert finished.kind is StartKind.FINISHED and finished.reason == "no spot node alive"
    assert core.record(0).state is S.FAILED
    assert study.states[0] is S.FAILED


def test_waiting_for_a_spot_node_hands_nothing_out():
    class Later:
        active = True

        def choose(self):
            return None, None

    core, study, _, _ = make(n=1, placement=Later())
    assert core.next_start().kind is StartKind.WAIT
    assert study.next == 0 and core.new_left == 1


# -- results ---------------------------------------------------------------------------


def test_each_epoch_is_recorded_billed_and_decided_once():
    policy = Scripted()
    core, study, clock, _ = make(n=1, policy=policy)
    start(core)
    clock.now = 1
    epoch(core, 0, 1, 0.4)
    clock.now = 2
    epoch(core, 0, 2, 0.5, checkpoint_epoch=1)
    # A resumed process re-sends epoch 2 with another value: kept once, not re-decided.
    epoch(core, 0, 2, 0.9, start_epoch=1)
    assert study.values[0] == {1: 0.4, 2: 0.5}
    assert [s for s in policy.seen if s[0] == "result"] == [("result", 0, 1, 0.4),
                                                            ("result", 0, 2, 0.5)]
    assert study.attrs[0][keys.ATTR_COST] == pytest.approx(0.002)


def test_each_epoch_records_the_accountants_estimate_of_what_is_left():
    core, study, clock, _ = make(n=1, max_epochs=4)
    start(core)
    for e, epoch_s in ((1, 3.0), (2, 2.0), (3, 2.0)):
        clock.now += epoch_s
        epoch(core, 0, e, 0.5, epoch_s=epoch_s)
        attrs = study.attrs[0]
        # One formula: the accountant's (its share of its node x the runtime model).
        assert attrs[keys.ATTR_COST_TO_FINISH] == pytest.approx(
            core.accountant.cost_to_finish(0, e))
        assert attrs[keys.ATTR_REMAINING_S] == pytest.approx(
            core.accountant.timing.remaining_s(0, e))
    assert study.attrs[0][keys.ATTR_REMAINING_S] > 0
    clock.now += 2
    epoch(core, 0, 4, 0.5, epoch_s=2.0)
    assert study.attrs[0][keys.ATTR_REMAINING_S] == 0
    assert study.attrs[0][keys.ATTR_COST_TO_FINISH] == 0


def test_history_from_a_checkpoint_fills_epochs_the_study_never_recorded():
    core, study, _, _ = make(n=1)
    start(core)
    epoch(core, 0, 3, 0.7, start_epoch=2, history=((1, 0.5), (2, 0.6), (3, 0.99)))
    assert study.values[0] == {1: 0.5, 2: 0.6, 3: 0.7}
    assert core.record(0).epoch == 3 and core.record(0).value == 0.7


def test_epochs_restored_from_a_checkpoint_are_taught_to_the_policy_undecided():
    policy = Scripted()
    core, _, _, _ = make(n=1, policy=policy)
    start(core)
    epoch(core, 0, 3, 0.7, start_epoch=2, history=((1, 0.5), (2, 0.6), (3, 0.99)))
    # Learned as an earlier session's epochs (a curve without holes), decided on: only 3.
    assert [(h.number, h.state, dict(h.values)) for h in policy.restored] == [
        (0, S.RUNNING, {1: 0.5, 2: 0.6})]
    assert [e for e in policy.seen if e[0] == "result"] == [("result", 0, 3, 0.7)]


@pytest.mark.parametrize("decision, final", [(Decision.STOP, S.PRUNED),
                                             (Decision.PAUSE, S.PAUSED)])
def test_a_policy_stop_or_pause_is_recorded_with_its_reason(decision, final):
    core, study, clock, listener = make(n=1, policy=Scripted({(0, 2): decision}))
    start(core)
    epoch(core, 0, 1)
    assert epoch(core, 0, 2) is decision
    # Tune may deliver another result before the stop lands: the answer stays.
    assert core.reported(EpochReport(0, 2, 2.0, 1.0)) is decision
    assert study.attrs[0][keys.ATTR_STOP_REASON] == f"scripted: scripted {decision.value}"
    assert study.attrs[0][keys.ATTR_PREDICTED_FINAL] == 0.5
    assert study.attrs[0][keys.ATTR_SAVED_COST] == pytest.approx(2 * 1.0 * 0.001)
    assert core.ended(0) is final
    assert ("finished", 0, final) in listener.lines


def test_the_last_epoch_is_shown_to_the_policy_but_is_no_prune():
    policy = Scripted({(0, 4): Decision.STOP})
    core, study, clock, _ = make(n=1, policy=policy)
    start(core)
    assert run_to_end(core, clock, 0) is S.COMPLETE
    assert ("result", 0, 4, 4.0) in policy.seen
    assert keys.ATTR_STOP_REASON not in study.attrs.get(0, {})


def test_a_trial_that_never_reported_or_ended_nan_fails():
    core, study, clock, _ = make(n=2)
    start(core)
    start(core)
    assert core.ended(0) is S.FAILED
    assert study.attrs[0][keys.ATTR_ERROR] == "trial ended without reporting an epoch"
    epoch(core, 1, 1, math.nan)
    assert core.ended(1) is S.FAILED
    assert "NaN" in study.attrs[1][keys.ATTR_ERROR]


def test_a_trial_whose_objective_turns_nan_is_stopped_at_once_and_fails():
    policy = Scripted()
    core, study, clock, listener = make(n=1, policy=policy, max_epochs=10)
    start(core)
    clock.now = 1
    assert epoch(core, 0, 1, 7e29) is Decision.CONTINUE
    clock.now = 2
    # Diverged: stopped now, not trained (and billed) for eight more NaN epochs.
    assert epoch(core, 0, 2, math.nan) is Decision.STOP
    assert ("result", 0, 2, math.nan) not in [tuple(x) for x in policy.seen]
    assert [x for x in policy.seen if x[0] == "result"] == [("result", 0, 1, 7e29)]
    assert core.ended(0) is S.FAILED
    error = study.attrs[0][keys.ATTR_ERROR]
    assert "NaN after epoch 2/10" in error and "diverged" in error
    assert study.attrs[0][keys.ATTR_STOP_REASON].startswith("diverged: ")
    assert study.attrs[0][keys.ATTR_SAVED_COST] > 0  # the eight epochs it did not pay for
    assert study.attrs[0][keys.ATTR_EPOCHS] == 2
    assert core.failures and "NaN" in core.failures[0].error
    assert ("end", 0, 2, S.FAILED) in policy.seen


def test_a_nan_objective_stops_a_trial_before_the_budget_would_keep_it_resumable():
    # A budget stop leaves a trial BUDGET_STOPPED (resumed by a later session); a
    # diverged one must not come back: NaN is judged first.
    core, study, clock, _ = make(n=2, budget=Budget(max_cost_per_trial=0.0025), max_epochs=10)
    start(core)
    start(core)
    clock.now = 1
    for number in (0, 1):
        assert epoch(core, number, 1, 0.5) is Decision.CONTINUE
    clock.now = 2
    # After epoch 2 a third epoch would pass the trial's 0.0025: the budget stops both.
    for number, value in ((0, math.nan), (1, 0.4)):
        assert epoch(core, number, 2, value) is Decision.STOP
    assert core.ended(0) is S.FAILED
    assert core.ended(1) is S.BUDGET_STOPPED


def test_per_trial_budget_stops_before_the_epoch_that_would_pass_it():
    core, _, clock, _ = make(n=1, budget=Budget(max_cost_per_trial=0.0025))
    start(core)
    clock.now = 1
    assert epoch(core, 0, 1) is Decision.CONTINUE
    clock.now = 2
    assert epoch(core, 0, 2) is Decision.STOP  # 0.002 spent + 0.001 next > 0.0025
    assert core.ended(0) is S.BUDGET_STOPPED
    assert core.record(0).stop.policy == "budget"


# -- ends ----------------------------------------------------------------------------


def test_preemptions_have_their_own_allowance_and_use_no_failure_retry():
    core, study, clock, listener = make(n=1, max_restarts=2, max_failures=0)
    for attempt in range(2):
        start(core)
        clock.now += 1
        epoch(core, 0, attempt + 1)
        assert core.preempted(0, "node lost") is S.PREEMPTED
    assert study.attrs[0][keys.ATTR_PREEMPTIONS] == 2
    start(core)
    assert core.preempted(0, "node lost") is S.FAILED
    assert "more than preemption.max_restarts" in study.attrs[0][keys.ATTR_ERROR]
    assert [i.outcome for i in core.accountant.ledger.intervals] == [PREEMPTED] * 3


def test_a_notice_that_saved_everything_loses_no_work():
    core, _, clock, _ = make(n=1)
    start(core)
    clock.now = 1
    epoch(core, 0, 1, checkpoint_epoch=0)
    clock.now = 1.5
    core.preempted(0, "notice", saved=True)
    (interval,) = core.accountant.ledger.intervals
    assert interval.wasted_s() == 0 and core.record(0).checkpoint_epoch == 1


def test_failures_are_retried_within_max_failures_then_fail():
    core, study, clock, listener = make(n=1, max_failures=1)
    start(core)
    assert core.failed(0, "RuntimeError: boom") is S.PENDING
    assert ("requeued", 0, "failed", "RuntimeError: boom") in listener.lines
    assert core.next_start().kind is StartKind.RESUME
    core.started(0)
    assert core.failed(0, "RuntimeError: boom") is S.FAILED
    assert study.states[0] is S.FAILED and study.attrs[0][keys.ATTR_FAILURES] == 1


def test_a_setup_error_aborts_the_session():
    core, _, _, _ = make(n=3, max_failures=5)
    start(core)
    start(core)
    assert core.failed(0, "contract broken", setup=True) is S.FAILED
    assert core.abort_reason == "contract broken"
    assert core.next_start().kind is StartKind.WAIT  # trial 1 still live
    core.failed(1, "run aborted", setup=True)
    assert core.next_start().kind is StartKind.FINISHED
    assert core.abort_reason == "contract broken"


@pytest.mark.parametrize("requeue, state", [(True, S.PENDING), (False, S.FAILED)])
def test_a_trial_moved_off_a_vanished_node_kind(requeue, state):
    core, _, _, listener = make(n=1)
    core.next_start()  # handed out, waiting for a node
    assert core.moved(0, "no spot node alive", requeue) is state
    if requeue:
        again = core.next_start()
        assert (again.kind, again.number) == (StartKind.RESUME, 0)


def test_a_trial_that_refused_its_node_runs_elsewhere_without_a_failure():
    """A trial whose node cannot reach the checkpoint storage trained nothing there."""
    core, study, _, listener = make(n=1, max_failures=0)
    start(core)  # RUNNING on the node that cannot reach the storage
    assert core.moved(0, "node abc cannot reach the checkpoint storage", True) is S.PENDING
    assert core.record(0).state is S.PENDING and core.failures == []
    assert ("requeued", 0, "moved", "node abc cannot reach the checkpoint storage") \
        in listener.lines
    again = core.next_start()
    assert (again.kind, again.number) == (StartKind.RESUME, 0)
    core.started(0)
    assert core.record(0).state is S.RUNNING
    assert keys.ATTR_FAILURES not in study.attrs.get(0, {})


def test_impossible_events_are_errors():
    core, _, clock, _ = make(n=1)
    with pytest.raises(LifecycleError, match="trial 5 does not exist"):
        core.started(5)
    start(core)
    run_to_end(core, clock, 0)
    with pytest.raises(LifecycleError, match="trial 0 is complete: it cannot be reported"):
        epoch(core, 0, 5)
    with pytest.raises(LifecycleError, match="cannot be started"):
        core.started(0)


# -- the session's end and a continued run ----------------------------------------------


def test_closing_prunes_paused_trials_and_budget_stops_queued_ones():
    core, study, clock, _ = make(n=2, policy=Scripted({(0, 1): Decision.PAUSE}))
    start(core)
    start(core)
    epoch(core, 0, 1)
    core.ended(0)
    epoch(core, 1, 1)
    core.preempted(1, "gone")
    assert core.close() == []
    assert study.states == {0: S.PRUNED, 1: S.BUDGET_STOPPED}
    assert study.attrs[1][keys.ATTR_STOP_REASON] == "budget: the session ended"


def test_each_pause_and_resume_is_recorded_and_a_later_session_counts_on():
    # Paused after epoch 1, resumed, paused after epoch 2; the next session resumes it
    # once more: the study holds every pause's epoch and how many were undone.
    policy = Scripted({(0, 1): Decision.PAUSE, (0, 2): Decision.PAUSE}, resume=[0])
    core, study, clock, _ = make(n=1, policy=policy)
    start(core)
    assert epoch(core, 0, 1) is Decision.PAUSE and core.ended(0) is S.PAUSED
    assert study.attrs[0][keys.ATTR_PAUSED_AT] == [1]
    assert keys.ATTR_RESUMES not in study.attrs[0]
    assert (start(core).kind, core.record(0).resumes) == (StartKind.RESUME, 1)
    assert study.attrs[0][keys.ATTR_RESUMES] == 1
    assert epoch(core, 0, 2) is Decision.PAUSE and core.ended(0) is S.PAUSED
    assert study.attrs[0][keys.ATTR_PAUSED_AT] == [1, 2]
    assert core.close(interrupted=True) == []

    later, _, _, _ = make(n=1, policy=Scripted(resume=[0]), study=study)
    later.restore(study.histories())
    assert (later.record(0).paused_at, later.record(0).resumes) == ([1, 2], 1)
    start(later)
    assert study.attrs[0][keys.ATTR_RESUMES] == 2
    run_to_end(later, clock, 0, frm=3)
    assert study.attrs[0][keys.ATTR_PAUSED_AT] == [1, 2]  # a finish keeps the record


def test_a_preempted_trial_judged_not_worth_its_restart_counts_as_paused():
    policy = Scripted()
    policy.on_preempted = lambda trial, epoch: Verdict(Decision.PAUSE, "not worth it")
    core, study, _, _ = make(n=1, policy=policy)
    start(core)
    epoch(core, 0, 1)
    epoch(core, 0, 2)
    assert core.preempted(0, "spot node taken back") is S.PAUSED
    assert study.attrs[0][keys.ATTR_PAUSED_AT] == [2]


def test_an_interrupted_session_settles_nothing():
    core, study, _, _ = make(n=2, policy=Scripted({(0, 1): Decision.PAUSE}))
    start(core)
    start(core)
    epoch(core, 0, 1)
    core.ended(0)
    assert core.close(interrupted=True) == [1]
    assert core.record(0).state is S.PAUSED
    assert study.states[0] is S.RUNNING  # unfinished in the study: it resumes later


def test_restore_rebuilds_states_queues_orphans_and_relearns():
    policy = Scripted()
    core, _, _, _ = make(n=5, policy=policy)
    histories = [
        TrialHistory(0, S.COMPLETE, {1: 0.5, 2: 0.6}, [2.0, 4.0], 1.0),
        TrialHistory(1, S.PRUNED, {1: 0.1}, [3.0]),
        TrialHistory(2, S.RUNNING, {1: 0.4}, [5.0], preemptions=2, failures=1),
        TrialHistory(3, S.PAUSED, {1: 0.3, 2: 0.35}, [1.0, 1.0]),
    ]
    assert core.restore(histories) == [2]
    assert [core.record(n).state for n in range(4)] == [S.COMPLETE, S.PRUNED, S.PENDING,
                                                        S.PAUSED]
    assert core.record(2).preemptions == 2 and core.record(2).failures == 1
    assert policy.restored == histories
    timing = core.accountant.timing
    assert timing.epoch_s(0) == 4.0 and timing.epoch_s(1) == 3.0
    assert timing.startup_s() == 1.0
    resumed = core.next_start()
    assert (resumed.kind, resumed.number) == (StartKind.RESUME, 2)
    # A re-reported epoch the study holds is not recorded nor timed again.
    core.started(2)
    epoch(core, 2, 1, 0.99, epoch_s=50.0)
    assert timing.trials[2].epoch_times_s == [5.0]


def test_ledger_outcomes_follow_the_ends():
    core, _, clock, _ = make(n=3, policy=Scripted({(1, 1): Decision.STOP}), max_failures=0)
    for _ in range(3):
        start(core)
    run_to_end(core, clock, 0)
    epoch(core, 1, 1)
    core.ended(1)
    core.failed(2, "boom")
    outcomes = {i.trial: i.outcome for i in core.accountant.ledger.intervals}
    assert outcomes == {0: DONE, 1: STOPPED, 2: FAILED}


def test_closing_an_aborted_session_fails_what_still_runs_without_a_line_of_its_own():
    core, study, _, listener = make(n=3)
    start(core)
    start(core)
    core.failed(0, "contract broken", setup=True)
    assert core.close() == []
    assert study.states[1] is S.FAILED and study.attrs[1][keys.ATTR_ERROR] == "run aborted"
    assert ("finished", 1, S.FAILED) not in listener.lines
    assert [f.number for f in core.failures] == [0]


def test_a_later_session_with_more_money_resumes_the_budget_stopped_trials_first():
    # Session 1: 4 epochs of 10 s at 0.001/s; the budget stops both trials at 0.025.
    core, study, clock, _ = make(n=4, budget=Budget(max_cost=0.025))
    start(core)
    start(core)
    for e in (1, 2):
        clock.now += 10
        epoch(core, 0, e, epoch_s=10.0)
        epoch(core, 1, e, epoch_s=10.0)
    assert core.record(0).stop is not None and core.record(1).stop is not None
    assert core.ended(0) is S.BUDGET_STOPPED and core.ended(1) is S.BUDGET_STOPPED
    assert core.next_start().kind is StartKind.FINISHED
    core.close()
    assert study.states == {0: S.BUDGET_STOPPED, 1: S.BUDGET_STOPPED}
    assert study.attrs[0][keys.ATTR_LIFECYCLE] == "budget_stopped"

    # Session 2, more money: the two resume (from epoch 2) before anything new.
    ledger = core.accountant.ledger
    accountant = Accountant(PRICE, Budget(max_cost=1.0), ledger, 4, clock)
    later = SearchCore(study=study, accountant=accountant, policy=Scripted(), max_epochs=4,
                       new_trials=2, clock=clock)
    assert later.restore(study.histories()) == []  # not orphans: stopped on purpose
    assert list(later.budget_stopped) == [0, 1]
    first, second, third = later.next_start(), later.next_start(), later.next_start()
    assert [(s.kind, s.number) for s in (first, second)] == [(StartKind.RESUME, 0),
                                                             (StartKind.RESUME, 1)]
    assert (third.kind, third.number) == (StartKind.NEW, 2)
    assert study.attrs[0][keys.ATTR_LIFECYCLE] == "running"
    assert study.attrs[0][keys.ATTR_STOP_REASON] is None
    later.started(0)
    clock.now += 10
    assert epoch(later, 0, 3, start_epoch=2) is Decision.CONTINUE
    clock.now += 10
    epoch(later, 0, 4)
    assert later.ended(0) is S.COMPLETE


def test_a_budget_stopped_trial_its_own_cap_still_holds_waits():
    core, study, clock, _ = make(n=2, budget=Budget(max_cost_per_trial=0.015))
    start(core)
    clock.now += 10
    epoch(core, 0, 1, epoch_s=10.0)  # 0.010 spent, one more epoch would make 0.020
    assert core.ended(0) is S.BUDGET_STOPPED
    core.close()
    accountant = Accountant(PRICE, Budget(max_cost_per_trial=0.015), core.accountant.ledger,
                            4, clock)
    accountant.restore_timing(0, [10.0], None)
    later = SearchCore(study=study, accountant=accountant, policy=Scripted(), max_epochs=4,
                       new_trials=1, clock=clock)
    later.restore(study.histories())
    begin = later.next_start()
    assert (begin.kind, begin.number) == (StartKind.NEW, 1)  # trial 0 stays stopped
    assert list(later.budget_stopped) == [0]
