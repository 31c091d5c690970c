"""What a search would cost on each catalogue GPU offer, for ``hpsearch plan``.

Pure module. **Cost of the search** is billed as a provider bills instances (see
:mod:`hpsearch.money.nodes`): the trials are packed on instances by their resources (an
instance runs as many at once as its GPUs hold: ``gpu_count // resources.gpu``; CPU
trials on the local machine by its CPUs), ``search.concurrency`` at a time (default: the
slots of one instance), so the search rents ``ceil(at once / slots)`` instances for
``waves x trial time``, where a wave is one round of trials at once (:func:`pack`). Each
instance is billed once for that rental, rounded up to the offer's
``billing_granularity_s`` and at least its ``min_billing_s``. The trials' shares
(``trials x trial time x GPUs per trial / the instance's GPUs``) are the work; the rest
of what the instances bill is *idle* (an 8-GPU instance waiting for its last wave, a
minimum longer than the search), shown beside the cost. A trial runs start-up + epochs x
seconds per epoch; start-up is :data:`~hpsearch.tools.plan_speed.STARTUP_S` (a trial
process's spawn and imports) plus the measured build/setup time. A row priced for the
GPU only (a cloud's GPU add-on) includes its VM where the catalogue knows it, and says
so where it does not. Spot is the expected cost: the rental grown by the work
preemptions lose (half an epoch and a restart each, at the row's interruption rate as
``pricing.spot: auto`` counts it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpsearch.adapters.trial.probe import ProbeFigures
from hpsearch.errors import ConfigError
from hpsearch.money import catalog as catalog_mod
from hpsearch.tools.plan_memory import GIB, HEADROOM, MIB
from hpsearch.tools.plan_speed import STARTUP_S, Throughput, gpu_epoch_s


def billed_s(run_s: float, offer: catalog_mod.Offer) -> float:
    """Seconds billed for one interval of ``run_s`` seconds on ``offer``: rounded up to
    its billing granularity, at least its minimum billing period (as
    :meth:`hpsearch.money.ledger_entries.Interval.billed_s` bills it)."""
    from hpsearch.money.nodes import billed_seconds

    return billed_seconds(run_s, offer.billing_granularity_s, offer.min_billing_s)


@dataclass(frozen=True)
class PlanRow:
    """One catalogue GPU offer, judged for the search.

    Attributes:
        offer: The catalogue row.
        fits: Whether one trial fits its GPU memory (and GPU count).
        available_mib: Memory a trial may plan to use there (its share, with headroom).
        epoch_s: Estimated seconds per epoch, or None (``why`` says why).
        trial_s: Estimated run time of one trial (start-up and every epoch).
        billed_s: Seconds billed for one instance's rental on demand (:func:`billed_s`).
        spot_billed_s: The same on spot, preemption losses included.
        share: Fraction of the instance a trial pays for.
        on_demand_cost, spot_cost: The whole search's cost, or None (no such price).
        spot_factor: Billed spot time per useful second.
        why: Why it does not fit or has no time estimate.
        nodes: Instances rented for the search; ``slots``: trials one runs at once.
        wall_s: How long they are rented (``waves x trial_s``).
        idle_cost: What the instances bill beyond the trials' shares (on-demand, else
            spot), None without a cost.
        vm_missing: A GPU-only row whose VM price the catalogue lacks (not counted).
    """

    offer: catalog_mod.Offer
    fits: bool
    available_mib: float | None
    epoch_s: float | None
    trial_s: float | None
    share: float
    on_demand_cost: float | None
    spot_cost: float | None
    spot_factor: float | None
    why: str = ""
    billed_s: float | None = None
    spot_billed_s: float | None = None
    nodes: int = 1
    slots: int = 1
    wall_s: float | None = None
    idle_cost: float | None = None
    vm_missing: bool = False

    @property
    def best(self) -> tuple[float, str] | None:
        """``(cost, "spot" | "on-demand")``, the cheaper option, or None."""
        options = [(c, k) for c, k in ((self.spot_cost, "spot"),
                                       (self.on_demand_cost, "on-demand")) if c is not None]
        return min(options) if options else None

    @property
    def minimum_billed(self) -> bool:
        """Whether the billing minimum or granularity bills an instance for more time
        than it is rented (by more than a second)."""
        return (self.wall_s is not None and self.billed_s is not None
                and self.billed_s > self.wall_s + 1.0)

    @property
    def idle_share(self) -> float | None:
        """Idle over the instances' bill (the option of :attr:`idle_cost`)."""
        cost = self.on_demand_cost if self.on_demand_cost is not None else self.spot_cost
        if self.idle_cost is None or not cost:
            return None
        return self.idle_cost / cost


@dataclass(frozen=True)
class Packing:
    """How a search's trials lie on instances of one offer (see the module doc).

    Attributes:
        slots: Trials one instance runs at once.
        nodes: Instances rented for the whole search.
        waves: Rounds of trials at once.
    """

    slots: int
    nodes: int
    waves: int


