"""The price of one trial-hour in a run, resolved from the config and the catalogue.

Pure module. A trial pays its share of the instance it runs on (its GPUs over the
instance's GPUs, or its CPUs over the instance's vCPUs), at the spot or on-demand price,
billed the way the offer says (per-second granularity, a minimum per interval).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from hpsearch import catalog as catalog_mod
from hpsearch.config import Config
from hpsearch.errors import ConfigError


@dataclass(frozen=True)
class Price:
    """What one trial-hour costs and how time is billed.

    Attributes:
        per_hour: Price of one trial-hour (the trial's share of the instance).
        currency: ISO code; every amount in a run is in this currency.
        instance: ``provider:instance`` of the catalogue row, or ``custom``.
        spot: Whether the spot price applies.
        instance_per_hour: The whole instance's price per hour.
        share: Fraction of the instance a trial pays for.
        billing_granularity_s: Billed time is rounded up to a multiple of this.
        min_billing_s: Least billed time of one interval.
    """

    per_hour: float
    currency: str
    instance: str
    spot: bool
    instance_per_hour: float
    share: float
    billing_granularity_s: int = 1
    min_billing_s: int = 0

    @property
    def per_second(self) -> float:
        return self.per_hour / 3600.0

    def to_dict(self) -> dict:
        return asdict(self)


def default_instance(config: Config) -> str:
    return "local-gpu" if config.resources.gpu > 0 else "local-cpu"


#: Assumed for ``pricing.spot: auto`` before anything is measured: seconds a restart
#: costs, and seconds of work a preemption loses (half of a one-epoch interval).
AUTO_RESTART_S = 60.0
AUTO_LOST_S = 60.0


def preemption_rate(config: Config, offer: catalog_mod.Offer | None) -> float:
    """Expected preemptions per hour of a spot trial: the config's, else the simulated
    rate, else the catalogue's interruption band, else a conservative default."""
    from hpsearch import nodekinds

    rate = config.preemption.rate_per_hour
    if rate is None and config.preemption.simulate.rate_per_hour > 0:
        rate = config.preemption.simulate.rate_per_hour
    if rate is None and offer is not None:
        rate = nodekinds.band_rate_per_hour(offer.interruption_band)
    return nodekinds.DEFAULT_SPOT_RATE_PER_HOUR if rate is None else rate


def resolve(config: Config, node_cpus: float | None = None,
            catalog: catalog_mod.Catalog | None = None, instance: str | None = None,
            spot: bool | None = None) -> Price:
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
            ``pricing.spot: auto`` is settled by :func:`hpsearch.nodekinds.choose_spot`.

    Raises:
        ConfigError: unknown instance (with suggestions), a missing spot/on-demand
            price, or a currency that differs from the row's.
    """
    from hpsearch import nodekinds

    pricing = config.pricing
    if pricing.price_per_hour is not None:
        return Price(pricing.price_per_hour, pricing.currency, "custom", False,
                     pricing.price_per_hour, 1.0)
    if catalog is None:
        catalog = catalog_mod.load(pricing.catalog)
    offer = catalog.lookup(instance or pricing.instance or default_instance(config))
    if pricing.currency is not None and pricing.currency != offer.currency:
        raise ConfigError(
            "pricing.currency",
            f"{offer.key} is priced in {offer.currency}; one run cannot mix currencies",
            pricing.currency,
        )
    if spot is None:
        spot = pricing.spot
        if spot == "auto":
            spot, _ = nodekinds.choose_spot(
                offer.spot_per_hour, offer.on_demand_per_hour,
                preemption_rate(config, offer), AUTO_LOST_S, AUTO_RESTART_S)
    instance_price = offer.price_per_hour(spot)
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
    )


def auto_reason(config: Config, catalog: catalog_mod.Catalog | None = None) -> str | None:
    """Why ``pricing.spot: auto`` chose what it chose, or None if it is not auto."""
    from hpsearch import nodekinds

    pricing = config.pricing
    if pricing.spot != "auto" or pricing.price_per_hour is not None:
        return None
    catalog = catalog or catalog_mod.load(pricing.catalog)
    offer = catalog.lookup(pricing.instance or default_instance(config))
    return nodekinds.choose_spot(offer.spot_per_hour, offer.on_demand_per_hour,
                                 preemption_rate(config, offer), AUTO_LOST_S,
                                 AUTO_RESTART_S)[1]
