"""The policies compared, as simulated schedulers (:class:`hpsearch.simulate.SimScheduler`).

Peers are the real implementations, driven through their own interfaces, not
re-implementations: Ray Tune's ``ASHAScheduler`` (``on_trial_add`` /
``on_trial_result`` / ``on_trial_complete``), Optuna's ``MedianPruner`` and
``HyperbandPruner`` (an in-memory study, ``trial.report`` and ``trial.should_prune``).
i-Epoch (train every configuration k epochs, then the best to the end) has no library
implementation and is written here. hpsearch's ``cost_aware`` runs the same
:class:`~hpsearch.policy.CostAwarePruner` and :class:`~hpsearch.budget.Accountant` as a
real run, on the simulated clock.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

from hpsearch.decisions import Decision

METRIC = "val_accuracy"


class NoPruning:
    """Every trial trains to its last epoch."""

    name = "none"

    def on_trial_start(self, trial, now_s):
        pass

    def on_result(self, trial, epoch, value, epoch_s, now_s):
        return Decision.CONTINUE

    def on_trial_end(self, trial, epoch, completed, now_s):
        pass

    def next_resume(self, now_s):
        return None


class IEpoch(NoPruning):
    """i-Epoch: every configuration trains ``k`` epochs and pauses; once all have, the
    ``top`` best by their epoch-``k`` value resume (from their checkpoints), best first."""

    def __init__(self, k: int, n_trials: int, top: int):
        self.name = f"i-epoch-{k}"
        self.k, self.n_trials, self.top = k, n_trials, top
        self.at_k: dict[int, float] = {}
        self.ended: set[int] = set()
        self.resume_order: list[int] | None = None

    def on_result(self, trial, epoch, value, epoch_s, now_s):
        if epoch == self.k and trial not in self.at_k:
            self.at_k[trial] = value
            return Decision.PAUSE
        return Decision.CONTINUE

    def on_trial_end(self, trial, epoch, completed, now_s):
        if epoch < self.k:  # a curve shorter than k: nothing to rank
            self.ended.add(trial)

    def next_resume(self, now_s):
        if self.resume_order is None:
            if len(self.at_k) + len(self.ended) < self.n_trials:
                return None
            ranked = sorted(self.at_k, key=lambda t: -self.at_k[t])
            self.resume_order = ranked[: self.top][::-1]
        return self.resume_order.pop() if self.resume_order else None


class RayASHA(NoPruning):
    """Ray Tune's ``ASHAScheduler``, fed the simulated results."""

    def __init__(self, max_epochs: int, grace_period: int = 1, reduction_factor: float = 3,
                 name: str = "ray-asha"):
        from ray.tune.schedulers import ASHAScheduler, TrialScheduler

        self.name = name
        self.stop = TrialScheduler.STOP
        self.asha = ASHAScheduler(time_attr="epoch", metric=METRIC, mode="max",
                                  max_t=max_epochs, grace_period=grace_period,
                                  reduction_factor=reduction_factor)
        self.trials: dict[int, SimpleNamespace] = {}

    def _trial(self, trial: int) -> SimpleNamespace:
        return self.trials.setdefault(trial, SimpleNamespace(trial_id=f"t{trial}"))

    def on_trial_start(self, trial, now_s):
        if trial not in self.trials:
            self.asha.on_trial_add(None, self._trial(trial))

    def on_result(self, trial, epoch, value, epoch_s, now_s):
        action = self.asha.on_trial_result(None, self._trial(trial),
                                           {"epoch": epoch, METRIC: value})
        return Decision.STOP if action == self.stop else Decision.CONTINUE

    def on_trial_end(self, trial, epoch, completed, now_s):
        self.asha.on_trial_complete(None, self._trial(trial), {"epoch": epoch})


