"""The policies compared, as the search core's policies (:class:`hpsearch.core.ports.Policy`).

Every policy is driven by the same :class:`~hpsearch.core.search.SearchCore` a real run
uses (through :func:`hpsearch.simulate.simulate`), so the benchmark prices the code users
run. Peers are the real implementations, driven through their own interfaces by the
wrappers a real run uses (:mod:`hpsearch.adapters.ray.asha`,
:mod:`hpsearch.adapters.ray.hyperband`, :mod:`hpsearch.adapters.optuna.pruners`): Ray
Tune's ``ASHAScheduler`` and ``HyperBandScheduler`` (synchronous, it pauses and resumes:
``ray-hyperband``), Optuna's ``MedianPruner`` and ``HyperbandPruner`` (asynchronous,
stop-only: ``optuna-hyperband``). i-Epoch (train every configuration k epochs,
then the best to the end) has no library implementation and is written here. hpsearch's
``cost_aware`` is :class:`hpsearch.pruning.cost_aware_pruner.CostAwarePruner` with the core's
accountant, on the simulated clock.

Ray and Optuna are imported only when a policy that needs them is made.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from hpsearch.trials import TrialState
from hpsearch.pruning.decisions import CONTINUE, Decision, Verdict
from hpsearch.pruning.none import NoPruning
from hpsearch.spec.objective import mode_sign

__all__ = ["IEpoch", "NoPruning", "make", "PEERS"]

#: The objective of the benchmark's curves unless told (stop records name it).
METRIC = "val_accuracy"


class IEpoch(NoPruning):
    """i-Epoch: every configuration trains ``k`` epochs and pauses; once all have, the
    ``top`` best by their epoch-``k`` value resume (from their checkpoints), best first.

    A preempted trial restarts (:meth:`NoPruning.on_preempted`): before epoch ``k`` it
    has not been judged yet, after its resume it is one of the best; one preempted as it
    paused at ``k`` stays paused (the core keeps a decision already taken)."""

    def __init__(self, k: int, n_trials: int, top: int, mode: str = "max"):
        self.name = f"i-epoch-{k}"
        self.k, self.n_trials, self.top = k, n_trials, top
        self.sign = mode_sign(mode)
        self.at_k: dict[int, float] = {}
        self.ended: set[int] = set()
        self.resume_order: list[int] | None = None

    def on_result(self, trial: int, epoch: int, value: float) -> Verdict:
        if epoch == self.k and trial not in self.at_k:
            self.at_k[trial] = value
            return Verdict(Decision.PAUSE, f"i-epoch: paused after epoch {self.k}")
        return CONTINUE

    def on_end(self, trial: int, epoch: int, state: TrialState) -> None:
        if epoch < self.k and not state.waiting:  # a curve shorter than k: nothing to rank
            self.ended.add(trial)

    def pick_resume(self, waiting: Sequence[int], fresh: bool = True) -> int | None:
        if self.resume_order is None:
            if len(self.at_k) + len(self.ended) < self.n_trials:
                return None
            ranked = sorted(self.at_k, key=lambda t: -self.sign * self.at_k[t])
            self.resume_order = ranked[: self.top][::-1]
        while self.resume_order:
            trial = self.resume_order.pop()
            if trial in waiting:
                return trial
        return None


def make(policy: str, *, max_epochs: int, n_trials: int, seed: int, mode: str = "max",
         metric: str = METRIC, **options: Any) -> Any:
    """A fresh policy for ``policy`` (its state is per run), or, for policies that need
    the run's money, a function of the run's accountant that makes one (what
    :func:`hpsearch.simulate.simulate` accepts)."""
    if policy == "none":
        return NoPruning()
    if policy.startswith("i-epoch-"):
        k = int(policy.rsplit("-", 1)[1])
        return IEpoch(k, n_trials, top=options.get("i_epoch_top", max(1, n_trials // 20)),
                      mode=mode)
    if policy == "ray-asha" or policy.startswith("ray-asha-g"):
        from hpsearch.adapters.ray.asha import AshaPolicy

        grace = int(policy.rsplit("g", 1)[1]) if policy.startswith("ray-asha-g") else 1
        return AshaPolicy(mode, max_epochs, grace_period=grace, reduction_factor=3,
                          name=policy, metric=metric)
    if policy == "ray-hyperband":
        from hpsearch.adapters.ray.hyperband import HyperBandPolicy

        return HyperBandPolicy(mode, max_epochs, n_trials, reduction_factor=3, name=policy,
                               metric=metric)
    if policy.startswith("optuna-"):
        return _optuna(policy, max_epochs, seed, mode, metric)
    chooser = _chooser(options.get("study"))
    if policy == "cost_aware":
        return _cost_aware(max_epochs, mode, chooser=chooser, **options.get("cost_aware", {}))
    if policy == "cost_aware-own-resumes":  # the policy's own resume order, no model's
        return _cost_aware(max_epochs, mode, name=policy, **options.get("cost_aware", {}))
    if policy.startswith("cost_aware-model-a"):  # the cut on the curve model's forecast
        from benchmarks.model_cut import model_cut_policy

        return model_cut_policy(policy, max_epochs, mode, options.get("study"))
    if policy.startswith("cost_aware-a"):  # the knob at another value: cost_aware-a0.5
        knob = {**options.get("cost_aware", {}),
                "aggressiveness": float(policy.rsplit("-a", 1)[1])}
        return _cost_aware(max_epochs, mode, name=policy, chooser=chooser, **knob)
    raise _unknown(policy)


def _chooser(study: Any) -> Any:
    """The curve sampler's resume chooser of the run's ``study``, as a run's policy gets
    it from its recorder (None without a curve sampler)."""
    return study.resume_chooser() if hasattr(study, "resume_chooser") else None


def _unknown(policy: str) -> ValueError:
    """The error for a policy name no peer answers to, naming the ones that do."""
    return ValueError(f"--policies: unknown policy (got {policy!r}); known: "
                      f"{', '.join(PEERS)}, ray-asha-gK, i-epoch-K, cost_aware-aX, "
                      f"cost_aware-model-aX, cost_aware-own-resumes")


def _optuna(policy: str, max_epochs: int, seed: int, mode: str, metric: str = METRIC):
    import optuna

    from hpsearch.adapters.optuna.pruners import OptunaPolicy

    if policy == "optuna-median":
        pruner = optuna.pruners.MedianPruner()
    elif policy.startswith("optuna-median-w"):  # warm-up epochs: the cautious variant
        pruner = optuna.pruners.MedianPruner(n_warmup_steps=int(policy.rsplit("w", 1)[1]))
    elif policy == "optuna-hyperband":
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_epochs,
                                                reduction_factor=3)
    else:
        raise _unknown(policy)
    return OptunaPolicy(policy, pruner, mode=mode, seed=seed, max_epochs=max_epochs,
                        metric=metric)


def _cost_aware(max_epochs: int, mode: str, aggressiveness: float = 1.0,
                name: str | None = None, chooser: Any = None,
                **policy_kwargs: Any) -> Callable:
    """hpsearch's cost-aware policy, made with the simulated run's accountant (named
    ``name`` in the benchmark's rows when given)."""
    from hpsearch.pruning.cost_aware import CostAwarePolicy
    from hpsearch.pruning.cost_aware_pruner import CostAwarePruner

    def with_accountant(accountant):
        pruner = CostAwarePruner(CostAwarePolicy(mode, max_epochs,
                                                 aggressiveness=aggressiveness,
                                                 **policy_kwargs), accountant, chooser)
        if name is not None:
            pruner.name = name
        return pruner

    return with_accountant


PEERS = ("none", "i-epoch-1", "i-epoch-3", "ray-asha", "ray-asha-g5", "optuna-median",
         "optuna-median-w5", "optuna-hyperband", "ray-hyperband", "cost_aware")
