"""The sections of ``space.yaml`` below the top level, each a frozen dataclass whose
fields declare its keys (parser, meaning, default): ``search``, ``resources``,
``pruning``, ``pricing``, ``budget``, ``checkpoint``, ``preemption`` (with
``preemption.simulate``), ``oom`` and ``cluster``. (``objective`` is in
:mod:`hpsearch.spec.objective`.)

Pure module: a section checks each of its keys alone; the checks across keys and
sections are :func:`hpsearch.spec.config.validate`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from hpsearch.errors import ConfigError
from hpsearch.scalars import parse_bool
from hpsearch.spec.parsers import URL_RE, choice, floats, ints, key, optional, section, text
from hpsearch.spec.storage_url import parse_url

_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9_.-]+:[0-9]{1,5}$")


def _sources(value: Any, path: str) -> tuple[str, ...]:
    """One run dir or storage URL, or a list of them."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ConfigError(path, "must be a run dir or storage URL, or a list of them", value)
    return tuple(text()(item, f"{path}[{i}]") for i, item in enumerate(items))


@dataclass(frozen=True)
class Search:
    """How configurations are proposed and how many run."""

    sampler: str = key(
        choice("tpe", "random", "cmaes", "qmc", "grid", "curve"),
        "Optuna sampler: `tpe`, `random`, `cmaes`, `qmc` (scrambled Sobol), `grid` "
        "(every combination of categorical, const, int and stepped float values) or "
        "`curve` (a model of the study's curves chooses new configurations and, with "
        "`cost_aware`, whether a paused trial is worth more).",
        "tpe",
    )
    prior: tuple = key(
        _sources,
        "Earlier studies of the same space (run dirs or storage URLs) whose curves the "
        "`curve` sampler starts from; `[]` = none.",
        (),
    )
    n_trials: int = key(ints(1), "Trials in the study (a continued run counts earlier ones).", 16)
    concurrency: int | None = key(
        optional(ints(1)),
        "Trials at once; `null` = as many as the cluster's resources allow.",
        None,
    )
    seed: int = key(ints(0), "Seeds the sampler and, with the trial number, each trial.", 0)
    max_failures: int = key(
        ints(0), "Restarts of a trial whose process dies, from its latest checkpoint.", 0
    )
    fail_fast: int = key(
        ints(0),
        "Stop the run (exit code 1) when the first this-many trials of a session all "
        "fail with the same error; `0` = never stop early.",
        3,
    )


def _gpu(value: Any, path: str) -> float:
    out = floats(0.0)(value, path)
    if out > 1 and not out.is_integer():
        raise ConfigError(path, "must be a fraction <= 1 or a whole number of GPUs", value)
    return out


