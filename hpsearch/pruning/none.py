"""No pruning: every trial trains to its last epoch (``pruning.policy: none``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpsearch.pruning.decisions import CONTINUE, Verdict

if TYPE_CHECKING:
    from typing import Sequence

    from hpsearch.trials import TrialHistory, TrialState


class NoPruning:
    """Every trial trains to its last epoch (``pruning.policy: none``)."""

    name = "none"

    def restore(self, histories: "Sequence[TrialHistory]") -> None:
        pass

    def on_start(self, trial: int, params=None) -> None:
        pass

    def on_result(self, trial: int, epoch: int, value: float) -> Verdict:
        return CONTINUE

    def on_preempted(self, trial: int, epoch: int) -> Verdict:
        """A preempted trial always restarts (nothing is ever pruned)."""
        return CONTINUE

    def on_end(self, trial: int, epoch: int, state: "TrialState") -> None:
        pass

    def pick_resume(self, waiting: "Sequence[int]", fresh: bool = True) -> int | None:
        return None
