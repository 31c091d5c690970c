"""The scripted curves of the pause/resume end-to-end tests (pure data, no torch).

``tests/pause_trainables.py`` trains the real digits model and logs these values as its
objective; ``tests/test_pause_design.py`` drives the same curves through the simulator
(the same search core and policy) to show that the design does not hang on one constant.
"""

from __future__ import annotations

#: Epochs of every curve (``max_epochs`` of the runs).
EPOCHS = 6

#: The curves, by kind (higher is better).
CURVES: dict[str, tuple[float, ...]] = {
    # Finishes first: the incumbent (0.61).
    "incumbent": (0.27, 0.30, 0.38, 0.50, 0.57, 0.61),
    # Finishes with it, far behind until epoch 3 and gaining 0.5 after it: the
    # intervals predicted from the finished curves are wide.
    "late_riser": (0.02, 0.06, 0.10, 0.30, 0.48, 0.60),
    # Lead at epoch 3, then fall apart (stopped).
    "spike": (0.30, 0.34, 0.57, 0.05, 0.05, 0.05),
    # Stalls at epoch 3 (5th of 6 there: paused), leads from epoch 4 and wins.
    "slow_starter": (0.30, 0.36, 0.33, 0.75, 0.85, 0.90),
    # 7th of 7 at epoch 2 (paused); every later trial passes it there.
    "weak_starter": (0.18, 0.22, 0.30, 0.40, 0.45, 0.50),
    # Clearly worse: promising for two epochs, last from epoch 3 on (stopped there).
    "diverges": (0.40, 0.45, 0.05, 0.05, 0.05, 0.05),
}

#: The trials of a run, in the order they start (enqueued: trial number = index).
ORDER: tuple[str, ...] = ("incumbent", "late_riser", "spike", "spike", "spike",
                          "slow_starter", "weak_starter") + ("diverges",) * 6

#: Seconds of sleep per epoch by kind, before the run's ``sleep_scale``: the slow
#: starter's epochs are shorter, so it reaches epoch 3 before trials started after it.
SLEEP_S = {"incumbent": 1.0, "late_riser": 1.0, "spike": 1.0, "slow_starter": 0.8,
           "weak_starter": 1.0, "diverges": 1.0}
