"""``space.yaml`` -> a validated, immutable :class:`Config`.

Pure module: no Ray, torch, Lightning or Optuna. Every key is declared once, in the
dataclasses below, with its type check, default and one-line meaning; the key reference
in docs/reference.md is checked against these declarations by a test.

Rules:
  * Unknown keys are errors; every error is a :class:`~hpsearch.errors.ConfigError`
    naming the dotted field path and the bad value.
  * Numbers: PyYAML reads ``1e-4`` (no dot) as a *string*. Float fields accept such
    strings deliberately when they parse as a finite float; integer fields accept
    integers only (booleans are never numbers).
  * ``--set dotted.key=value`` overrides are parsed as YAML scalars and applied to the
    raw mapping before validation, so they obey the same rules.
  * ``space.yaml`` may not repeat a key in any mapping (YAML would silently keep the
    later one) nor nest deeper than :data:`MAX_DEPTH` levels.
  * What is legal but probably not meant (an objective mode that contradicts the metric
    name, more grid trials than grid points) is a warning in :attr:`Config.warnings`,
    which ``run`` and ``validate`` print as ``warning: <field>: <reason>``.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch.errors import ConfigError
from hpsearch.scalars import parse_bool, parse_float_value, parse_int_value
from hpsearch.spec.space import Space, parse_space
from hpsearch.spec.storage_url import parse_url

Parser = Callable[[Any, str], Any]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TRAINABLE_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9_.-]+:[0-9]{1,5}$")

#: Deepest nesting of mappings and lists ``space.yaml`` may have (real ones use about 4).
MAX_DEPTH = 64

#: Most epochs a trial may train: each epoch is a step of the study's curves and a
#: pruning and checkpoint decision, so a billion is a typo, not a plan.
MAX_EPOCHS = 100_000

#: Metric-name fragments (matched case-insensitively) that say which way is better.
MIN_METRIC_HINTS = ("loss", "error", "mse", "mae", "perplexity")
MAX_METRIC_HINTS = ("acc", "f1", "auc", "precision", "recall")


# ---------------------------------------------------------------------------------------
# Scalar parsers: (raw value, dotted path) -> converted value, or ConfigError.


def _float(min_value: float | None = None, *, exclusive: bool = False) -> Parser:
    def parse(value: Any, path: str) -> float:
        out = parse_float_value(value, path)
        if min_value is not None and (out <= min_value if exclusive else out < min_value):
            op = ">" if exclusive else ">="
            raise ConfigError(path, f"must be {op} {min_value:g}", value)
        return out

    return parse


def _int(min_value: int | None = None, max_value: int | None = None,
         why: str = "") -> Parser:
    def parse(value: Any, path: str) -> int:
        out = parse_int_value(value, path)
        if min_value is not None and out < min_value:
            raise ConfigError(path, f"must be >= {min_value}", value)
        if max_value is not None and out > max_value:
            raise ConfigError(path, f"must be <= {max_value}{why}", value)
        return out

    return parse


def _str(pattern: re.Pattern[str] | None = None, hint: str = "") -> Parser:
    def parse(value: Any, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(path, "must be a non-empty string", value)
        if pattern is not None and not pattern.fullmatch(value):
            raise ConfigError(path, f"must be {hint}", value)
        return value

    return parse


def _choice(*choices: str) -> Parser:
    def parse(value: Any, path: str) -> str:
        if value not in choices:
            raise ConfigError(path, f"must be one of {', '.join(choices)}", value)
        return value

    return parse


def _optional(inner: Parser) -> Parser:
    def parse(value: Any, path: str) -> Any:
        return None if value is None else inner(value, path)

    return parse


def _key(parser: Parser, doc: str, default: Any = MISSING, shown: str | None = None) -> Any:
    """Declare a config key: its parser, its one-line meaning and its default (``shown``
    is how the key reference shows a default that is resolved later)."""
    meta = {"parser": parser, "doc": doc}
    if shown is not None:
        meta["shown"] = shown
    if default is MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def _section(cls: type, doc: str) -> Any:
    """Declare a nested section whose keys all have defaults."""
    return field(default_factory=cls, metadata={"section": cls, "doc": doc})


# ---------------------------------------------------------------------------------------
# Sections.


@dataclass(frozen=True)
class Objective:
    """What the search optimises."""

    metric: str = _key(_str(), "Metric the trainable logs each epoch (e.g. `val_acc`).")
    mode: str | None = _key(
        _optional(_choice("max", "min")),
        "`max` or `min`; may be left out when the metric name says it (`loss`, `error`, "
        "`mse`, `mae`, `perplexity`: min; `acc`, `f1`, `auc`, `precision`, `recall`: max).",
        None,
        shown="from the metric name",
    )


def mode_from_metric(metric: str) -> str | None:
    """The objective direction a metric name makes plain, or None if it does not.

    ``min`` if the name contains one of :data:`MIN_METRIC_HINTS` (``val_loss``,
    ``valError``), ``max`` if it contains one of :data:`MAX_METRIC_HINTS`
    (``top1_acc``), case-insensitively; None when it contains none (``score``) or hints
    of both directions (``acc_loss``).
    """
    name = metric.lower()
    low = any(hint in name for hint in MIN_METRIC_HINTS)
    high = any(hint in name for hint in MAX_METRIC_HINTS)
    if low == high:
        return None
    return "min" if low else "max"


def _sources(value: Any, path: str) -> tuple[str, ...]:
    """One run dir or storage URL, or a list of them."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ConfigError(path, "must be a run dir or storage URL, or a list of them", value)
    return tuple(_str()(item, f"{path}[{i}]") for i, item in enumerate(items))


