"""``space.yaml`` -> a validated, immutable :class:`Config`.

Pure module: no Ray, torch, Lightning or Optuna. Every key is declared once, in the
dataclasses of :class:`Config` and its sections (:mod:`hpsearch.spec.objective`,
:mod:`hpsearch.spec.sections`), with its type check, default and one-line meaning
(:mod:`hpsearch.spec.parsers`); the key reference in docs/reference.md is checked
against these declarations by a test. The file is read and overridden by
:mod:`hpsearch.spec.raw_yaml`; this module validates the result.

Rules:
  * Unknown keys are errors; every error is a :class:`~hpsearch.errors.ConfigError`
    naming the dotted field path and the bad value.
  * Numbers: PyYAML reads ``1e-4`` (no dot) as a *string*. Float fields accept such
    strings deliberately when they parse as a finite float; integer fields accept
    integers only (booleans are never numbers).
  * ``--set dotted.key=value`` overrides are parsed as YAML scalars and applied to the
    raw mapping before validation, so they obey the same rules.
  * ``space.yaml`` may not repeat a key in any mapping (YAML would silently keep the
    later one) nor nest deeper than :data:`~hpsearch.spec.raw_yaml.MAX_DEPTH` levels.
  * What is legal but probably not meant (an objective mode that contradicts the metric
    name, more grid trials than grid points) is a warning in :attr:`Config.warnings`,
    which ``run`` and ``validate`` print as ``warning: <field>: <reason>``.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from hpsearch.errors import ConfigError
from hpsearch.spec.objective import Objective, mode_from_metric
from hpsearch.spec.parsers import URL_RE, ints, key, optional, section, text
from hpsearch.spec.raw_yaml import apply_overrides, located, read_yaml
from hpsearch.spec.sections import (COST_AWARE_FINISH_SHARE, Budget, Checkpoint, Cluster, Oom,
                                    Preemption, Pricing, Pruning, Resources, Search,
                                    SimulatedPreemption)
from hpsearch.spec.space import Space
from hpsearch.spec.space_parse import parse_space

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TRAINABLE_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")

#: Most epochs a trial may train: each epoch is a step of the study's curves and a
#: pruning and checkpoint decision, so a billion is a typo, not a plan.
MAX_EPOCHS = 100_000


@dataclass(frozen=True)
class Config:
    """A validated ``space.yaml``."""

    name: str = key(
        text(_NAME_RE, "letters, digits, '_', '-' or '.', starting with a letter or digit"),
        "Run name: the study name and the default run dir `runs/<name>/`.",
    )
    trainable: str = key(
        text(_TRAINABLE_RE, "an import path 'package.module:function'"),
        "`package.module:function`; called with the sampled params, returns "
        "`(LightningModule, LightningDataModule)`.",
    )
    objective: Objective = field(
        metadata={"section": Objective, "doc": "What the search optimises."}
    )
    max_epochs: int = key(ints(1, MAX_EPOCHS, " (every epoch is a step of the study "
                                "and a pruning decision)"),
                           "Epochs a trial trains unless pruned.")
    space: Space = field(
        metadata={"parser": parse_space, "doc": "The hyperparameters (see below)."}
    )
    search: Search = section(Search, "How configurations are proposed.")
    resources: Resources = section(Resources, "What each trial reserves.")
    pruning: Pruning = section(Pruning, "Early stopping.")
    pricing: Pricing = section(Pricing, "What a trial-hour costs.")
    budget: Budget = section(Budget, "Limits on money and time.")
    checkpoint: Checkpoint = section(Checkpoint, "How trials keep their progress.")
    preemption: Preemption = section(Preemption, "Spot instances: notices, restarts.")
    oom: Oom = section(Oom, "Recovery from CUDA out-of-memory errors.")
    storage: str | None = key(
        optional(text(URL_RE, "an Optuna storage URL such as 'sqlite:///path.db'")),
        "Optuna RDB URL; `null` = `sqlite:///<run dir>/optuna.db`.",
        None,
    )
    cluster: Cluster = section(Cluster, "Which Ray cluster runs the trials.")
    #: One-line warnings (``field: reason``) about legal values that are probably not
    #: meant; not a key of ``space.yaml``.
    warnings: tuple[str, ...] = field(default=(), compare=False, metadata={"internal": True})

    def to_dict(self) -> dict[str, Any]:
        """Return the config as plain YAML-able data (defaults filled in)."""
        return _to_plain(self)


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, Space):
        return obj.to_dict()
    if isinstance(obj, tuple):
        return [_to_plain(item) for item in obj]
    if isinstance(obj, Oom):
        return {f.name: (list(getattr(obj, f.name)) if f.name == "ladder"
                         else getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, SimulatedPreemption):
        out = {f.name: getattr(obj, f.name) for f in fields(obj)}
        out["at"] = [{"trial": t, "epoch": e} for t, e in obj.at]
        return out
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in _keys(obj)}
    return obj


def _keys(cls: Any) -> list[Any]:
    """The dataclass fields of ``cls`` that are keys of ``space.yaml``."""
    return [f for f in fields(cls) if not f.metadata.get("internal")]


def _build(cls: type, raw: Any, path: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(path or "space.yaml", "must be a mapping of keys to values", raw)
    known = {f.name: f for f in _keys(cls)}
    for key in raw:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            hint = _suggest(str(key), known, path)
            raise ConfigError(where, f"unknown key{hint}")
    values: dict[str, Any] = {}
    for name, f in known.items():
        where = f"{path}.{name}" if path else name
        if name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(where, "is required")
            continue
        if "section" in f.metadata:
            section = raw[name]
            values[name] = _build(f.metadata["section"], {} if section is None else section, where)
        else:
            values[name] = f.metadata["parser"](raw[name], where)
    return cls(**values)


def _suggest(key: str, known: Mapping[str, Any], section: str = "") -> str:
    """A hint for an unknown ``key`` of ``section``: the dotted key of that name in another
    section (``n_trials`` -> ``search.n_trials``), else a close key of the same section,
    else a close key of another section."""
    import difflib

    prefix = f"{section}." if section else ""
    elsewhere = [k for k, _d, _m in reference_keys()
                 if not k.startswith(prefix) or "." in k[len(prefix):]]
    same_name = [k for k in elsewhere if k.rsplit(".", 1)[-1] == key]
    if same_name:
        return f"; did you mean '{same_name[0]}'?"
    close = difflib.get_close_matches(key, list(known), n=1)
    if close:
        return f"; did you mean '{close[0]}'?"
    leaves = {}
    for k in elsewhere:
        leaves.setdefault(k.rsplit(".", 1)[-1], k)
    close = difflib.get_close_matches(key, list(leaves), n=1)
    if close:
        return f"; did you mean '{leaves[close[0]]}'?"
    return f"; known keys: {', '.join(known)}"


def reference_keys() -> list[tuple[str, str, str]]:
    """Return ``(dotted key, default, meaning)`` for every declared key, in order."""
    out: list[tuple[str, str, str]] = []

    def walk(cls: type, prefix: str) -> None:
        for f in _keys(cls):
            key = f"{prefix}{f.name}"
            if "section" in f.metadata:
                walk(f.metadata["section"], key + ".")
                continue
            if "shown" in f.metadata:
                default = f.metadata["shown"]
            elif f.default is not MISSING:
                value = list(f.default) if isinstance(f.default, tuple) else f.default
                default = "null" if value is None else repr(value).strip("'")
            else:
                default = "required"
            out.append((key, default, f.metadata["doc"]))

    walk(Config, "")
    return out



def validate(raw: Mapping[str, Any]) -> Config:
    """Validate a raw mapping into a :class:`Config`; raise ConfigError on bad input.

    The returned config has ``objective.mode`` resolved (from the metric name when it
    was left out) and its :attr:`Config.warnings` filled in.
    """
    config = _build(Config, raw, "")
    warnings: list[str] = []
    config = replace(config, objective=_resolve_mode(config.objective, warnings))
    pricing = config.pricing
    if pricing.price_per_hour is not None:
        if pricing.instance is not None:
            raise ConfigError("pricing.price_per_hour",
                              "give either pricing.instance or pricing.price_per_hour, not both",
                              pricing.price_per_hour)
        if pricing.currency is None:
            raise ConfigError("pricing.currency", "is required with pricing.price_per_hour")
        if pricing.spot is not False:
            raise ConfigError("pricing.spot", "needs pricing.instance (a catalogue row with a "
                              "spot price), not an explicit price_per_hour", pricing.spot)
    resources = config.resources
    if resources.devices is not None and resources.devices > 1:
        if 0 < resources.gpu < 1:
            raise ConfigError("resources.devices", "DDP needs whole GPUs: a trial on a "
                              f"fraction of a GPU (resources.gpu {resources.gpu:g}) trains "
                              "in one process", resources.devices)
        if resources.gpu >= 1 and resources.devices != int(resources.gpu):
            raise ConfigError("resources.devices", "must equal resources.gpu (one DDP "
                              f"process per GPU; resources.gpu is {resources.gpu:g})",
                              resources.devices)
    _check_pruning(config)
    pruning, n_trials = config.pruning, config.search.n_trials
    if pruning.policy == "median" and pruning.startup_trials >= n_trials:
        warnings.append(
            f"pruning.startup_trials: {pruning.startup_trials} >= search.n_trials "
            f"({n_trials}): the median pruner waits for that many finished trials, so it "
            "will not prune any")
    if config.search.sampler == "grid":
        config = _check_grid(config, warnings)
    if config.search.prior and config.search.sampler != "curve":
        raise ConfigError("search.prior", "is used only by search.sampler: curve (the "
                          f"sampler is {config.search.sampler})", list(config.search.prior))
    return replace(config, warnings=tuple(warnings))


def _resolve_mode(objective: Objective, warnings: list[str]) -> Objective:
    inferred = mode_from_metric(objective.metric)
    if objective.mode is None:
        if inferred is None:
            raise ConfigError(
                "objective.mode", f"is required: the metric name {objective.metric!r} does not "
                "say whether higher is better (names with loss, error, mse, mae or perplexity "
                "are minimised; with acc, f1, auc, precision or recall maximised); set max "
                "or min")
        return replace(objective, mode=inferred)
    if inferred is not None and inferred != objective.mode:
        warnings.append(
            f"objective.mode: {objective.mode} contradicts the metric name "
            f"{objective.metric!r}, which is usually {'minimised' if inferred == 'min' else 'maximised'}"
            f"; the search {'maximises' if objective.mode == 'max' else 'minimises'} it as told")
    return objective


def _check_pruning(config: Config) -> None:
    """A pruning policy that can never stop a trial is a mistake: refuse it."""
    pruning, epochs = config.pruning, config.max_epochs
    if pruning.policy == "none":
        return
    if pruning.min_epochs >= epochs:
        raise ConfigError(
            "pruning.min_epochs",
            f"must be < max_epochs ({epochs}) for pruning to do anything",
            pruning.min_epochs,
        )
    if pruning.policy == "cost_aware":
        # cost_aware decides from epoch max(2, min_epochs) while more than
        # COST_AWARE_FINISH_SHARE of the epochs remain (the last of them are cheap to
        # finish).
        last = epochs - math.floor(COST_AWARE_FINISH_SHARE * epochs) - 1
        share = f"{COST_AWARE_FINISH_SHARE:.0%}"
        if last < 2:
            raise ConfigError(
                "max_epochs", f"is too few for pruning.policy cost_aware, which decides from "
                f"epoch 2 and not in the last {share} of the epochs, so it could never stop a "
                "trial; raise max_epochs or use asha or median", epochs)
        if pruning.min_epochs > last:
            raise ConfigError(
                "pruning.min_epochs", f"must be <= {last} with cost_aware and max_epochs "
                f"{epochs}: it makes no decision in the last {share} of the epochs, so it "
                "could never stop a trial", pruning.min_epochs)


def _check_grid(config: Config, warnings: list[str]) -> Config:
    size = config.space.grid_size("search.sampler")
    if config.search.n_trials > size:
        warnings.append(
            f"search.n_trials: {config.search.n_trials} is more than the grid's {size} "
            f"configuration(s); the search runs {size} trial(s), one per grid point")
        config = replace(config, search=replace(config.search, n_trials=size))
    return config


def check_training_cpus(config: Config) -> None:
    """Refuse CPU reservations a Lightning trial would not honour.

    A CPU-only trial (``resources.gpu: 0``) trains each of its processes on
    ``max(1, int(cpu / processes))`` torch threads, so a fraction below one core per
    process would bill (and let Ray pack) a fraction while the trial uses whole cores.
    GPU trials may reserve fractions: their work runs on the GPU, their price is the
    GPU's share of the instance, and the CPU share only feeds it.

    Raises:
        ConfigError: On ``resources.cpu``, naming what a trial would really use.
    """
    resources = config.resources
    processes = resources.processes
    if resources.gpu == 0 and resources.cpu < processes:
        each = "" if processes == 1 else f" in each of its {processes} training processes"
        raise ConfigError(
            "resources.cpu",
            f"a CPU-only trial trains on at least one whole core{each} (torch threads = "
            f"max(1, int(cpu / processes))), so reserving {resources.cpu:g} would bill and "
            f"schedule {resources.cpu:g} core(s) while it uses {processes}; reserve at least "
            f"{processes}", resources.cpu)


def load(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> Config:
    """Load ``source`` (a path to ``space.yaml`` or a mapping), apply overrides, set the
    top-level keys of ``fixed`` (the caller's, e.g. ``hpsearch.run``'s trainable: an
    error about one names no line of the file), validate."""
    lines: dict[str, int] = {}
    raw = dict(source) if isinstance(source, Mapping) else read_yaml(source, lines)
    for key in fixed or {}:
        lines.pop(key, None)
    with located(source, lines, overrides):
        return validate({**apply_overrides(raw, overrides), **(fixed or {})})
