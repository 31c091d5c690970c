"""The search core (pure): every trial's life and every decision about it.

:mod:`hpsearch.core.lifecycle` holds the states and the legal transitions,
:mod:`hpsearch.core.search` the decisions (admission, placement, continue/pause/stop,
restart or fail, the budget), :mod:`hpsearch.core.ports` what the core needs from the
study, the policy and the screen. The Ray Tune adapter and the simulator both drive it.
"""