@dataclass(frozen=True)
class Search:
    """How configurations are proposed and how many run."""

    sampler: str = _key(
        _choice("tpe", "random", "cmaes", "qmc", "grid", "curve"),
        "Optuna sampler: `tpe`, `random`, `cmaes`, `qmc` (scrambled Sobol), `grid` "
        "(every combination of categorical, const, int and stepped float values) or "
        "`curve` (a model of the study's curves chooses new configurations and, with "
        "`cost_aware`, whether a paused trial is worth more).",
        "tpe",
    )
    prior: tuple = _key(
        _sources,
        "Earlier studies of the same space (run dirs or storage URLs) whose curves the "
        "`curve` sampler starts from; `[]` = none.",
        (),
    )
    n_trials: int = _key(_int(1), "Trials in the study (a continued run counts earlier ones).", 16)
    concurrency: int | None = _key(
        _optional(_int(1)),
        "Trials at once; `null` = as many as the cluster's resources allow.",
        None,
    )
    seed: int = _key(_int(0), "Seeds the sampler and, with the trial number, each trial.", 0)
    max_failures: int = _key(
        _int(0), "Restarts of a trial whose process dies, from its latest checkpoint.", 0
    )
    fail_fast: int = _key(
        _int(0),
        "Stop the run (exit code 1) when the first this-many trials of a session all "
        "fail with the same error; `0` = never stop early.",
        3,
    )


def _gpu(value: Any, path: str) -> float:
    out = _float(0.0)(value, path)
    if out > 1 and not out.is_integer():
        raise ConfigError(path, "must be a fraction <= 1 or a whole number of GPUs", value)
    return out


@dataclass(frozen=True)
class Resources:
    """What each trial reserves on a Ray node."""

    cpu: float = _key(
        _float(0.0, exclusive=True),
        "CPUs per trial; a CPU-only trial needs >= 1 per training process (it trains on "
        "max(1, int(cpu)) threads); GPU trials may take fractions.", 1.0)
    gpu: float = _key(_gpu, "GPUs per trial: a fraction <= 1 shares a GPU, or a whole number.", 0.0)
    devices: int | None = _key(
        _optional(_int(1)),
        "Training processes per trial (DDP ranks, each on one GPU or on CPU with gloo); "
        "`null` = one per whole GPU (`gpu: 2` trains with DDP on 2 GPUs), else 1. On CPU "
        "(`gpu: 0`) it splits `cpu` among that many processes.",
        None,
    )

    @property
    def processes(self) -> int:
        """DDP processes per trial (``devices``, or one per whole GPU)."""
        if self.devices is not None:
            return self.devices
        return int(self.gpu) if self.gpu >= 1 else 1


