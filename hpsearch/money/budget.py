"""Budget: admission control and caps on money and time, over the ledger.

Pure module; the clock is injected. :class:`Accountant` is the one object the Ray
adapters ask about money: it bills trials (through the :class:`~hpsearch.money.ledger.Ledger`),
measures their epochs (through :class:`~hpsearch.money.runtime.RunTiming`) and answers:

* may a new trial start? Only if what is spent, plus what the running trials are
  expected to cost to finish, plus the new trial's expected cost fits ``max_cost``;
* must the run stop? Once spend reaches ``max_cost`` or the session ``max_wall_s``:
  every running trial is stopped at its next report (right after its checkpoint), so
  spend passes the cap by at most one reporting interval of the running trials;
* must this trial stop? If its next epoch would take it past ``max_cost_per_trial``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from hpsearch.spec.config import Budget
from hpsearch.money.ledger import ALIVE_EVERY_S, Ledger
from hpsearch.money.pricing import Price
from hpsearch.money.runtime import RunTiming


class Admission(enum.Enum):
    """Whether a new trial may start now."""

    ADMIT = "admit"
    WAIT = "wait"  # not now: running trials may finish under their estimate
    CLOSED = "closed"  # never again in this session


@dataclass(frozen=True)
class AdmissionVerdict:
    admission: Admission
    reason: str = ""


def fmt_money(amount: float, currency: str) -> str:
    """``12.35 USD``, ``0.1234 USD``, ``0.000146 USD``: small sums keep their digits."""
    if amount >= 10:
        return f"{amount:.2f} {currency}"
    if amount >= 0.01:
        return f"{amount:.4f} {currency}"
    return f"{amount:.6f} {currency}"


class Accountant:
    """Money and time of a run, as the adapters see it.

    Args:
        price: The run's price of a trial-hour.
        limits: The ``budget`` section of the config.
        ledger: The run's ledger (possibly holding earlier sessions).
        max_epochs: Epochs of a full trial.
        clock: Seconds; wall-clock time in the driver (the ledger outlives processes).
    """

    def __init__(self, price: Price, limits: Budget, ledger: Ledger, max_epochs: int,
                 clock: Callable[[], float]):
        self.price = price
        self.limits = limits
        self.ledger = ledger
        self.clock = clock
        self.timing = RunTiming(max_epochs)
        self.started_s = clock()
        self._epochs: dict[int, int] = {}
        self._pending: set[int] = set()
        self._stop_reason: str | None = None

    # -- trial events -----------------------------------------------------------------

    def trial_admitted(self, trial: int) -> None:
        """A trial was created and waits for a worker (counted as committed)."""
        self._pending.add(trial)

    def trial_started(self, trial: int) -> None:
        self._pending.discard(trial)
        self.ledger.open(trial, self.clock(), self.price)

    def trial_reported(self, trial: int, epoch: int, epoch_time_s: float,
                       startup_s: float | None = None, checkpointed: bool = True) -> None:
        """A trial finished ``epoch`` in ``epoch_time_s`` seconds (and saved a checkpoint
        of it, if ``checkpointed``: work up to now can no longer be lost)."""
        if not self.ledger.is_open(trial):
            self.ledger.open(trial, self.clock() - max(0.0, epoch_time_s), self.price)
        if checkpointed:
            self.ledger.checkpoint(trial, self.clock())
        if epoch > self._epochs.get(trial, 0):
            self.timing.record_epoch(trial, epoch_time_s, startup_s if epoch == 1 else None)
            self._epochs[trial] = epoch

    def restore_timing(self, trial: int, epoch_times_s, startup_s: float | None) -> None:
        """Take back the measured epoch times of a trial of an earlier session (its epochs
        1..len(epoch_times_s)), so a continued run estimates from them."""
        self.timing.restore(trial, epoch_times_s, startup_s)
        if epoch_times_s:
            self._epochs[trial] = max(self._epochs.get(trial, 0), len(epoch_times_s))

    def trial_placed(self, trial: int, price: Price) -> None:
        """Bill ``trial``'s running interval at the price of the node it landed on."""
        self.ledger.reprice(trial, price)

    def trial_ended(self, trial: int, outcome: str, saved: bool = False) -> None:
        """A trial left its worker; ``saved``: it checkpointed everything it trained."""
        self._pending.discard(trial)
        now = self.clock()
        if saved:
            self.ledger.checkpoint(trial, now)
        self.ledger.close(trial, now, outcome)

    def heartbeat(self, force: bool = False) -> float:
        """Tell the ledger the driver is alive (throttled unless ``force``); return now.

        While trials are billed the ledger then knows, after a driver killed without
        warning, until when they ran (see :meth:`hpsearch.money.ledger.Ledger.alive`).
        """
        now = self.clock()
        self.ledger.alive(now, every_s=0.0 if force else ALIVE_EVERY_S)
        return now

    # -- figures ----------------------------------------------------------------------

    @property
    def currency(self) -> str:
        return self.price.currency

    def spent(self) -> float:
        """Everything billed so far, earlier sessions included."""
        return self.ledger.spent(self.clock())

    def trial_cost(self, trial: int) -> float:
        return self.ledger.spent(self.clock(), trial)

    def epoch_cost(self, trial: int | None = None) -> float | None:
        """Expected money of one more epoch of ``trial`` (or a typical trial)."""
        epoch = self.timing.epoch_s(trial)
        return None if epoch is None else epoch * self.price.per_second

    def cost_to_finish(self, trial: int, epochs_done: int) -> float | None:
        """Expected money to train ``trial`` from ``epochs_done`` to the last epoch."""
        remaining = self.timing.remaining_s(trial, epochs_done)
        return None if remaining is None else remaining * self.price.per_second

    def new_trial_cost(self) -> float | None:
        seconds = self.timing.new_trial_s()
        return None if seconds is None else seconds * self.price.per_second

    def committed(self) -> float:
        """Expected money the running and waiting trials still need to finish."""
        total = 0.0
        for trial in self.ledger.open_trials():
            to_finish = self.cost_to_finish(trial, self._epochs.get(trial, 0))
            if to_finish is not None:
                total += to_finish
        new = self.new_trial_cost()
        if new is not None:
            total += new * len(self._pending)
        return total

    # -- decisions ----------------------------------------------------------------------

    def admission(self) -> AdmissionVerdict:
        """May a new trial start now?"""
        reason = self.run_stop_reason()
        if reason is not None:
            return AdmissionVerdict(Admission.CLOSED, reason)
        cap = self.limits.max_cost
        if cap is None:
            return AdmissionVerdict(Admission.ADMIT)
        spent, committed = self.spent(), self.committed()
        expected = self.new_trial_cost()
        if expected is None:
            # Nothing measured yet: admit while there is money left; the cap check at
            # each report bounds the overshoot.
            return AdmissionVerdict(Admission.ADMIT)
        if spent + committed + expected <= cap:
            return AdmissionVerdict(Admission.ADMIT)
        text = (f"a new trial is expected to cost {fmt_money(expected, self.currency)}; "
                f"spent {fmt_money(spent, self.currency)} + running trials' "
                f"{fmt_money(committed, self.currency)} leave less of budget.max_cost "
                f"{fmt_money(cap, self.currency)}")
        if not self.ledger.open_trials() and not self._pending:
            return AdmissionVerdict(Admission.CLOSED, text)
        return AdmissionVerdict(Admission.WAIT, text)

    def run_stop_reason(self) -> str | None:
        """Why every trial must stop now (the run's caps), or None."""
        if self._stop_reason is not None:
            return self._stop_reason
        cap = self.limits.max_cost
        if cap is not None:
            spent = self.spent()
            if spent >= cap:
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
