"""Preparing a run: everything that can be checked before the run dir is touched (the
config, the trainable, the price, the run dir's writability, the checkpoint storage,
the curve sampler's prior), so that bad input raises and nothing is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hpsearch.driver.backend import LightningBackend
from hpsearch.driver.rundir import default_run_dir, storage_url_for
from hpsearch.errors import ConfigError
from hpsearch.money.fmt import fmt_money
from hpsearch.recovery import faults
from hpsearch.spec import config as config_mod
from hpsearch.spec import study_storage


def _check_minimum(config: config_mod.Config, price) -> None:
    """A budget below one rental's minimum billing could start nothing: refuse it now."""
    from hpsearch.money.nodes import billed_seconds

    cap = config.budget.max_cost
    minimum = billed_seconds(0.0, price.billing_granularity_s, price.min_billing_s) \
        * price.instance_per_hour / 3600.0
    if cap is not None and minimum > cap:
        raise ConfigError(
            "budget.max_cost", f"less than one rental's minimum billing: {price.instance}"
            f"{' (spot)' if price.spot else ''} bills at least {price.min_billing_s} s, "
            f"{fmt_money(minimum, price.currency)}", cap)


@dataclass
class Prepared:
    """What :func:`~hpsearch.driver.launch.start` has checked before it takes the run
    dir's lock."""

    backend: Any
    started_s: float
    config: config_mod.Config
    gpu: Any
    currency: str
    run_path: Path
    url: str
    checkpoints: Any
    #: The curve sampler's earlier studies (``search.prior``), read into memory.
    prior: list = field(default_factory=list)


def prepare(source, overrides, run_dir, backend, trainable,
            out: Callable[[str], None]) -> Prepared:
    """Load and check everything that can be checked before the run dir is touched:
    bad input raises here and nothing is written."""
    from hpsearch.adapters import nvml
    from hpsearch.driver.checkpoints import RunCheckpoints
    from hpsearch.money import pricing

    function = trainable if callable(trainable) else None
    if backend is None:
        backend = LightningBackend(function)
    elif function is not None:
        raise ConfigError("trainable", "a function object needs the default Lightning "
                          "backend", trainable)
    # The run's nodes are billed from here: a local machine is rented for the run, and
    # a cluster node already up is billed from the run's start.
    started_s = backend.clock()
    config = _load_config(source, overrides, trainable)
    for warning in config.warnings:
        out(f"warning: {warning}")
    if config.storage is not None:
        study_storage.check_storage(config.storage)  # before anything opens or writes it
    backend.check(config)
    gpu = nvml.for_pricing(config)
    first = pricing.resolve(config, gpu=gpu)  # unknown instance: before anything starts
    _check_minimum(config, first)
    run_path = Path(run_dir) if run_dir is not None else default_run_dir(config.name)
    run_path = run_path.absolute()
    url = storage_url_for(config, run_path)
    faults.check_writable(run_path, study_storage.sqlite_file(url))
    checkpoints = RunCheckpoints(config, run_path)  # opened, priced: before anything is written
    return Prepared(backend, started_s, config, gpu, first.currency, run_path, url,
                    checkpoints, read_prior(config, url))


def prior_text(prior: list) -> str:
    """What the run header says of the curve sampler's prior ("" without one)."""
    if not prior:
        return ""
    trials = sum(len(study.trials) for study in prior)
    return f" (prior: {len(prior)} earlier stud{'y' if len(prior) == 1 else 'ies'}, " \
           f"{trials} trial(s))"


def read_prior(config: config_mod.Config, url: str) -> list:
    """The earlier studies ``search.prior`` names (ConfigError on a bad one, naming its
    index; this run's own study, at storage ``url``, is refused: its trials are not an
    earlier study's). ``run`` and ``validate`` both read it, so both refuse alike."""
    if not config.search.prior:
        return []
    from hpsearch.adapters.optuna.results import load_prior

    return load_prior(config.search.prior, config.space, own=(url, config.name))


#: Stands in for the ``trainable`` key while a config given a function object validates.
_FUNCTION_PLACEHOLDER = "hpsearch.spec.trainable:function_object"


def _load_config(source, overrides, trainable) -> config_mod.Config:
    """Load the config; ``trainable`` (a path or a function) replaces its key."""
    import dataclasses

    if trainable is None:
        return config_mod.load(source, overrides)
    if not callable(trainable):
        return config_mod.load(source, overrides, fixed={"trainable": trainable})
    from hpsearch.spec.trainable import display_name

    config = config_mod.load(source, overrides, fixed={"trainable": _FUNCTION_PLACEHOLDER})
    return dataclasses.replace(config, trainable=display_name(trainable))
