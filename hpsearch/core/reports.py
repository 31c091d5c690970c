"""A running trial's epochs: recorded, billed, then decided by the budget and the policy.

Pure module. :meth:`Reports.reported` takes one epoch's result: the study records it,
the ledger bills it (and the study mirrors the trial's money and what finishing it would
cost), then the budget and the pruning policy decide whether the trial goes on
(:class:`~hpsearch.pruning.decisions.Decision`). A stop or pause takes effect when the
trial's process ends (:mod:`hpsearch.core.exits`).
"""

from __future__ import annotations

import math

from hpsearch import keys
from hpsearch.core.lifecycle import Event, TrialRecord
from hpsearch.core.notes import BUDGET, DIVERGED, TrialNotes
from hpsearch.core.ports import EpochReport, Policy, StudyPort
from hpsearch.core.session import Session
from hpsearch.money.budget import Accountant
from hpsearch.pruning.decisions import Decision
from hpsearch.trials import TrialHistory, TrialState


class Reports:
    """Records, bills and decides each epoch a running trial reports.

    Args:
        session: The session's trials.
        notes: Writes down stops and money.
        study: The study of record.
        accountant: The run's money.
        policy: The pruning policy.
        max_epochs: Epochs of a full trial.
    """

    def __init__(self, session: Session, notes: TrialNotes, study: StudyPort,
                 accountant: Accountant, policy: Policy, max_epochs: int):
        self.session = session
        self.notes = notes
        self.study = study
        self.accountant = accountant
        self.policy = policy
        self.max_epochs = max_epochs

    def reported(self, report: EpochReport) -> Decision:
        """An epoch ended: record it, bill it, then let the budget and the policy decide.

        A resumed process re-sends epochs its checkpoint already holds: they are neither
        recorded nor decided again.
        """
        number, epoch = report.number, report.epoch
        record = self.session.trials.move(number, Event.REPORTED, TrialState.RUNNING)
        self._restore_history(record, report)
        new = epoch not in record.history
        if new:
            self.study.record_epoch(report)
            record.history[epoch] = report.value
        if epoch >= record.epoch:
            record.epoch, record.value = epoch, record.history[epoch]
        record.checkpoint_epoch = (
            epoch if report.checkpointed
            else max(record.checkpoint_epoch, report.checkpoint_epoch))
        self._bill(record, report)
        if record.stop is not None:
            return Decision.PAUSE if record.exit is TrialState.PAUSED else Decision.STOP
        return self._decide(record, report, new)

    def _restore_history(self, record: TrialRecord, report: EpochReport) -> None:
        """Record the epochs a stopped driver never recorded, restored from the
        checkpoint with a resumed process's first result."""
        restored: dict[int, float] = {}
        for past, value in report.history:
            if past not in record.history and past < report.epoch:
                self.study.record_epoch(EpochReport(record.number, past, value, 0.0))
                record.history[past] = restored[past] = value
        if restored:
            # The policy learns them as it learns an earlier session's epochs (a curve
            # with a hole judges the trial's slope wrongly), without deciding on them.
            self.policy.restore([TrialHistory(record.number, TrialState.RUNNING,
                                              restored)])

    def _decide(self, record: TrialRecord, report: EpochReport, new: bool) -> Decision:
        """Whether the trial goes on after this epoch: a NaN objective, the budget, then
        the policy (which sees the last epoch too, but the trial's natural end is no
        prune)."""
        number, epoch = record.number, report.epoch
        last = epoch >= self.max_epochs
        if new and not last and math.isnan(report.value):
            # A diverged trial: NaN weights stay NaN, so its last value would be NaN too
            # and it would end FAILED then (see Exits.ended). End it now, FAILED,
            # instead of paying for the rest of its epochs.
            self.notes.stop(record, DIVERGED, f"the objective is NaN after epoch {epoch}/"
                            f"{self.max_epochs}: the trial diverged (a NaN objective does "
                            "not recover)", None, TrialState.FAILED)
            return Decision.STOP
        reason = None if last else (self.accountant.run_stop_reason()
                                    or self.accountant.trial_stop_reason(number, epoch))
        if reason is not None:
            self.notes.stop(record, BUDGET, reason, None, TrialState.BUDGET_STOPPED)
            return Decision.STOP
        if not new:
            return Decision.CONTINUE
        verdict = self.policy.on_result(number, epoch, report.value)
        if last:
            return Decision.CONTINUE
        if verdict.decision is Decision.STOP:
            self.notes.stop(record, self.policy.name, verdict.reason,
                            verdict.predicted_final, TrialState.PRUNED)
        elif verdict.decision is Decision.PAUSE:
            self.notes.stop(record, self.policy.name, verdict.reason,
                            verdict.predicted_final, TrialState.PAUSED)
        return verdict.decision

    def _bill(self, record: TrialRecord, report: EpochReport) -> None:
        """Bill the epoch at its node's price and mirror the trial's money into the study."""
        if report.node:
            record.node = report.node
            self.accountant.trial_placed(record.number, report.node)
        self.accountant.trial_reported(record.number, report.epoch, report.epoch_s,
                                       report.startup_s, report.checkpointed)
        # The one estimate of what is left (its share of its node, the runtime model's
        # seconds): the budget's admission uses the same numbers.
        remaining = self.accountant.timing.remaining_s(record.number, report.epoch)
        self.study.set_attrs(record.number, {
            **self.notes.money(record.number), keys.ATTR_REMAINING_S: remaining,
            keys.ATTR_COST_TO_FINISH: self.accountant.cost_to_finish(record.number,
                                                                    report.epoch)})