#: ``cost_aware`` makes no decision once the epochs left are at most this share of
#: max_epochs (finishing them costs less than the evidence that it should not). Part of
#: what ``pruning.policy: cost_aware`` means, so the config owns it: it refuses a
#: cost_aware search that could never stop a trial against it, and the policy
#: (:data:`hpsearch.pruning.cost_aware.FINISH_SHARE`) applies it.
COST_AWARE_FINISH_SHARE = 0.1


@dataclass(frozen=True)
class Pruning:
    """Early stopping of unpromising trials."""

    policy: str = _key(
        _choice("none", "asha", "median", "cost_aware"),
        "`none`, `asha` (Ray Tune's ASHA), `median` (Optuna's MedianPruner) or "
        "`cost_aware` (hpsearch's: curve ranks weighed by each trial's remaining cost).",
        "none",
    )
    aggressiveness: float = _key(
        _float(0.0, exclusive=True),
        "`cost_aware`: 1 = default; 2 keeps about the square of the share kept at 1 "
        "(cheaper, riskier); 0.5 its square root (safer, dearer).",
        1.0,
    )
    min_epochs: int = _key(_int(1), "Epochs every trial runs before it can be pruned.", 1)
    reduction_factor: float = _key(
        _float(1.0, exclusive=True), "`asha`: keep 1/reduction_factor at each rung.", 3.0
    )
    startup_trials: int = _key(
        _int(0), "`median`: trials that must finish before pruning starts.", 5
    )


def _address(value: Any, path: str) -> str:
    value = _str()(value, path)
    if value.startswith("ray://"):
        raise ConfigError(
            path,
            "Ray Client (ray://) is not supported: the study and checkpoints are written "
            "by the driver, so run hpsearch on the head node with address: auto",
            value,
        )
    if value != "auto" and not _HOST_PORT_RE.fullmatch(value):
        raise ConfigError(path, "must be null, 'auto' or the head's 'host:port'", value)
    return value


def _currency(value: Any, path: str) -> str:
    value = _str()(value, path)
    if len(value) != 3 or not value.isalpha():
        raise ConfigError(path, "must be a 3-letter currency code such as USD", value)
    return value.upper()


def _spot(value: Any, path: str) -> bool | str:
    if value == "auto" or isinstance(value, bool):
        return value
    raise ConfigError(path, "must be true, false or auto", value)


@dataclass(frozen=True)
class Pricing:
    """What a trial-hour costs."""

    instance: str | None = _key(
        _optional(_str()),
        "Catalogue row (`provider:instance` or a unique instance name, e.g. `p3.2xlarge`); "
        "`null` = `local-cpu`, or `local-gpu` when trials reserve GPUs; `auto` = the "
        "`local` row of the GPU model NVML detects on this machine (`local-cpu` without "
        "a GPU, `local-gpu` for a model without a local row).",
        None,
    )
    spot: bool | str = _key(
        _spot,
        "`true`: spot (or preemptible) price and spot nodes; `false`: on-demand; `auto`: "
        "the cheaper in expectation, counting work lost to preemptions and restarts.",
        False,
    )
    price_per_hour: float | None = _key(
        _optional(_float(0.0, exclusive=True)),
        "Explicit price of one trial-hour instead of a catalogue row (needs `currency`).",
        None,
    )
    currency: str | None = _key(
        _optional(_currency),
        "Currency of `price_per_hour`; with `instance`, must match the row's.",
        None,
    )
    catalog: str | None = _key(
        _optional(_str()),
        "A CSV with the catalogue's columns that extends or overrides its rows.",
        None,
    )


