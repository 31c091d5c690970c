"""A Tune callback that keeps the ledger told the driver is alive."""

from __future__ import annotations

from ray.tune import Callback

from hpsearch.budget import Accountant


class AliveCallback(Callback):
    """Writes a throttled ``alive`` event to the ledger at each step of Tune's loop.

    Tune's controller steps many times a second; the ledger writes at most one event
    every :data:`hpsearch.ledger.ALIVE_EVERY_S` seconds, and none while no trial is
    billed. A driver killed without warning then leaves each running trial's interval
    billed up to a few seconds before its death, not back at its last checkpoint.
    """

    def __init__(self, accountant: Accountant):
        self.accountant = accountant

    def on_step_end(self, iteration, trials, **info) -> None:
        self.accountant.heartbeat()
