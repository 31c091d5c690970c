"""Budget: admission control and caps on money and time, over the ledger.

Pure module; the clock is injected. :class:`Accountant` is the one object the search core
asks about money: it bills the nodes a run rents and each trial's share of them
(:mod:`hpsearch.money.billing`, into the :class:`~hpsearch.money.ledger.Ledger`),
forecasts what trials will cost from their measured epochs
(:mod:`hpsearch.money.forecast`) and answers, here:

* may a new trial start? Only if what the nodes will bill until the running (and
  waiting) trials and the new one are expected to finish, minimums included, fits
  ``max_cost`` (:meth:`Accountant.projected`). A node held for the session bills until
  its last trial ends: a new trial that fits in capacity already paid for adds nothing,
  one that outlasts the others adds the node's time it extends; a node rented per trial
  adds its own rental, at least its minimum;
* must the run stop? Once what is billed (plus the session's expected wrap-up) reaches
  ``max_cost``, or the session ``max_wall_s``: every running trial is stopped at its next
  report (right after its checkpoint), so spend passes the cap by at most one reporting
  interval of the nodes;
* must this trial stop? If its next epoch would take its own share past
  ``max_cost_per_trial``.

Without rented nodes (an accountant the caller never tells of one) each trial is billed
on its own at the run's price, as before node billing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Sequence

from hpsearch.spec.sections import Budget
from hpsearch.money.billing import Billing
from hpsearch.money.forecast import Forecast
from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import Outcome
from hpsearch.money.nodes import Demand, Fleet, NodeSpec
from hpsearch.money.pricing import Price
from hpsearch.money.fmt import fmt_money
from hpsearch.money.statement import Statement, statement


class Admission(enum.Enum):
    """Whether a new trial may start now."""

    ADMIT = "admit"
    WAIT = "wait"  # not now: running trials may finish under their estimate
    CLOSED = "closed"  # never again in this session


@dataclass(frozen=True)
class AdmissionVerdict:
    admission: Admission
    reason: str = ""


class Accountant:
    """Money and time of a run, as the core sees it: the one object it asks about money.

    It bills (:class:`~hpsearch.money.billing.Billing`), forecasts
    (:class:`~hpsearch.money.forecast.Forecast`) and, from both, decides: may a new trial
    start, must the run or a trial stop (see the module docstring).

    Args:
        price: The run's price: a trial-hour (its share of the run's instance) for the
            estimates of a trial's money, and the price of a node rented per trial.
        limits: The ``budget`` section of the config.
        ledger: The run's ledger (possibly holding earlier sessions).
        max_epochs: Epochs of a full trial.
        clock: Seconds; wall-clock time in the driver (the ledger outlives processes).
        demand: What one trial reserves (``resources.cpu``/``resources.gpu``): its share
            of a node follows from it (:meth:`~hpsearch.money.nodes.Demand.share`).
        fleet: How long nodes stay rented (:class:`~hpsearch.money.nodes.Fleet`).
        tail_s: Seconds a held fleet stays rented after its last trial ends (the
            session's wrap-up), counted by admission and by the hard stop.
    """

    def __init__(self, price: Price, limits: Budget, ledger: Ledger, max_epochs: int,
                 clock: Callable[[], float], *, demand: Demand | None = None,
                 fleet: Fleet = Fleet.HELD, tail_s: float = 0.0):
        self.price = price
        self.limits = limits
        self.ledger = ledger
        self.clock = clock
        self.fleet = fleet
        self.billing = Billing(price, ledger, clock, demand or Demand())
        self.forecast = Forecast(self.billing, max_epochs, fleet, tail_s)
        #: The runtime model the forecasts use (the core reads a trial's seconds left).
        self.timing = self.forecast.timing
        self.started_s = clock()
        self._stop_reason: str | None = None

    # -- events (billed, and measured) ------------------------------------------------

    def watch_nodes(self, source: Callable[[], Sequence[NodeSpec]],
                    since_s: float | None = None) -> None:
        """Bill the nodes ``source`` lists (:meth:`Billing.watch_nodes`)."""
        self.billing.watch_nodes(source, since_s)

    def node_rented(self, node: NodeSpec, at_s: float | None = None) -> None:
        """``node`` was rented (at ``at_s``, default now)."""
        self.billing.node_rented(node, at_s)

    def node_released(self, node_id: str, at_s: float | None = None,
                      lost: bool = False) -> None:
        """``node_id`` was released (``lost``: it vanished, e.g. a spot node taken back)."""
        self.billing.node_released(node_id, at_s, lost)

    def trial_admitted(self, trial: int) -> None:
        """A trial was created and waits for a worker (counted as committed)."""
        self.billing.trial_admitted(trial)

    def trial_started(self, trial: int, node: str | None = None) -> None:
        """A process took ``trial`` on ``node`` (:meth:`Billing.trial_started`)."""
        self.billing.trial_started(trial, node)

    def trial_reported(self, trial: int, epoch: int, epoch_time_s: float,
                       startup_s: float | None = None, checkpointed: bool = True) -> None:
        """A trial finished ``epoch`` in ``epoch_time_s`` seconds (and saved a checkpoint
        of it, if ``checkpointed``: work up to now can no longer be lost); ``startup_s``:
        the seconds its process spent before its first epoch."""
        self.billing.epoch_billed(trial, epoch_time_s, startup_s, checkpointed)
        self.forecast.epoch_measured(trial, epoch, epoch_time_s, startup_s)

    def restore_timing(self, trial: int, epoch_times_s, startup_s: float | None) -> None:
        """Take back the measured epoch times of a trial of an earlier session."""
        self.forecast.restore(trial, epoch_times_s, startup_s)

    def trial_placed(self, trial: int, node: str) -> None:
        """``trial`` runs on ``node`` (:meth:`Billing.trial_placed`)."""
        self.billing.trial_placed(trial, node)

    def trial_ended(self, trial: int, outcome: Outcome, saved: bool = False) -> None:
        """A trial left its worker; ``saved``: it checkpointed everything it trained."""
        self.billing.trial_ended(trial, outcome, saved)

    def heartbeat(self, force: bool = False) -> float:
        """Tell the ledger the driver is alive (:meth:`Billing.heartbeat`); return now."""
        return self.billing.heartbeat(force)

    # -- figures ----------------------------------------------------------------------

    @property
    def currency(self) -> str:
        return self.price.currency

    def spent(self) -> float:
        """Everything billed so far, earlier sessions included (open rentals: at least
        their minimum)."""
        return self.ledger.spent(self.clock())

    def statement(self) -> Statement:
        """Work kept, wasted and idle money now (:mod:`hpsearch.money.statement`)."""
        return statement(self.ledger, self.clock())

    def trial_cost(self, trial: int) -> float:
        return self.ledger.spent(self.clock(), trial)

    def epoch_cost(self, trial: int | None = None) -> float | None:
        """Expected money of one more epoch of ``trial`` (or a typical trial)."""
        return self.forecast.epoch_cost(trial)

    def cost_to_finish(self, trial: int, epochs_done: int) -> float | None:
        """Expected money of ``trial``'s share from ``epochs_done`` to the last epoch."""
        return self.forecast.cost_to_finish(trial, epochs_done)

    def new_trial_cost(self) -> float | None:
        """Expected money of a new trial's share (at the run's price)."""
        return self.forecast.new_trial_cost()

    def committed(self) -> float:
        """Expected money of the shares the running and waiting trials still need."""
        return self.forecast.committed()

    def projected(self, new_trials: int = 0) -> float:
        """Expected money billed in all once the running and waiting trials, and
        ``new_trials`` more, have finished (:meth:`Forecast.projected`)."""
        return self.forecast.projected(new_trials)

    # -- decisions ----------------------------------------------------------------------

    def admission(self) -> AdmissionVerdict:
        """May a new trial start now?"""
        reason = self.run_stop_reason()
        if reason is not None:
            return AdmissionVerdict(Admission.CLOSED, reason)
        cap = self.limits.max_cost
        if cap is None:
            return AdmissionVerdict(Admission.ADMIT)
        if self.fleet is Fleet.HELD and not self.ledger.rented():
            return self._share_admission(cap)
        projected = self.projected(1)
        if projected <= cap:
            return AdmissionVerdict(Admission.ADMIT)
        extra = projected - self.projected(0)
        cur = self.currency
        text = (f"a new trial is expected to add {fmt_money(extra, cur)} to what the nodes "
                f"bill (minimums included): {fmt_money(projected, cur)} in all would pass "
                f"budget.max_cost {fmt_money(cap, cur)}")
        return self._refused(text)

    def _share_admission(self, cap: float) -> AdmissionVerdict:
        """Admission of an accountant without nodes: trials billed on their own."""
        spent, committed = self.spent(), self.committed()
        expected = self.forecast.own_cost()
        if expected is None:
            # Nothing measured yet: admit while there is money left; the cap check at
            # each report bounds the overshoot.
            return AdmissionVerdict(Admission.ADMIT)
        if spent + committed + expected <= cap:
            return AdmissionVerdict(Admission.ADMIT)
        return self._refused(
            f"a new trial is expected to cost {fmt_money(expected, self.currency)}; "
            f"spent {fmt_money(spent, self.currency)} + running trials' "
            f"{fmt_money(committed, self.currency)} leave less of budget.max_cost "
            f"{fmt_money(cap, self.currency)}")

    def _refused(self, text: str) -> AdmissionVerdict:
        if not self.ledger.open_trials() and not self.billing.pending:
            return AdmissionVerdict(Admission.CLOSED, text)
        return AdmissionVerdict(Admission.WAIT, text)

    def run_stop_reason(self) -> str | None:
        """Why every trial must stop now (the run's caps), or None."""
        if self._stop_reason is not None:
            return self._stop_reason
        cap = self.limits.max_cost
        if cap is not None:
            spent = self.spent()
            if spent + self.forecast.tail_cost() >= cap:
                self._stop_reason = (f"budget.max_cost reached: spent "
                                     f"{fmt_money(spent, self.currency)} of "
                                     f"{fmt_money(cap, self.currency)}")
        wall = self.limits.max_wall_s
        if self._stop_reason is None and wall is not None:
            elapsed = self.clock() - self.started_s
            if elapsed >= wall:
                self._stop_reason = f"budget.max_wall_s reached: {elapsed:.0f} s of {wall:g} s"
        return self._stop_reason

    def trial_stop_reason(self, trial: int, epochs_done: int) -> str | None:
        """Why this trial must stop before its next epoch (its own cap), or None."""
        cap = self.limits.max_cost_per_trial
        if cap is None:
            return None
        cost = self.trial_cost(trial)
        next_epoch = self.epoch_cost(trial) or 0.0
        if cost + next_epoch > cap:
            return (f"budget.max_cost_per_trial: spent {fmt_money(cost, self.currency)}, "
                    f"one more epoch ({fmt_money(next_epoch, self.currency)}) would pass "
                    f"{fmt_money(cap, self.currency)}")
        return None