@dataclass(frozen=True)
class Resources:
    """What each trial reserves on a Ray node."""

    cpu: float = key(
        floats(0.0, exclusive=True),
        "CPUs per trial; a CPU-only trial needs >= 1 per training process (it trains on "
        "max(1, int(cpu)) threads); GPU trials may take fractions.", 1.0)
    gpu: float = key(_gpu, "GPUs per trial: a fraction <= 1 shares a GPU, or a whole number.", 0.0)
    devices: int | None = key(
        optional(ints(1)),
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

    policy: str = key(
        choice("none", "asha", "median", "cost_aware"),
        "`none`, `asha` (Ray Tune's ASHA), `median` (Optuna's MedianPruner) or "
        "`cost_aware` (hpsearch's: curve ranks weighed by each trial's remaining cost).",
        "none",
    )
    aggressiveness: float = key(
        floats(0.0, exclusive=True),
        "`cost_aware`: 1 = default; 2 keeps about the square of the share kept at 1 "
        "(cheaper, riskier); 0.5 its square root (safer, dearer).",
        1.0,
    )
    min_epochs: int = key(ints(1), "Epochs every trial runs before it can be pruned.", 1)
    reduction_factor: float = key(
        floats(1.0, exclusive=True), "`asha`: keep 1/reduction_factor at each rung.", 3.0
    )
    startup_trials: int = key(
        ints(0), "`median`: trials that must finish before pruning starts.", 5
    )


def _address(value: Any, path: str) -> str:
    value = text()(value, path)
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
    value = text()(value, path)
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

    instance: str | None = key(
        optional(text()),
        "Catalogue row (`provider:instance` or a unique instance name, e.g. `p3.2xlarge`); "
        "`null` = `local-cpu`, or `local-gpu` when trials reserve GPUs; `auto` = the "
        "`local` row of the GPU model NVML detects on this machine (`local-cpu` without "
        "a GPU, `local-gpu` for a model without a local row).",
        None,
    )
    spot: bool | str = key(
        _spot,
        "`true`: spot (or preemptible) price and spot nodes; `false`: on-demand; `auto`: "
        "the cheaper in expectation, counting work lost to preemptions and restarts.",
        False,
    )
    price_per_hour: float | None = key(
        optional(floats(0.0, exclusive=True)),
        "Explicit price of one trial-hour instead of a catalogue row (needs `currency`).",
        None,
    )
    currency: str | None = key(
        optional(_currency),
        "Currency of `price_per_hour`; with `instance`, must match the row's.",
        None,
    )
    catalog: str | None = key(
        optional(text()),
        "A CSV with the catalogue's columns that extends or overrides its rows.",
        None,
    )


@dataclass(frozen=True)
class Budget:
    """Limits on money and time; null = no limit."""

    max_cost: float | None = key(
        optional(floats(0.0, exclusive=True)),
        "Money the whole study may spend, in the pricing currency (counts earlier sessions).",
        None,
    )
    max_cost_per_trial: float | None = key(
        optional(floats(0.0, exclusive=True)),
        "Money one trial may spend; it stops before the epoch that would pass it.",
        None,
    )
    max_wall_s: float | None = key(
        optional(floats(0.0, exclusive=True)),
        "Wall-clock seconds this session may run.",
        None,
    )


@dataclass(frozen=True)
class Checkpoint:
    """How trials keep their progress."""

    every_epochs: int | None = key(
        optional(ints(1)),
        "Epochs between checkpoints; `null` = Young/Daly from the checkpoint's measured "
        "cost and `preemption.rate_per_hour` (every epoch when no preemption is expected).",
        None,
    )
    keep_last: int = key(ints(1), "Newest checkpoints kept per trial (the best is kept too).", 2)
    storage: str | None = key(
        optional(parse_url),
        "Where checkpoints go: `s3://bucket/prefix`, `gs://...`, `abfs://...`, "
        "`file:///path` or an absolute path every node mounts (any URL `pyarrow.fs` or "
        "fsspec resolves; credentials and endpoint from each node's environment, e.g. "
        "`AWS_ENDPOINT_URL`); `null` = the run dir's `checkpoints/`.",
        None,
    )
    storage_price: str | None = key(
        optional(text()),
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
        out.append((ints(0)(item["trial"], f"{where}.trial"),
                    ints(1)(item["epoch"], f"{where}.epoch")))
    return tuple(out)


@dataclass(frozen=True)
class SimulatedPreemption:
    """Preemptions hpsearch causes itself: it really kills trial processes."""

    rate_per_hour: float = key(
        floats(0.0), "Poisson rate of preemptions per trial-hour (seeded by search.seed).", 0.0)
    at: tuple = key(
        _at_list, "Scripted preemptions: `[{trial: N, epoch: E}]` kills trial N during "
        "epoch E+1 (right after epoch E was reported).", ())
    signal: str = key(
        choice("term", "kill"),
        "`term`: SIGTERM, a notice (the trial may finish its epoch within grace_s); "
        "`kill`: SIGKILL, the process vanishes.",
        "kill",
    )


@dataclass(frozen=True)
class Preemption:
    """Spot and preemptible instances: notices, restarts, simulation."""

    rate_per_hour: float | None = key(
        optional(floats(0.0)),
        "Expected preemptions per trial-hour (checkpoint interval, `pricing.spot: auto`); "
        "`null` = the simulated rate.",
        None,
    )
    notice_url: str | None = key(
        optional(text(URL_RE, "an http:// URL")),
        "Metadata URL polled in each trial for an interruption notice (AWS "
        "`.../spot/instance-action`, GCP `.../instance/preempted`); `null` = off.",
        None,
    )
    notice_poll_s: float = key(floats(0.1), "Seconds between notice polls.", 5.0)
    grace_s: float = key(
        floats(0.0), "After a notice or SIGTERM: seconds the trial may use to finish its "
        "epoch and checkpoint.", 25.0)
    max_restarts: int = key(
        ints(0), "Restarts after preemption per trial (failures use search.max_failures).",
        100)
    spot_wait_s: float = key(
        floats(0.0), "With spot nodes declared and none alive: seconds a trial waits for "
        "one before it falls back to on-demand (or fails, if that is not allowed).", 60.0)
    on_demand_fallback: bool = key(
        parse_bool, "With `pricing.spot: true`, fall back to on-demand nodes after "
        "spot_wait_s (`auto` always may).", False)
    simulate: SimulatedPreemption = section(SimulatedPreemption, "Simulated preemptions.")


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

    ladder: tuple = key(
        _oom_steps,
        "Rungs climbed one per OOM, resuming from the checkpoint: `halve_batch`, "
        "`mixed_precision`, `grad_checkpointing` (where the model supports it).",
        DEFAULT_OOM_LADDER,
    )
    min_batch_size: int = key(ints(1), "`halve_batch` never goes below this.", 8)
    batch_size_param: str = key(
        text(), "The param holding the batch size (else the datamodule's `batch_size`).",
        "batch_size")


@dataclass(frozen=True)
class Cluster:
    """Which Ray cluster runs the trials."""

    address: str | None = key(
        optional(_address),
        "`null` starts a local Ray; `auto` or `host:port` joins a running cluster "
        "(`ray start --head`).",
        None,
    )
