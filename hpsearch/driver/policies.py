"""The pruning policy a run's config names, built from its adapter or pure module."""

from __future__ import annotations

from typing import Any

from hpsearch.spec import config as config_mod


def pruning_policy(config: config_mod.Config, recorder: Any, accountant: Any):
    """The :class:`~hpsearch.core.ports.Policy` for ``config.pruning.policy``.

    Args:
        config: The run's config.
        recorder: The study of record (Optuna's pruners read trials from it).
        accountant: The run's money (the cost-aware policy weighs epoch costs).
    """
    pruning, mode = config.pruning, config.objective.mode
    if pruning.policy == "asha":
        from hpsearch.adapters.ray.asha import AshaPolicy

        return AshaPolicy(mode, config.max_epochs, grace_period=pruning.min_epochs,
                          reduction_factor=pruning.reduction_factor,
                          metric=config.objective.metric)
    if pruning.policy == "median":
        import optuna

        from hpsearch.adapters.optuna.pruners import OptunaPolicy

        pruner = optuna.pruners.MedianPruner(n_startup_trials=pruning.startup_trials,
                                             n_warmup_steps=pruning.min_epochs)
        return OptunaPolicy("median", pruner,
                            source=lambda number: (recorder.study, recorder.frozen(number)),
                            max_epochs=config.max_epochs, metric=config.objective.metric)
    if pruning.policy == "cost_aware":
        from hpsearch.pruning.cost_aware import CostAwarePolicy
        from hpsearch.pruning.cost_aware_pruner import CostAwarePruner

        return CostAwarePruner(CostAwarePolicy(
            mode=mode, max_epochs=config.max_epochs, min_epochs=pruning.min_epochs,
            aggressiveness=pruning.aggressiveness), accountant, recorder.resume_chooser())
    from hpsearch.pruning.none import NoPruning

    return NoPruning()