@dataclass(frozen=True)
class Budget:
    """Limits on money and time; null = no limit."""

    max_cost: float | None = _key(
        _optional(_float(0.0, exclusive=True)),
        "Money the whole study may spend, in the pricing currency (counts earlier sessions).",
        None,
    )
    max_cost_per_trial: float | None = _key(
        _optional(_float(0.0, exclusive=True)),
        "Money one trial may spend; it stops before the epoch that would pass it.",
        None,
    )
    max_wall_s: float | None = _key(
        _optional(_float(0.0, exclusive=True)),
        "Wall-clock seconds this session may run.",
        None,
    )


@dataclass(frozen=True)
class Checkpoint:
    """How trials keep their progress."""

    every_epochs: int | None = _key(
        _optional(_int(1)),
        "Epochs between checkpoints; `null` = Young/Daly from the checkpoint's measured "
        "cost and `preemption.rate_per_hour` (every epoch when no preemption is expected).",
        None,
    )
    keep_last: int = _key(_int(1), "Newest checkpoints kept per trial (the best is kept too).", 2)
    storage: str | None = _key(
        _optional(parse_url),
        "Where checkpoints go: `s3://bucket/prefix`, `gs://...`, `abfs://...`, "
        "`file:///path` or an absolute path every node mounts (any URL `pyarrow.fs` or "
        "fsspec resolves; credentials and endpoint from each node's environment, e.g. "
        "`AWS_ENDPOINT_URL`); `null` = the run dir's `checkpoints/`.",
        None,
    )
    storage_price: str | None = _key(
        _optional(_str()),
        "Row of the storage price list (`provider:service`, e.g. `aws:s3-standard`, "
        "`aws:efs-standard`); `null` = from the storage: s3 -> aws:s3-standard, gs -> "
        "gcp:gcs-standard, abfs/az -> azure:blob-hot, a path -> local:disk (free).",
        None,
    )


def _at_list(value: Any, path: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise ConfigError(path, "must be a list of {trial: N, epoch: E}", value)
    out = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping) or set(item) != {"trial", "epoch"}:
            raise ConfigError(where, "must be a mapping with exactly trial and epoch", item)
        out.append((_int(0)(item["trial"], f"{where}.trial"),
                    _int(1)(item["epoch"], f"{where}.epoch")))
    return tuple(out)


@dataclass(frozen=True)
class SimulatedPreemption:
    """Preemptions hpsearch causes itself: it really kills trial processes."""

    rate_per_hour: float = _key(
        _float(0.0), "Poisson rate of preemptions per trial-hour (seeded by search.seed).", 0.0)
    at: tuple = _key(
        _at_list, "Scripted preemptions: `[{trial: N, epoch: E}]` kills trial N during "
        "epoch E+1 (right after epoch E was reported).", ())
    signal: str = _key(
        _choice("term", "kill"),
        "`term`: SIGTERM, a notice (the trial may finish its epoch within grace_s); "
        "`kill`: SIGKILL, the process vanishes.",
        "kill",
    )


@dataclass(frozen=True)
class Preemption:
    """Spot and preemptible instances: notices, restarts, simulation."""

    rate_per_hour: float | None = _key(
        _optional(_float(0.0)),
        "Expected preemptions per trial-hour (checkpoint interval, `pricing.spot: auto`); "
        "`null` = the simulated rate.",
        None,
    )
    notice_url: str | None = _key(
        _optional(_str(_URL_RE, "an http:// URL")),
        "Metadata URL polled in each trial for an interruption notice (AWS "
        "`.../spot/instance-action`, GCP `.../instance/preempted`); `null` = off.",
        None,
    )
    notice_poll_s: float = _key(_float(0.1), "Seconds between notice polls.", 5.0)
    grace_s: float = _key(
        _float(0.0), "After a notice or SIGTERM: seconds the trial may use to finish its "
        "epoch and checkpoint.", 25.0)
    max_restarts: int = _key(
        _int(0), "Restarts after preemption per trial (failures use search.max_failures).",
        100)
    spot_wait_s: float = _key(
        _float(0.0), "With spot nodes declared and none alive: seconds a trial waits for "
        "one before it falls back to on-demand (or fails, if that is not allowed).", 60.0)
    on_demand_fallback: bool = _key(
        parse_bool, "With `pricing.spot: true`, fall back to on-demand nodes after "
        "spot_wait_s (`auto` always may).", False)
    simulate: SimulatedPreemption = _section(SimulatedPreemption, "Simulated preemptions.")


