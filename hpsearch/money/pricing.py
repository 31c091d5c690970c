"""The price of a run's instances and of one trial-hour, from the config and the catalogue.

Pure module. The ledger bills each node (instance) as its provider does, at the spot or
on-demand price, rounded to the offer's granularity and at least its minimum once per
rental (:mod:`hpsearch.money.nodes`). A trial pays its share of the node it runs on (its
GPUs over the node's GPUs, or its CPUs over the node's CPUs). :class:`Price` carries both:
``instance_per_hour`` (the whole node, a GPU-only row's VM included where the catalogue
knows it) and ``per_hour`` (a trial's share, for estimates). ``pricing.price_per_hour``
is the price of one whole machine per hour.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from hpsearch.money import catalog as catalog_mod
from hpsearch.spec.config import Config
from hpsearch.errors import ConfigError


@dataclass(frozen=True)
class Price:
    """What an instance and one trial-hour cost, and how time is billed.

    Attributes:
        per_hour: Price of one trial-hour (the trial's share of the instance).
        currency: ISO code; every amount in a run is in this currency.
        instance: ``provider:instance`` of the catalogue row, or ``custom``.
        spot: Whether the spot price applies.
        instance_per_hour: The whole instance's price per hour.
        share: Fraction of the instance a trial pays for.
        billing_granularity_s: Billed time is rounded up to a multiple of this.
        min_billing_s: Least billed time of one interval.
        note: How the row was chosen when ``pricing.instance`` is ``auto`` (the detected
            GPU model), and what a GPU-only row's price includes of its VM; else empty.
    """

    per_hour: float
    currency: str
    instance: str
    spot: bool
    instance_per_hour: float
    share: float
    billing_granularity_s: int = 1
    min_billing_s: int = 0
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.per_hour / 3600.0

    def to_dict(self) -> dict:
        return asdict(self)


def default_instance(config: Config) -> str:
    """The row priced when ``pricing.instance`` is null: ``local-gpu`` when trials reserve
    GPUs, else ``local-cpu``."""
    return "local-gpu" if config.resources.gpu > 0 else "local-cpu"


#: ``pricing.instance: auto``: price this machine from the GPU model NVML detects.
AUTO = "auto"


@dataclass(frozen=True)
class DetectedGpu:
    """What NVML found on the driver's machine (for ``pricing.instance: auto``).

    The composition root detects it (:func:`hpsearch.adapters.nvml.detected`) and passes
    it in: pricing itself never talks to the hardware.

    Attributes:
        model: The NVML name of its GPUs (e.g. ``NVIDIA GeForce RTX 4090``), or None.
        memory_mib: Memory of one such card, to tell models apart that differ by it.
        message: Why no GPU was found (NVML's words), if none was.
    """

    model: str | None
    memory_mib: float | None = None
    message: str = ""


#: No GPU on this machine.
NO_GPU = DetectedGpu(None)


def auto_instance(gpu_model: str | None, catalog: catalog_mod.Catalog,
                  currency: str | None = None, memory_mib: float | None = None,
                  detail: str = "") -> tuple[str, str]:
    """The catalogue row ``pricing.instance: auto`` prices, from the detected GPU model.

    Pure: the caller detects the model (:func:`hpsearch.adapters.nvml.detected`).

    Args:
        gpu_model: The NVML name of this machine's GPUs (e.g. ``NVIDIA GeForce RTX
            4090``), or None when there is no GPU.
        catalog: The catalogue.
        currency: ``pricing.currency`` if set: only local rows in that currency count.
        memory_mib: The card's memory, to tell apart models that differ only by memory.
        detail: Why no GPU was found (NVML's message), added to the note.

    Returns:
        ``(provider:instance, note)``: the ``local`` row of that GPU model if the
        catalogue has one (``local-gpu`` is an RTX 4090, ``local-gpu-cny`` a V100), else
        ``local:local-gpu`` (or, with ``currency``, the first local GPU row in that
        currency) with the detected model named in the note; ``local:local-cpu`` without
        a GPU.

    Raises:
        ConfigError: With ``currency``, no local row of the kind needed is priced in it.
    """
    from hpsearch.money.gpu_models import match_catalog_gpu

    local = [o for o in catalog.offers.values()
             if o.provider == "local" and (currency is None or o.currency == currency)]
    if not gpu_model:
        return _no_gpu_row(catalog, local, currency, detail)
    offer = match_catalog_gpu(gpu_model, catalog_mod.Catalog(local), memory_mib=memory_mib)
    if offer is not None:
        return offer.key, (f"pricing.instance auto: detected {gpu_model}: {offer.key} "
                           f"({offer.gpu_model} depreciation row)")
    return _fallback_gpu_row(catalog, local, currency, gpu_model)


def _local_row(catalog: catalog_mod.Catalog, key: str, local: list[catalog_mod.Offer],
               currency: str | None, gpu: bool) -> catalog_mod.Offer | None:
    """The row ``key`` where it is priced in ``currency`` (any, when None), else the first
    ``local`` row with GPUs (``gpu``) or without; None when there is none."""
    offer = catalog.offers.get(key)
    if offer is None or not (currency is None or offer.currency == currency):
        offer = next((o for o in local if bool(o.gpu_count) == gpu), None)
    return offer


def _no_gpu_row(catalog: catalog_mod.Catalog, local: list[catalog_mod.Offer],
                currency: str | None, detail: str) -> tuple[str, str]:
    """``auto`` without a GPU: ``local:local-cpu`` or another local CPU row, and its note."""
    why = f"; {detail}" if detail else ""
    cpu = _local_row(catalog, "local:local-cpu", local, currency, gpu=False)
    if cpu is None:
        raise ConfigError("pricing.instance",
                          f"auto: no GPU detected and no local CPU row is priced in "
                          f"{currency}; add one with pricing.catalog{why}", AUTO)
    return cpu.key, f"pricing.instance auto: no GPU detected, so priced as {cpu.key}{why}"


def _fallback_gpu_row(catalog: catalog_mod.Catalog, local: list[catalog_mod.Offer],
                      currency: str | None, gpu_model: str) -> tuple[str, str]:
    """``auto`` on a GPU model without a local row: ``local:local-gpu`` or another local
    GPU row, and a note naming the model."""
    fallback = _local_row(catalog, "local:local-gpu", local, currency, gpu=True)
    if fallback is None:
        raise ConfigError("pricing.instance",
                          f"auto: detected {gpu_model}, but no local GPU row is priced in "
                          f"{currency}; add one for it with pricing.catalog", AUTO)
    return fallback.key, (
        f"pricing.instance auto: detected {gpu_model}, which has no local row in the "
        f"catalogue: priced as {fallback.key} ({fallback.gpu_model or 'GPU'} depreciation); "
        f"add a local row for it with pricing.catalog")


#: Assumed for ``pricing.spot: auto`` before anything is measured: seconds a restart
#: costs, and seconds of work a preemption loses (half of a one-epoch interval).
AUTO_RESTART_S = 60.0
AUTO_LOST_S = 60.0


def preemption_rate(config: Config, offer: catalog_mod.Offer | None) -> float:
    """Expected preemptions per hour of a spot trial: the config's, else the simulated
    rate, else the catalogue's interruption band, else a conservative default."""
    from hpsearch.money import nodekinds

    rate = config.preemption.rate_per_hour
    if rate is None and config.preemption.simulate.rate_per_hour > 0:
        rate = config.preemption.simulate.rate_per_hour
    if rate is None and offer is not None:
        rate = nodekinds.band_rate_per_hour(offer.interruption_band)
    return nodekinds.DEFAULT_SPOT_RATE_PER_HOUR if rate is None else rate


def resolve(config: Config, node_cpus: float | None = None,
            catalog: catalog_mod.Catalog | None = None, instance: str | None = None,
            spot: bool | None = None, gpu: DetectedGpu | None = None) -> Price:
    """The run's :class:`Price` (or a node's, with ``instance`` and ``spot``).

    Args:
        config: The validated config.
        node_cpus: CPUs of the node a CPU-only trial shares (for catalogue rows without
            ``vcpus``, i.e. local machines); None = this machine's CPU count.
        catalog: The catalogue to use; default the packaged one plus
            ``pricing.catalog``.
        instance: Price this catalogue row instead of ``pricing.instance`` (a node that
            declares its instance).
        spot: Price at spot (True) or on-demand (False) instead of ``pricing.spot``;
            ``pricing.spot: auto`` is settled by :func:`hpsearch.money.nodekinds.choose_spot`.
        gpu: For ``pricing.instance: auto``: what NVML found on this machine (required
            then; :data:`NO_GPU` for none).

    Raises:
        ConfigError: unknown instance (with suggestions), a missing spot/on-demand
            price, or a currency that differs from the row's.
        ValueError: ``pricing.instance`` is ``auto`` and ``gpu`` was not given.
    """
    pricing = config.pricing
    if pricing.price_per_hour is not None:
        return Price(pricing.price_per_hour, pricing.currency, "custom", False,
                     pricing.price_per_hour, 1.0)
    if catalog is None:
        catalog = catalog_mod.load(pricing.catalog)
    name, note = _instance(config, catalog, instance, gpu)
    offer = catalog.lookup(name)
    if pricing.currency is not None and pricing.currency != offer.currency:
        raise ConfigError(
            "pricing.currency",
            f"{offer.key} is priced in {offer.currency}; one run cannot mix currencies",
            pricing.currency,
        )
    if spot is None:
        spot = _configured_spot(config, offer)
    instance_price = offer.instance_price_per_hour(spot)
    note = "; ".join(filter(None, [note, _vm_note(offer, bool(spot))]))
    if node_cpus is None:
        node_cpus = float(os.cpu_count() or 1)
    share = offer.share(config.resources.cpu, config.resources.gpu, node_cpus)
    return Price(
        per_hour=instance_price * share,
        currency=offer.currency,
        instance=offer.key,
        spot=bool(spot),
        instance_per_hour=instance_price,
        share=share,
        billing_granularity_s=offer.billing_granularity_s,
        min_billing_s=offer.min_billing_s,
        note=note,
    )


def _configured_spot(config: Config, offer: catalog_mod.Offer) -> bool:
    """``pricing.spot``, with ``auto`` settled for ``offer`` by
    :func:`hpsearch.money.nodekinds.choose_spot` (its prices and preemption rate)."""
    from hpsearch.money import nodekinds

    spot = config.pricing.spot
    if spot == "auto":
        spot, _ = nodekinds.choose_spot(
            offer.spot_per_hour, offer.on_demand_per_hour,
            preemption_rate(config, offer), AUTO_LOST_S, AUTO_RESTART_S)
    return spot


def _vm_note(offer: catalog_mod.Offer, spot: bool) -> str:
    """What a GPU-only row's price includes of the VM it is attached to."""
    if not offer.gpu_only:
        return ""
    vm = offer.vm_per_hour(spot)
    if vm is None:
        return (f"{offer.key} is priced for the GPU only: the VM it is attached to is "
                f"billed on top and not counted (add it with pricing.catalog)")
    return (f"{offer.key}: the GPU's price plus its VM's, {vm:g} {offer.currency}/h "
            f"(see the catalogue's source)")


def _instance(config: Config, catalog: catalog_mod.Catalog, instance: str | None,
              gpu: DetectedGpu | None) -> tuple[str, str]:
    """The catalogue name to price, and a note when ``auto`` chose it."""
    if instance:
        return instance, ""
    name = config.pricing.instance or default_instance(config)
    if name != AUTO:
        return name, ""
    if gpu is None:
        raise ValueError("pricing.instance auto: pass what NVML detected (gpu=...)")
    if not gpu.model and config.resources.gpu > 0:
        # Pricing local-cpu would fail on "has no GPU"; local-gpu would be a guess.
        why = f" ({gpu.message})" if gpu.message else ""
        raise ConfigError(
            "pricing.instance",
            f"auto prices this machine's GPU, but none was detected while trials reserve "
            f"resources.gpu={config.resources.gpu:g}; run where the GPUs are, or name the "
            f"catalogue row (e.g. local-gpu){why}", AUTO)
    return auto_instance(gpu.model, catalog, config.pricing.currency, gpu.memory_mib,
                         gpu.message)


def auto_reason(config: Config, catalog: catalog_mod.Catalog | None = None,
                gpu: DetectedGpu | None = None) -> str | None:
    """Why ``pricing.spot: auto`` chose what it chose, or None if it is not auto
    (``gpu``: as for :func:`resolve`)."""
    from hpsearch.money import nodekinds

    pricing = config.pricing
    if pricing.spot != "auto" or pricing.price_per_hour is not None:
        return None
    catalog = catalog or catalog_mod.load(pricing.catalog)
    offer = catalog.lookup(_instance(config, catalog, None, gpu)[0])
    return nodekinds.choose_spot(offer.spot_per_hour, offer.on_demand_per_hour,
                                 preemption_rate(config, offer), AUTO_LOST_S,
                                 AUTO_RESTART_S)[1]
