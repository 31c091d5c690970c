"""How trials run in a real search: trained with Lightning, billed on the wall clock."""

from __future__ import annotations

import time
from typing import Any, Callable

from hpsearch.spec import config as config_mod


class LightningBackend:
    """How trials run: the default backend trains the trainable with Lightning.

    A backend supplies the Ray Tune function each trial runs, the clock money is counted
    on, and any Tune callbacks it needs. The benchmark's replay backend swaps in
    recorded learning curves and a simulated clock, so the whole scheduling path
    (sampler, pruning policy, cost model, budget, study) runs unchanged on them.
    """

    def __init__(self, function: Callable[..., Any] | None = None):
        #: The build function given to ``run(trainable=...)`` as an object, or None.
        self.function = function

    def check(self, config) -> None:
        """Validate what this backend needs before anything is written."""
        from hpsearch.spec.trainable import check_function, resolve

        config_mod.check_training_cpus(config)  # Lightning trains on whole cores
        if self.function is not None:
            check_function(self.function)
        else:
            resolve(config.trainable)

    def trainable(self, spec):
        from hpsearch.adapters.trial import runner

        return runner.train

    def clock(self) -> float:
        """Seconds on the clock the ledger bills by (wall-clock time: it outlives runs)."""
        return time.time()

    def callbacks(self) -> list:
        return []
