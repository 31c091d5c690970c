"""``hpsearch plan``: will a trial fit a GPU, and what would the whole search cost on each?

Pure module: it checks the command's options and judges every catalogue GPU offer for
the search. The measurements it works from (parameter count, activation bytes, CPU step
times) come from :mod:`hpsearch.adapters.trial.probe`, which trains a few batches of the
trainable on this machine's CPU, at the configuration :mod:`.plan_point` picks. Each
part of the estimate has its module: the memory per trial (:mod:`.plan_memory`), the
time per epoch (:mod:`.plan_speed`), and the offers and their money (:mod:`.plan_offers`);
:mod:`.plan_text` prints a :class:`Plan` and :mod:`.plan_json` writes it as data.

Epochs default to ``max_epochs``: what the search costs if no trial is pruned, the
upper end; ``--epochs`` assumes fewer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from hpsearch.adapters.trial.probe import ProbeFigures
from hpsearch.errors import ConfigError
from hpsearch.money import catalog as catalog_mod
from hpsearch.tools.plan_memory import OPTIMIZER_STATES, PRECISIONS, MemoryEstimate, memory_of
from hpsearch.tools.plan_offers import (PlanRow, cheapest_first, costed_row, cpu_reference,
                                        gpu_offers, owned, too_small_row)
from hpsearch.tools.plan_speed import GPU_SPEEDS, Throughput


@dataclass
class Plan:
    """Everything ``plan`` prints."""

    name: str
    trainable: str
    point: str
    probe: ProbeFigures
    memory: MemoryEstimate
    precision: str
    optimizer_note: str
    trials: int
    epochs: int
    gpus_per_trial: float
    throughput: Throughput | None
    rows: list[PlanRow]
    too_small: list[PlanRow]
    cpu_row: tuple[str, float | None, str] | None
    currency_filter: str | None = None
    budget: tuple[float, str] | None = None
    notes: list[str] = field(default_factory=list)
    epochs_given: bool = False

    def cheapest_whole(self, currency: str) -> tuple[PlanRow, float, str] | None:
        """The cheapest rentable row in ``currency`` whose price includes its VM."""
        out = None
        for row in self.rows:
            best = row.best
            if (best is None or not row.fits or owned(row.offer) or row.vm_missing
                    or row.offer.currency != currency):
                continue
            if out is None or best[0] < out[1]:
                out = (row, best[0], best[1])
        return out

    def recommendations(self) -> dict[str, tuple[PlanRow, float, str]]:
        """``{currency: (row, cost, "spot" | "on-demand")}``: the cheapest rentable row
        that fits, per currency. Rows of provider ``local`` (the depreciation of a
        machine one owns) are priced in the table but never recommended."""
        out: dict[str, tuple[PlanRow, float, str]] = {}
        for row in self.rows:
            best = row.best
            if best is None or not row.fits or owned(row.offer):
                continue
            current = out.get(row.offer.currency)
            if current is None or best[0] < current[1]:
                out[row.offer.currency] = (row, best[0], best[1])
        return out


def _positive(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(option, "must be an integer >= 1", value)
    return value


def check_options(catalog: catalog_mod.Catalog, *, trials: int = 1, epochs: int = 1,
                  precision: str = "fp32", optimizer: str | None = None,
                  currency: str | None = None, throughput: Throughput | None = None,
                  ) -> str | None:
    """Check ``plan``'s options before anything is probed; return the currency upper-cased.

    Raises:
        ConfigError: naming the option (``--trials``, ``--epochs``, ``--precision``,
            ``--optimizer``, ``--currency``, ``--throughput``) and its bad value.
    """
    _positive(trials, "--trials")
    _positive(epochs, "--epochs")
    if precision not in PRECISIONS:
        raise ConfigError("--precision", f"must be one of {', '.join(PRECISIONS)}",
                          precision)
    if optimizer is not None and optimizer not in OPTIMIZER_STATES:
        raise ConfigError("--optimizer", f"must be one of {', '.join(OPTIMIZER_STATES)}",
                          optimizer)
    if currency is not None:
        currency = currency.upper()
        known = sorted({o.currency for o in catalog.offers.values()})
        if currency not in known:
            raise ConfigError("--currency", f"no catalogue offer is priced in it; known: "
                              f"{', '.join(known)}", currency)
    if throughput is not None and throughput.model is not None:
        speed = GPU_SPEEDS.get(throughput.model)
        if speed is not None and speed.tflops(precision) is None:
            raise ConfigError("--throughput", f"{throughput.model} cannot train in "
                              f"{precision}: a throughput measured there does not apply",
                              f"{throughput.samples_per_s:g}@{throughput.model}")
    return currency


def make_plan(config: Any, catalog: catalog_mod.Catalog, probe: ProbeFigures, *,
              trials: int | None = None, epochs: int | None = None,
              precision: str = "fp32", optimizer: str | None = None,
              throughput: Throughput | None = None, point: str = "mid",
              currency: str | None = None, node_cpus: float = 1.0) -> Plan:
    """Judge every catalogue GPU offer for the search ``config`` describes.

    Args:
        config: The validated :class:`hpsearch.spec.config.Config`.
        catalog: The price catalogue.
        probe: What the CPU probe measured.
        trials: Trials of the search; default ``search.n_trials``.
        epochs: Epochs each trial trains; default ``max_epochs`` (no pruning).
        precision: ``fp32``, ``fp16`` or ``bf16`` (mixed precision for 16 bits).
        optimizer: ``adam``, ``adamw`` or ``sgd`` to assume its states; default the
            optimizer state the probe measured.
        throughput: A measured training throughput instead of the CPU-scaled estimate.
        point: The configuration probed (``mid`` or ``high``; printed only).
        currency: Only offers in this currency.
        node_cpus: CPUs of this machine (prices the CPU reference row).

    Raises:
        ConfigError: naming the option (``--trials``, ``--epochs``, ``--precision``,
            ``--optimizer``, ``--currency``, ``--throughput``) and its bad value.
    """
    epochs_given = epochs is not None
    trials = config.search.n_trials if trials is None else trials
    epochs = config.max_epochs if epochs is None else epochs
    currency = check_options(catalog, trials=trials, epochs=epochs, precision=precision,
                             optimizer=optimizer, currency=currency, throughput=throughput)
    gpu, n_gpus, notes = _gpus_per_trial(config)
    memory, optimizer_note = memory_of(probe, optimizer, n_gpus)
    rows, too_small = _judge_offers(
        gpu_offers(catalog, currency), memory, gpu,
        lambda offer: costed_row(config, offer, probe, gpu, n_gpus, trials, epochs,
                                 precision, throughput, node_cpus))
    cpu_row = cpu_reference(config, catalog, probe, currency, trials, epochs, node_cpus)
    return Plan(
        name=config.name, trainable=config.trainable, point=point, probe=probe,
        memory=memory, precision=precision, optimizer_note=optimizer_note, trials=trials,
        epochs=epochs, gpus_per_trial=gpu, throughput=throughput, rows=rows,
        too_small=too_small, cpu_row=cpu_row, currency_filter=currency,
        budget=_budget_of(config, catalog, node_cpus), notes=notes,
        epochs_given=epochs_given,
    )


def _gpus_per_trial(config: Any) -> tuple[float, int, list[str]]:
    """``(GPUs a trial is planned on, its training processes, notes)``: a CPU trial is
    planned as one GPU, and a note says so."""
    notes: list[str] = []
    gpu = config.resources.gpu if config.resources.gpu > 0 else 1.0
    if config.resources.gpu <= 0:
        notes.append("resources.gpu is 0 (CPU trials): planned as 1 GPU per trial")
    n_gpus = max(1, int(gpu)) if gpu >= 1 else 1
    return gpu, n_gpus, notes


def _judge_offers(offers: list[catalog_mod.Offer], memory: MemoryEstimate, gpu: float,
                  price: Callable[[catalog_mod.Offer], PlanRow]
                  ) -> tuple[list[PlanRow], list[PlanRow]]:
    """``(rows that fit, priced by price and cheapest first; rows too small, smallest
    GPU memory first)``."""
    rows: list[PlanRow] = []
    too_small: list[PlanRow] = []
    for offer in offers:
        row = too_small_row(offer, memory, gpu)
        if row is not None:
            too_small.append(row)
            continue
        rows.append(price(offer))
    rows.sort(key=cheapest_first)
    too_small.sort(key=lambda r: (r.offer.gpu_memory_gb or 0, r.offer.key))
    return rows, too_small


def _budget_of(config: Any, catalog: catalog_mod.Catalog,
               node_cpus: float) -> tuple[float, str] | None:
    """``(budget.max_cost, its currency)``, or None without a budget or when the run's
    own instance cannot be priced (then there is no currency to compare it in)."""
    from hpsearch.money import pricing

    if config.budget.max_cost is None:
        return None
    try:
        price = pricing.resolve(config, catalog=catalog, node_cpus=node_cpus)
    except ConfigError:
        return None
    return config.budget.max_cost, price.currency
