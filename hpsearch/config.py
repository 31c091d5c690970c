"""``space.yaml`` -> a validated, immutable :class:`Config`.

Pure module: no Ray, torch, Lightning or Optuna. Every key is declared once, in the
dataclasses below, with its type check, default and one-line meaning; the README's key
reference is checked against these declarations by a test.

Rules:
  * Unknown keys are errors; every error is a :class:`~hpsearch.errors.ConfigError`
    naming the dotted field path and the bad value.
  * Numbers: PyYAML reads ``1e-4`` (no dot) as a *string*. Float fields accept such
    strings deliberately when they parse as a finite float; integer fields accept
    integers only (booleans are never numbers).
  * ``--set dotted.key=value`` overrides are parsed as YAML scalars and applied to the
    raw mapping before validation, so they obey the same rules.
"""

from __future__ import annotations

import copy
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch.errors import ConfigError
from hpsearch.scalars import parse_bool, parse_float_value, parse_int_value
from hpsearch.space import Space, parse_space

Parser = Callable[[Any, str], Any]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TRAINABLE_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9_.-]+:[0-9]{1,5}$")


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


def _int(min_value: int | None = None) -> Parser:
    def parse(value: Any, path: str) -> int:
        out = parse_int_value(value, path)
        if min_value is not None and out < min_value:
            raise ConfigError(path, f"must be >= {min_value}", value)
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


def _key(parser: Parser, doc: str, default: Any = MISSING) -> Any:
    """Declare a config key: its parser, its one-line meaning and its default."""
    meta = {"parser": parser, "doc": doc}
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
    mode: str = _key(_choice("max", "min"), "`max` or `min`.", "max")


@dataclass(frozen=True)
class Search:
    """How configurations are proposed and how many run."""

    sampler: str = _key(_choice("tpe", "random"), "Optuna sampler: `tpe` or `random`.", "tpe")
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

    cpu: float = _key(_float(0.0, exclusive=True), "CPUs per trial (fractions allowed).", 1.0)
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


def _oom_steps(value: Any, path: str) -> tuple[str, ...]:
    from hpsearch.oom import STEPS

    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list of {', '.join(STEPS)}", value)
    for i, step in enumerate(value):
        if step not in STEPS:
            raise ConfigError(f"{path}[{i}]", f"must be one of {', '.join(STEPS)}", step)
    return tuple(value)


@dataclass(frozen=True)
class Oom:
    """What a trial does after a CUDA out-of-memory error."""

    ladder: tuple = _key(
        _oom_steps,
        "Rungs climbed one per OOM, resuming from the checkpoint: `halve_batch`, "
        "`mixed_precision`, `grad_checkpointing` (where the model supports it).",
        ("halve_batch", "halve_batch", "mixed_precision", "grad_checkpointing"),
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
    max_epochs: int = _key(_int(1), "Epochs a trial trains unless pruned.")
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

    def to_dict(self) -> dict[str, Any]:
        """Return the config as plain YAML-able data (defaults filled in)."""
        return _to_plain(self)


def _to_plain(obj: Any) -> Any:
    if isinstance(obj, Space):
        return obj.to_dict()
    if isinstance(obj, Oom):
        return {f.name: (list(getattr(obj, f.name)) if f.name == "ladder"
                         else getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, SimulatedPreemption):
        out = {f.name: getattr(obj, f.name) for f in fields(obj)}
        out["at"] = [{"trial": t, "epoch": e} for t, e in obj.at]
        return out
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in fields(obj)}
    return obj


def _build(cls: type, raw: Any, path: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(path or "space.yaml", "must be a mapping of keys to values", raw)
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            hint = _suggest(str(key), known)
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


def _suggest(key: str, known: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; known keys: {', '.join(known)}"


def reference_keys() -> list[tuple[str, str, str]]:
    """Return ``(dotted key, default, meaning)`` for every declared key, in order."""
    out: list[tuple[str, str, str]] = []

    def walk(cls: type, prefix: str) -> None:
        for f in fields(cls):
            key = f"{prefix}{f.name}"
            if "section" in f.metadata:
                walk(f.metadata["section"], key + ".")
                continue
            if f.default is not MISSING:
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
    """
    out = copy.deepcopy(dict(raw))
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


def _yaml_problem(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return problem


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a ``space.yaml`` into a mapping; malformed YAML is a ConfigError."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("space.yaml", "file not found", str(path)) from None
    except OSError as exc:
        raise ConfigError("space.yaml", f"cannot read file ({exc.strerror})", str(path)) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"malformed YAML at {_yaml_problem(exc)}") from None
    if raw is None:
        raise ConfigError(str(path), "is empty")
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "top level must be a mapping of keys", raw)
    return raw


def validate(raw: Mapping[str, Any]) -> Config:
    """Validate a raw mapping into a :class:`Config`; raise ConfigError on bad input."""
    config = _build(Config, raw, "")
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
    if config.pruning.policy != "none" and config.pruning.min_epochs >= config.max_epochs:
        raise ConfigError(
            "pruning.min_epochs",
            f"must be < max_epochs ({config.max_epochs}) for pruning to do anything",
            config.pruning.min_epochs,
        )
    return config


def load(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
) -> Config:
    """Load ``source`` (a path to ``space.yaml`` or a mapping), apply overrides, validate."""
    raw = dict(source) if isinstance(source, Mapping) else read_yaml(source)
    return validate(apply_overrides(raw, overrides))
