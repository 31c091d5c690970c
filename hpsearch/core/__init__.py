"""The search core (pure): every trial's life and every decision about it.

:mod:`hpsearch.core.lifecycle` holds the legal transitions (the states themselves are
:mod:`hpsearch.trials`'), :mod:`hpsearch.core.search` wires the core's parts over one shared
session (:mod:`~hpsearch.core.session`): handing out starts (admission, placement,
resumes: :mod:`~hpsearch.core.starts`), epochs (billed and decided by the budget and the
policy: :mod:`~hpsearch.core.reports`), processes gone (ended, preempted, failed:
:mod:`~hpsearch.core.exits`), closing (:mod:`~hpsearch.core.closing`) and what they write
down (:mod:`~hpsearch.core.notes`); :mod:`hpsearch.core.ports` is what the core needs
from the study, the policy and the screen. The Ray Tune adapter and the simulator both
drive it.
"""
