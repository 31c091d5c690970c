"""The study's copy of the run's money: the ledger's statement written into the study
(``money``, ``spent``: what ``hpsearch report`` reads) now and then during a session."""

from __future__ import annotations

from typing import Any

from hpsearch import keys

#: Seconds between two copies of the ledger's statement into the study during a run.
MONEY_EVERY_S = 30.0


class StudyMoney:
    """Copies the accountant's statement into the study of ``recorder``.

    Args:
        accountant: The run's :class:`~hpsearch.money.budget.Accountant`.
        recorder: The study of record (its ``study`` gets the attributes).
    """

    def __init__(self, accountant: Any, recorder: Any):
        self.accountant = accountant
        self.recorder = recorder
        self._written_s: float | None = None

    def beat(self) -> None:
        """What runs after each controller step: the ledger's alive event and node watch,
        and now and then the study's copy of the money (``money``, ``spent``)."""
        now = self.accountant.heartbeat()
        if self._written_s is None or now - self._written_s >= MONEY_EVERY_S:
            self.write()

    def write(self):
        """Copy the ledger's statement into the study (what ``hpsearch report`` reads)."""
        money = self.accountant.statement()
        self.recorder.study.set_user_attr(keys.ATTR_MONEY, money.attrs())
        self.recorder.study.set_user_attr(keys.ATTR_SPENT, money.total)
        self._written_s = money.at_s
        return money