def pack(trials: int, per_trial: float, capacity: float,
         concurrency: int | None = None) -> Packing:
    """Lay ``trials`` on instances of ``capacity`` GPUs (or CPUs), ``per_trial`` each,
    ``concurrency`` at once (default: one instance's slots)."""
    slots = max(1, int(capacity // per_trial + 1e-9)) if per_trial > 0 else 1
    at_once = max(1, min(trials, concurrency or slots))
    return Packing(slots, math.ceil(at_once / slots), math.ceil(trials / at_once))


def rental_cost(packing: Packing, run_s: float, price_per_hour: float,
                offer: catalog_mod.Offer) -> tuple[float, float]:
    """``(money, billed seconds per instance)`` of the search's instances rented for
    ``waves x run_s``, each billed once with the offer's granularity and minimum."""
    billed = billed_s(packing.waves * run_s, offer)
    return packing.nodes * billed * price_per_hour / 3600.0, billed


def costed_row(config: Any, offer: catalog_mod.Offer, probe: ProbeFigures, gpu: float,
               n_gpus: int, trials: int, epochs: int, precision: str,
               throughput: Throughput | None, node_cpus: float) -> PlanRow:
    """One offer that fits, priced for the whole search (see the module doc)."""
    from hpsearch.money import nodekinds, pricing

    available = usable_mib(offer, gpu)
    share = offer.share(config.resources.cpu, gpu, node_cpus)
    vm_missing = offer.gpu_only and any(
        offer.vm_per_hour(spot) is None for spot, price in (
            (False, offer.on_demand_per_hour), (True, offer.spot_per_hour)) if price)
    epoch_s, why = gpu_epoch_s(probe, offer.gpu_model, precision, n_gpus, throughput)
    if epoch_s is None:
        return PlanRow(offer, True, available, None, None, share, None, None, None, why,
                       vm_missing=vm_missing)
    startup_s = STARTUP_S + probe.setup_s
    trial_s = startup_s + epochs * epoch_s
    packing = pack(trials, gpu, offer.gpu_count, config.search.concurrency)
    on_demand = billed = spot = factor = spot_billed = None
    if offer.on_demand_per_hour is not None:
        on_demand, billed = rental_cost(packing, trial_s,
                                        offer.instance_price_per_hour(False), offer)
    if offer.spot_per_hour is not None:
        rate = pricing.preemption_rate(config, offer)
        factor = nodekinds.spot_cost_factor(rate, epoch_s / 2.0, startup_s)
        spot, spot_billed = rental_cost(packing, trial_s * factor,
                                        offer.instance_price_per_hour(True), offer)
    kind_spot = on_demand is None
    cost = spot if kind_spot else on_demand
    work = trials * (trial_s * (factor if kind_spot else 1.0)) * share / 3600.0 \
        * offer.instance_price_per_hour(kind_spot)
    return PlanRow(offer, True, available, epoch_s, trial_s, share, on_demand, spot, factor,
                   billed_s=billed if billed is not None else spot_billed,
                   spot_billed_s=spot_billed, nodes=packing.nodes, slots=packing.slots,
                   wall_s=packing.waves * trial_s, idle_cost=None if cost is None
                   else max(0.0, cost - work), vm_missing=vm_missing)


def cpu_reference(config: Any, catalog: catalog_mod.Catalog, probe: ProbeFigures,
                  currency: str | None, trials: int, epochs: int,
                  node_cpus: float) -> tuple[str, float | None, str] | None:
    """``(instance, cost, currency)`` of the search on this machine's CPU (``local-cpu``:
    the machine billed for the whole search, its CPUs packed with trials)."""
    try:
        offer = catalog.lookup("local:local-cpu")
    except ConfigError:
        return None
    if currency is not None and offer.currency != currency:
        return None
    cost = None
    if probe.cpu_epoch_s is not None and offer.on_demand_per_hour is not None:
        run_s = STARTUP_S + probe.setup_s + epochs * probe.cpu_epoch_s
        packing = pack(trials, config.resources.cpu, node_cpus, config.search.concurrency)
        cost = rental_cost(packing, run_s, offer.on_demand_per_hour, offer)[0]
    return offer.key, cost, offer.currency


def gpu_offers(catalog: catalog_mod.Catalog,
               currency: str | None) -> list[catalog_mod.Offer]:
    """The catalogue's GPU offers (in ``currency`` only, when given), in its order."""
    return [offer for offer in catalog.offers.values()
            if offer.gpu_count and offer.gpu_model
            and (currency is None or offer.currency == currency)]


def usable_mib(offer: catalog_mod.Offer, gpu: float) -> float | None:
    """MiB a trial may use of ``offer``'s GPU (its fraction, less the headroom)."""
    fraction = gpu if gpu < 1 else 1.0
    return (offer.gpu_memory_gb * GIB * fraction * HEADROOM / MIB
            if offer.gpu_memory_gb else None)


def too_small_row(offer: catalog_mod.Offer, memory: Any, gpu: float) -> PlanRow | None:
    """The row of an offer a trial does not fit (too few GPUs, too little memory), or
    None when it fits."""
    available = usable_mib(offer, gpu)
    if gpu > offer.gpu_count:
        why = f"{offer.gpu_count} GPU(s), a trial needs {gpu:g}"
    elif not memory.fits(offer.gpu_memory_gb, gpu if gpu < 1 else 1.0):
        why = "memory" if offer.gpu_memory_gb else "memory unknown"
    else:
        return None
    return PlanRow(offer, False, available, None, None, 0.0, None, None, None, why)


def cheapest_first(row: PlanRow) -> tuple:
    """USD first, then by currency; priced rows cheapest first."""
    best = row.best
    return (row.offer.currency != "USD", row.offer.currency,
            best is None, best[0] if best else 0.0, row.offer.key)


def owned(offer: catalog_mod.Offer) -> bool:
    """A ``local`` row: the depreciation of a machine one owns, not something to rent."""
    return offer.provider == "local"


def gpu_part_only(offer: catalog_mod.Offer) -> bool:
    """A row priced for the GPU alone (a cloud's GPU add-on), its VM billed apart."""
    return offer.gpu_only
