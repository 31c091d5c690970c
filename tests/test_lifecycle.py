"""The trial lifecycle's transition table: every event in every state (pure, fast)."""

from __future__ import annotations

import pickle

import pytest

from hpsearch.core.lifecycle import TRANSITIONS, Event, Lifecycle, LifecycleError
from hpsearch.trials import FINISHED, WAITING, TrialState

S, E = TrialState, Event

#: The table, written out by hand: what each state may become on each event.
EXPECTED = {
    (None, E.ADMITTED): {S.PENDING},
    (S.PAUSED, E.RESUMED): {S.PENDING},
    (S.PREEMPTED, E.RESUMED): {S.PENDING},
    (S.BUDGET_STOPPED, E.RESUMED): {S.PENDING},
    (S.PENDING, E.STARTED): {S.RUNNING},
    (S.RUNNING, E.REPORTED): {S.RUNNING},
    (S.RUNNING, E.ENDED): {S.COMPLETE, S.PRUNED, S.PAUSED, S.BUDGET_STOPPED, S.FAILED},
    # Restarted (PREEMPTED), paused or pruned as the policy judges, as the policy or
    # the budget had already decided, or FAILED (out of restarts).
    (S.RUNNING, E.PREEMPTED): {S.PREEMPTED, S.PAUSED, S.PRUNED, S.BUDGET_STOPPED,
                               S.FAILED},
    (S.RUNNING, E.FAILED): {S.PENDING, S.FAILED},
    (S.PENDING, E.FAILED): {S.PENDING, S.FAILED},
    (S.PENDING, E.MOVED): {S.PENDING, S.FAILED},
    (S.RUNNING, E.MOVED): {S.PENDING, S.FAILED},
    (S.PENDING, E.CLOSED): {S.BUDGET_STOPPED, S.FAILED},
    (S.PAUSED, E.CLOSED): {S.PRUNED},
    (S.PREEMPTED, E.CLOSED): {S.BUDGET_STOPPED, S.FAILED},
    (None, E.RESTORED): set(S),
}

ALL_STATES = [None, *S]
ALL_PAIRS = [(state, event) for state in ALL_STATES for event in E]


def at(state: TrialState | None) -> Lifecycle:
    """A lifecycle holding trial 0 in ``state`` (None: no trial 0)."""
    trials = Lifecycle()
    if state is not None:
        trials.move(0, E.RESTORED, state)
    return trials


def test_the_table_is_the_one_written_out_here():
    assert {k: set(v) for k, v in TRANSITIONS.items()} == EXPECTED


@pytest.mark.parametrize("state, event", ALL_PAIRS,
                         ids=[f"{s.value if s else 'none'}-{e.value}" for s, e in ALL_PAIRS])
def test_every_event_in_every_state(state, event):
    allowed = EXPECTED.get((state, event), set())
    for to in S:
        trials = at(state)
        if to in allowed:
            record = trials.move(0, event, to)
            assert record.state is to and trials.state(0) is to
        else:
            with pytest.raises(LifecycleError) as caught:
                trials.move(0, event, to)
            # The refused transition leaves the trial as it was, and says what was asked.
            assert trials.state(0) is state
            message = str(caught.value)
            assert event.value in message and to.value in message
            assert ("does not exist" if state is None else state.value) in message


@pytest.mark.parametrize("state, event", ALL_PAIRS,
                         ids=[f"{s.value if s else 'none'}-{e.value}" for s, e in ALL_PAIRS])
def test_check_agrees_with_the_table(state, event):
    trials = at(state)
    if (state, event) in EXPECTED and state is not None:
        assert trials.check(0, event).state is state
    elif state is None or (state, event) not in EXPECTED:
        with pytest.raises(LifecycleError):
            trials.check(0, event)


def test_finished_and_waiting_states():
    assert FINISHED == {S.COMPLETE, S.PRUNED, S.FAILED, S.BUDGET_STOPPED}
    assert WAITING == {S.PENDING, S.PAUSED, S.PREEMPTED}
    assert all(s.finished != s.waiting or s is S.RUNNING for s in S)
    assert not S.RUNNING.finished and not S.RUNNING.waiting


def test_no_finished_state_can_report_or_start_again_in_a_session():
    for state in FINISHED:
        for event in (E.STARTED, E.REPORTED, E.ENDED, E.PREEMPTED, E.FAILED):
            assert not TRANSITIONS.get((state, event))


def test_queries():
    trials = Lifecycle()
    for number, state in enumerate([S.PENDING, S.RUNNING, S.PAUSED, S.RUNNING]):
        trials.move(number, E.RESTORED, state)
    assert trials.in_state(S.RUNNING) == [1, 3]
    assert trials.count(S.RUNNING, S.PAUSED) == 3
    assert trials.get(9) is None and trials.state(9) is None


def test_a_lifecycle_error_crosses_process_boundaries_intact():
    error = LifecycleError(3, S.COMPLETE, E.REPORTED)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) == "trial 3 is complete: it cannot be reported"
    assert (again.number, again.state, again.event) == (3, S.COMPLETE, E.REPORTED)
