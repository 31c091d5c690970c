"""The end of a search session: what still waits is settled, or kept for the next one.

Pure module. A session that ran out of work (or money) settles what waits: paused trials
nobody resumed are PRUNED with their reason, trials queued to start again when the budget
closed are BUDGET_STOPPED (like those the budget stopped while they ran, they stay
unfinished in the study: a later session with more money resumes them first, from their
checkpoints). An interrupted session (Ctrl-C, a signal, a full disk) settles nothing:
every unfinished trial resumes with the next session, paused ones stay paused.
"""

from __future__ import annotations

from hpsearch import keys
from hpsearch.core.lifecycle import Event
from hpsearch.core.notes import BUDGET, TrialNotes
from hpsearch.core.ports import StudyPort
from hpsearch.core.session import Session
from hpsearch.money.budget import Accountant
from hpsearch.money.ledger_entries import FAILED
from hpsearch.pruning.decisions import StopRecord
from hpsearch.trials import TrialState


def close_session(session: Session, notes: TrialNotes, accountant: Accountant,
                  study: StudyPort, interrupted: bool = False) -> list[int]:
    """End ``session`` (see the module docstring); return the trials that stay
    unfinished for the next one."""
    if interrupted:
        return sorted(session.live | set(session.queue))
    if session.abort is not None:
        # Stopped at once: what was still running ends FAILED, without a line of its
        # own (the run's error says why) and without counting as evidence.
        for number in sorted(session.live):
            session.live.discard(number)
            accountant.trial_ended(number, FAILED)
            notes.finish(session.trials.get(number), Event.FAILED, TrialState.FAILED,
                         error="run aborted", quiet=True)
    reason = session.closed_reason or "the session ended"
    for number in session.trials.in_state(TrialState.PAUSED):
        notes.finish(session.trials.get(number), Event.CLOSED, TrialState.PRUNED)
    while session.queue:
        record = session.trials.get(session.queue.popleft())
        if record.state.waiting and record.number not in session.live:
            if record.stop is None:
                record.stop = StopRecord(BUDGET, record.epoch, reason)
                study.set_attrs(record.number, {
                    keys.ATTR_STOP_REASON: f"{BUDGET}: {reason}"})
            notes.finish(record, Event.CLOSED, TrialState.BUDGET_STOPPED)
    return sorted(session.live)