#: The rungs of ``oom.ladder`` (:class:`hpsearch.recovery.oom.OomLadder` climbs them).
HALVE_BATCH = "halve_batch"
MIXED_PRECISION = "mixed_precision"
GRAD_CHECKPOINTING = "grad_checkpointing"
OOM_STEPS = (HALVE_BATCH, MIXED_PRECISION, GRAD_CHECKPOINTING)
DEFAULT_OOM_LADDER = (HALVE_BATCH, HALVE_BATCH, MIXED_PRECISION, GRAD_CHECKPOINTING)


def _oom_steps(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list of {', '.join(OOM_STEPS)}", value)
    for i, step in enumerate(value):
        if step not in OOM_STEPS:
            raise ConfigError(f"{path}[{i}]", f"must be one of {', '.join(OOM_STEPS)}", step)
    return tuple(value)


@dataclass(frozen=True)
class Oom:
    """What a trial does after a CUDA out-of-memory error."""

    ladder: tuple = _key(
        _oom_steps,
        "Rungs climbed one per OOM, resuming from the checkpoint: `halve_batch`, "
        "`mixed_precision`, `grad_checkpointing` (where the model supports it).",
        DEFAULT_OOM_LADDER,
    )
    min_batch_size: int = _key(_int(1), "`halve_batch` never goes below this.", 8)
    batch_size_param: str = _key(
        _str(), "The param holding the batch size (else the datamodule's `batch_size`).",
        "batch_size")


@dataclass(frozen=True)
class Cluster:
    """Which Ray cluster runs the trials."""

    address: str | None = _key(
        _optional(_address),
        "`null` starts a local Ray; `auto` or `host:port` joins a running cluster "
        "(`ray start --head`).",
        None,
    )


@dataclass(frozen=True)
class Config:
    """A validated ``space.yaml``."""

    name: str = _key(
        _str(_NAME_RE, "letters, digits, '_', '-' or '.', starting with a letter or digit"),
        "Run name: the study name and the default run dir `runs/<name>/`.",
    )
    trainable: str = _key(
        _str(_TRAINABLE_RE, "an import path 'package.module:function'"),
        "`package.module:function`; called with the sampled params, returns "
        "`(LightningModule, LightningDataModule)`.",
    )
    objective: Objective = field(
        metadata={"section": Objective, "doc": "What the search optimises."}
    )
    max_epochs: int = _key(_int(1, MAX_EPOCHS, " (every epoch is a step of the study "
                                "and a pruning decision)"),
                           "Epochs a trial trains unless pruned.")
    space: Space = field(
        metadata={"parser": parse_space, "doc": "The hyperparameters (see below)."}
    )
    search: Search = _section(Search, "How configurations are proposed.")
    resources: Resources = _section(Resources, "What each trial reserves.")
    pruning: Pruning = _section(Pruning, "Early stopping.")
    pricing: Pricing = _section(Pricing, "What a trial-hour costs.")
    budget: Budget = _section(Budget, "Limits on money and time.")
    checkpoint: Checkpoint = _section(Checkpoint, "How trials keep their progress.")
    preemption: Preemption = _section(Preemption, "Spot instances: notices, restarts.")
    oom: Oom = _section(Oom, "Recovery from CUDA out-of-memory errors.")
    storage: str | None = _key(
        _optional(_str(_URL_RE, "an Optuna storage URL such as 'sqlite:///path.db'")),
        "Optuna RDB URL; `null` = `sqlite:///<run dir>/optuna.db`.",
        None,
    )
    cluster: Cluster = _section(Cluster, "Which Ray cluster runs the trials.")
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


# ---------------------------------------------------------------------------------------
# Loading and overrides.


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value`` into the key and the YAML-typed value."""
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("--set", "must look like dotted.key=value", text)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"value is not valid YAML ({_yaml_problem(exc)})", raw) from None
    return key, value


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | list[str] | None):
    """Return a deep copy of ``raw`` with dotted-key overrides applied.

    Args:
        raw: The mapping read from ``space.yaml``.
        overrides: ``{"search.n_trials": 3}`` or ``["search.n_trials=3"]``.

    Raises:
        ConfigError: For a malformed override, one that sets a key inside a scalar, or
            ``raw`` nested deeper than :data:`MAX_DEPTH`.
    """
    out = _copy_tree(raw)
    if not overrides:
        return out
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else list(overrides.items())
    )
    for key, value in items:
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(where, f"is not a mapping, cannot set '{key}'", child)
            node = child
        node[parts[-1]] = value
    return out


_SCALAR_TYPES = frozenset({int, float, str, bool, type(None)})


def _copy_tree(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the dicts and lists of ``raw`` (scalars are shared: they are immutable).

    Iterative, so that depth costs no stack, and linear: a list of millions of choices
    is copied in one pass. Shared sub-trees (YAML aliases) stay shared, as
    ``copy.deepcopy`` would keep them.
    """
    root: dict[str, Any] = dict(raw)
    copies: dict[int, Any] = {id(raw): root}
    stack: list[tuple[Any, str, int]] = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(path or "space.yaml",
                              f"is nested deeper than {MAX_DEPTH} levels of mappings and lists")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in [(k, v) for k, v in items if type(v) not in _SCALAR_TYPES]:
            if not isinstance(value, (Mapping, list)):
                continue
            done = copies.get(id(value))
            if done is None:
                done = copies[id(value)] = dict(value) if isinstance(value, Mapping) else list(value)
                where = (f"{path}.{key}" if path else str(key)) if isinstance(node, dict) \
                    else f"{path}[{key}]"
                stack.append((done, where, depth + 1))
            node[key] = done
    return root


def _yaml_problem(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return problem


def parse_yaml(text: str, name: str = "space.yaml") -> Any:
    """Parse YAML ``text`` with the checks ``space.yaml`` gets; ``name`` names it in errors.

    Refused, each as one ConfigError: malformed YAML; a key repeated in one mapping, at
    any depth (named by its dotted path, with both lines); nesting deeper than
    :data:`MAX_DEPTH`. Uses libyaml's loader when PyYAML has it (about ten times faster
    on a list of millions of choices).
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(loader, node, name)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(exc):
            raise ConfigError(name, f"is nested deeper than {MAX_DEPTH} levels of mappings "
                              f"and lists (at {_yaml_problem(exc).split(':')[0]})") from None
        raise ConfigError(name, f"malformed YAML at {_yaml_problem(exc)}") from None
    except RecursionError:  # PyYAML's pure-Python composer recurses per level
        raise ConfigError(name, f"is nested deeper than {MAX_DEPTH} levels of mappings "
                          "and lists") from None
    finally:
        loader.dispose()


def _check_nodes(loader: Any, root: Any, name: str) -> None:
    """Refuse duplicate mapping keys and deep nesting in a composed YAML document.

    Walks the node graph iteratively, each node once (aliases are not re-walked).
    """
    import yaml

    seen_nodes: set[int] = set()
    stack: list[tuple[Any, str, int]] = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if depth > MAX_DEPTH:
            raise ConfigError(path or name, f"is nested deeper than {MAX_DEPTH} levels of "
                              f"mappings and lists (line {node.start_mark.line + 1})")
        if isinstance(node, yaml.SequenceNode):
            scalar = yaml.ScalarNode
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)
                         if type(item) is not scalar)
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                stack.append((value_node, path, depth))
                continue
            key: Any = key_node.value
            if isinstance(key_node, yaml.ScalarNode):
                key = loader.construct_object(key_node)
            where = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            try:
                earlier = first_line.get(key)
                if earlier is None:
                    first_line[key] = line
            except TypeError:  # an unhashable key: construction refuses it
                earlier = None
            if earlier is not None:
                raise ConfigError(where, f"duplicate key at line {line} (first at line "
                                  f"{earlier}); YAML would silently keep only the later one")
            if not isinstance(value_node, yaml.ScalarNode):
                stack.append((value_node, where, depth + 1))


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a ``space.yaml`` into a mapping (see :func:`parse_yaml` for what is refused)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("space.yaml", "file not found", str(path)) from None
    except OSError as exc:
        raise ConfigError("space.yaml", f"cannot read file ({exc.strerror})", str(path)) from None
    raw = parse_yaml(text, str(path))
    if raw is None:
        raise ConfigError(str(path), "is empty")
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "top level must be a mapping of keys", raw)
    return raw


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
        raise ConfigError("search.prior", "is read only by search.sampler: curve (the "
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


#: pip packages of the DBAPI drivers people usually mean, by SQLAlchemy driver name.
_DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]",
                    "pymysql": "PyMySQL", "mysqldb": "mysqlclient", "pg8000": "pg8000",
                    "mysqlconnector": "mysql-connector-python", "oracledb": "oracledb",
                    "pyodbc": "pyodbc", "cx_oracle": "cx_Oracle"}


def check_storage(url: str) -> None:
    """Check that Optuna's RDB storage could open ``url``, without connecting.

    The URL must parse, name a database SQLAlchemy knows, with a synchronous driver that
    is installed; a SQLite file must be in an existing folder (an in-memory SQLite
    database would vanish with the driver). Imports SQLAlchemy and the driver only here.

    Raises:
        ConfigError: On ``storage``; the URL is shown with its password hidden.
    """
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError:
        raise ConfigError("storage", "is not a database URL such as "
                          "'sqlite:///path.db' or 'postgresql://user@host/db'", url) from None
    shown = parsed.render_as_string(hide_password=True)
    try:
        dialect = parsed.get_dialect()
    except sa_exc.NoSuchModuleError:
        scheme = parsed.drivername
        raise ConfigError("storage", f"unknown database scheme {scheme!r} (SQLAlchemy has no "
                          "such dialect; e.g. sqlite, postgresql, mysql)", shown) from None
    driver = parsed.get_driver_name()
    if getattr(dialect, "is_async", False):
        raise ConfigError("storage", f"driver {driver!r} is asynchronous; Optuna's storage "
                          "needs a synchronous one (e.g. postgresql+psycopg2)", shown)
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        package = _DRIVER_PACKAGES.get(driver, driver)
        raise ConfigError("storage", f"driver {driver!r} is not installed "
                          f"(pip install {package}; {exc})", shown) from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:":
            raise ConfigError("storage", "an in-memory SQLite database vanishes with the "
                              "driver; give a file, e.g. sqlite:///path/optuna.db", shown)
        if not database.startswith("file:") and not Path(database).parent.is_dir():
            raise ConfigError("storage", f"the folder of the SQLite file "
                              f"({Path(database).parent}) does not exist", shown)


def load(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
) -> Config:
    """Load ``source`` (a path to ``space.yaml`` or a mapping), apply overrides, validate."""
    raw = dict(source) if isinstance(source, Mapping) else read_yaml(source)
    return validate(apply_overrides(raw, overrides))


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` storage URL, or None for another database."""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///"):])
    return None


def mode_sign(mode: str) -> float:
    """``+1`` for ``max``, ``-1`` for ``min``: ``sign x value`` is higher-is-better.

    The one place the objective's direction becomes arithmetic; every comparison of
    objective values goes through it (or :func:`better`).

    Raises:
        ValueError: ``mode`` is neither ``max`` nor ``min``.
    """
    if mode == "max":
        return 1.0
    if mode == "min":
        return -1.0
    raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")


def better(a: float, b: float, mode: str) -> bool:
    """Whether objective value ``a`` is strictly better than ``b`` in direction ``mode``."""
    return mode_sign(mode) * a > mode_sign(mode) * b