class OptunaPruning(NoPruning):
    """An Optuna pruner on an in-memory study: one Optuna trial per configuration."""

    def __init__(self, name: str, make_pruner: Callable[[], object], seed: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = name
        self.optuna = optuna
        # A fixed study name: HyperbandPruner assigns brackets by hashing it.
        self.study = optuna.create_study(study_name=f"{name}-{seed}", direction="maximize",
                                         pruner=make_pruner(),
                                         sampler=optuna.samplers.RandomSampler(seed=seed))
        self.trials: dict[int, object] = {}
        self.last: dict[int, float] = {}

    def on_trial_start(self, trial, now_s):
        if trial not in self.trials:
            self.trials[trial] = self.study.ask()

    def on_result(self, trial, epoch, value, epoch_s, now_s):
        t = self.trials[trial]
        t.report(value, epoch)
        self.last[trial] = value
        return Decision.STOP if t.should_prune() else Decision.CONTINUE

    def on_trial_end(self, trial, epoch, completed, now_s):
        t = self.trials[trial]
        state = self.optuna.trial.TrialState
        if completed:
            self.study.tell(t, self.last[trial])
        else:
            self.study.tell(t, state=state.PRUNED)


class HpsearchCostAware(NoPruning):
    """hpsearch's cost-aware policy with its accountant, on the simulated clock."""

    def __init__(self, max_epochs: int, aggressiveness: float = 1.0,
                 price_per_hour: float = 1.0, name: str = "cost_aware", **policy_kwargs):
        from hpsearch.budget import Accountant
        from hpsearch.config import Budget
        from hpsearch.ledger import Ledger
        from hpsearch.policy import CostAwarePolicy, CostAwarePruner
        from hpsearch.pricing import Price

        self.name = name
        self.now = 0.0
        price = Price(price_per_hour, "USD", "sim", False, price_per_hour, 1.0)
        self.accountant = Accountant(price, Budget(), Ledger(), max_epochs, lambda: self.now)
        self.pruner = CostAwarePruner(
            CostAwarePolicy("max", max_epochs, aggressiveness=aggressiveness, **policy_kwargs),
            self.accountant)
        self.stopped: set[int] = set()

    def on_trial_start(self, trial, now_s):
        self.now = now_s
        self.accountant.trial_started(trial)

    def on_result(self, trial, epoch, value, epoch_s, now_s):
        self.now = now_s
        self.accountant.trial_reported(trial, epoch, epoch_s, 0.0 if epoch == 1 else None)
        return self.pruner.on_result(trial, epoch, value).decision

    def on_trial_preempted(self, trial, now_s):
        from hpsearch.ledger import PREEMPTED

        self.now = now_s
        self.accountant.trial_ended(trial, PREEMPTED)

    def on_trial_end(self, trial, epoch, completed, now_s):
        from hpsearch.ledger import DONE, STOPPED

        self.now = now_s
        self.accountant.trial_ended(trial, DONE if completed else STOPPED)
        self.pruner.on_end(trial, epoch)


def make(policy: str, *, max_epochs: int, n_trials: int, seed: int, **options) -> NoPruning:
    """A fresh scheduler for ``policy`` (its state is per run)."""
    import optuna

    if policy == "none":
        return NoPruning()
    if policy.startswith("i-epoch-"):
        k = int(policy.rsplit("-", 1)[1])
        return IEpoch(k, n_trials, top=options.get("i_epoch_top", max(1, n_trials // 20)))
    if policy == "ray-asha":
        return RayASHA(max_epochs)
    if policy.startswith("ray-asha-g"):  # a longer grace period: the cautious variant
        return RayASHA(max_epochs, grace_period=int(policy.rsplit("g", 1)[1]), name=policy)
    if policy == "optuna-median":
        return OptunaPruning(policy, optuna.pruners.MedianPruner, seed)
    if policy.startswith("optuna-median-w"):  # warm-up epochs: the cautious variant
        warmup = int(policy.rsplit("w", 1)[1])
        return OptunaPruning(policy, lambda: optuna.pruners.MedianPruner(
            n_warmup_steps=warmup), seed)
    if policy == "optuna-hyperband":
        return OptunaPruning(policy, lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=max_epochs, reduction_factor=3), seed)
    if policy == "cost_aware":
        return HpsearchCostAware(max_epochs, **options.get("cost_aware", {}))
    raise ValueError(f"unknown policy {policy!r}")


PEERS = ("none", "i-epoch-1", "i-epoch-3", "ray-asha", "ray-asha-g5", "optuna-median",
         "optuna-median-w5", "optuna-hyperband", "cost_aware")
