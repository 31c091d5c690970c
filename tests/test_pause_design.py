"""The curves of tests/test_e2e_pause.py, replayed in the simulator (the same search
core and ``cost_aware`` policy a real run uses, on a simulated clock): the story the
end-to-end tests check holds whatever the start-up delays of the trial processes, and
does not hang on one constant of the policy (aggressiveness 0.9 to 1.5 raises or lowers
the kept shares at epochs 2 and 3 by -25% to +7%).

Pure: no Ray, torch, Lightning or Optuna.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpsearch.trials import TrialState
from hpsearch.pruning.cost_aware import CostAwarePolicy
from hpsearch.pruning.cost_aware_pruner import CostAwarePruner
from hpsearch.pruning.decisions import Decision
from hpsearch.simulate import Curve, simulate

from .pause_curves import CURVES, EPOCHS, ORDER, SLEEP_S

#: As in the end-to-end tests: seconds of sleep per epoch unit.
SLEEP_SCALE = 0.5
#: Seconds an epoch of the digits model takes beside its sleep (measured: 0.05-0.1 s).
COMPUTE_S = 0.1
SLOW, WEAK = ORDER.index("slow_starter"), ORDER.index("weak_starter")


def curves(rng: np.random.Generator) -> list[Curve]:
    """The run's trials, each with a start-up delay of 0.5-5 s (a process that spawns
    and imports torch on a loaded machine, or an actor Ray reuses)."""
    out = []
    for kind in ORDER:
        epoch_s = SLEEP_S[kind] * SLEEP_SCALE + COMPUTE_S
        out.append(Curve(CURVES[kind], tuple(epoch_s * e for e in range(1, EPOCHS + 1)),
                         startup_s=float(rng.uniform(0.5, 5.0))))
    return out


@pytest.mark.slow  # a statistical or replay check of several seconds; CI runs it
@pytest.mark.parametrize("aggressiveness", [0.9, 1.0, 1.5])
def test_the_slow_starter_is_paused_at_epoch_3_resumed_and_wins(aggressiveness):
    rng = np.random.default_rng(14)
    for _ in range(25):
        result = simulate(curves(rng), list(range(len(ORDER))), 2, lambda accountant:
                          CostAwarePruner(CostAwarePolicy("max", EPOCHS,
                                                          aggressiveness=aggressiveness),
                                          accountant))
        decided = {(trial, epoch): d for _, trial, epoch, _, d in result.reports
                   if d is not Decision.CONTINUE}
        starts = [trial for _, trial in result.starts]
        slow = [(e, d) for (t, e), d in decided.items() if t == SLOW]
        assert slow == [(3, Decision.PAUSE)], slow
        assert starts.count(SLOW) == 2
        assert result.core.record(SLOW).state is TrialState.COMPLETE
        assert max(result.completed, key=lambda t: CURVES[ORDER[t]][-1]) == SLOW
        # The weak starter is paused at epoch 2, first of its decisions.
        weak = [(e, d) for (t, e), d in decided.items() if t == WEAK]
        assert weak[0] == (2, Decision.PAUSE), weak
        if starts.count(WEAK) == 1:
            assert result.core.record(WEAK).state is TrialState.PRUNED
        # Every trial ends finished (none waits).
        assert all(result.core.record(n).state in (TrialState.COMPLETE, TrialState.PRUNED)
                   for n in range(len(ORDER)))
