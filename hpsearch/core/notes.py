"""Writing down what became of a trial: in its lifecycle, the study, the policy and the
listener, with its money beside it.

Pure module. Each part of the search core decides; :class:`TrialNotes` tells everyone
the same thing the same way: a trial that finishes, a stop or pause that a policy or the
budget decided (it takes effect when the trial's process ends), and the money the study
mirrors from the ledger.
"""

from __future__ import annotations

from typing import Any, Callable

from hpsearch import keys
from hpsearch.core.lifecycle import Event, TrialRecord
from hpsearch.core.ports import Listener, Policy, StudyPort
from hpsearch.core.session import Session
from hpsearch.money.budget import Accountant
from hpsearch.pruning.decisions import StopRecord
from hpsearch.trials import TrialState

#: Who stopped a trial when the budget did (the policy name in its stop record).
BUDGET = "budget"
#: Who stopped a trial whose objective turned NaN (it ends FAILED, with the reason).
DIVERGED = "diverged"


class TrialNotes:
    """Tells the lifecycle, the study, the policy and the listener what became of a trial.

    Args:
        session: The session's trials.
        study: The study of record.
        accountant: The run's money.
        policy: The pruning policy.
        listener: Shown what happens.
        clock: Seconds; what the money is mirrored at.
    """

    def __init__(self, session: Session, study: StudyPort, accountant: Accountant,
                 policy: Policy, listener: Listener, clock: Callable[[], float]):
        self.session = session
        self.study = study
        self.accountant = accountant
        self.policy = policy
        self.listener = listener
        self.clock = clock

    def money(self, number: int) -> dict[str, Any]:
        """Trial ``number``'s money now, as the study's attributes (empty if unbilled)."""
        money = self.accountant.ledger.trial_money(number, self.clock())
        return {} if money is None else money.attrs()

    def stop(self, record: TrialRecord, policy: str, reason: str,
             predicted: float | None, exit_state: TrialState) -> None:
        """``policy`` stopped (or paused) ``record`` for ``reason``: it ends in
        ``exit_state`` when its process ends; the study keeps why and what it saved."""
        saved = self.accountant.cost_to_finish(record.number, record.epoch)
        record.stop = StopRecord(policy, record.epoch, reason, predicted, saved)
        record.exit = exit_state
        attrs: dict[str, Any] = {keys.ATTR_STOP_REASON: f"{policy}: {reason}"}
        if predicted is not None:
            attrs[keys.ATTR_PREDICTED_FINAL] = predicted
        if saved is not None:
            attrs[keys.ATTR_SAVED_COST] = saved
        self.study.set_attrs(record.number, attrs)

    def finish(self, record: TrialRecord, event: Event, state: TrialState,
               error: str | None = None, quiet: bool = False) -> None:
        """Move ``record`` to a finished ``state`` and tell the study and the listener
        (its billing already ended); ``quiet``: no line of its own."""
        self.session.trials.move(record.number, event, state)
        record.error = error
        attrs = {**self.money(record.number), keys.ATTR_EPOCHS: record.epoch,
                 keys.ATTR_LIFECYCLE: state.value}
        if error is not None:
            attrs[keys.ATTR_ERROR] = error[:2000]
        value = record.value if state is TrialState.COMPLETE else None
        self.study.finish(record.number, state, value, attrs)
        if state is not TrialState.FAILED:
            self.session.watch.succeeded()  # the trainable works for some configurations
        self.policy.on_end(record.number, record.epoch, state)
        if not quiet:
            self.listener.trial_finished(record)

    def pause(self, record: TrialRecord, event: Event) -> TrialState:
        """Move ``record`` (gone from its worker after ``event``) to PAUSED: it stays
        unfinished in the study (it may resume), marked as paused, the epoch it paused
        after added to its record of pauses."""
        number = record.number
        self.session.trials.move(number, event, TrialState.PAUSED)
        record.paused_at.append(record.epoch)
        self.study.set_attrs(number, {**self.money(number), keys.ATTR_EPOCHS: record.epoch,
                                      keys.ATTR_LIFECYCLE: TrialState.PAUSED.value,
                                      keys.ATTR_PAUSED_AT: list(record.paused_at)})
        self.policy.on_end(number, record.epoch, TrialState.PAUSED)
        self.listener.trial_finished(record)
        return TrialState.PAUSED
