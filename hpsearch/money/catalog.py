"""The price catalogue: what each rentable offer costs per hour, and how it is billed.

Pure module. The packaged ``hpsearch/data/catalog.csv`` (schema 2) holds one row per
offer, each with its currency, source and snapshot date; a user CSV with the same
columns extends it or overrides rows with the same ``provider:instance`` key (a schema-1
CSV, without the columns schema 2 added, still reads: its rows are whole instances).
Prices are per *instance*-hour; a trial pays its share (see :meth:`Offer.share`). An
unknown instance or a missing price is an error with close matches, never a price of 0.

Schema 2 added ``priced`` (``instance``, or ``gpu``: a cloud's GPU add-on, priced without
the VM it must be attached to) and ``vm_on_demand_per_hour``/``vm_spot_per_hour`` (that
VM's price, where it is known). ``interruption_band`` is an AWS Spot Instance Advisor
band, ``unknown`` where the provider publishes none (GCP, marketplaces), or ``n/a`` for a
machine one owns.
"""

from __future__ import annotations

import csv
import difflib
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable

from hpsearch.errors import ConfigError

SCHEMA_VERSION = 2
COLUMNS = (
    "provider", "instance", "gpu_model", "gpu_count", "gpu_memory_gb", "vcpus", "region",
    "currency", "on_demand_per_hour", "spot_per_hour", "interruption_band",
    "billing_granularity_s", "min_billing_s", "source", "snapshot_date",
)
#: Columns schema 2 added; a CSV without them reads as whole instances.
OPTIONAL_COLUMNS = ("priced", "vm_on_demand_per_hour", "vm_spot_per_hour")
#: What a row's prices cover.
PRICED = ("instance", "gpu")
#: AWS-style monthly interruption bands; ``unknown`` (or empty) where none is published,
#: ``n/a`` for a machine one owns (never taken back).
BANDS = ("", "<5%", "5-10%", "10-15%", "15-20%", ">20%", "unknown", "n/a")


@dataclass(frozen=True)
class Offer:
    """One catalogue row: an instance type at a provider, priced per instance-hour.

    Attributes:
        provider: ``aws``, ``gcp``, ``runpod``, ``autodl``, ``local``, ...
        instance: The provider's instance name.
        gpu_model: e.g. ``V100``; empty for CPU-only offers.
        gpu_count: GPUs in the instance (0 for CPU-only).
        gpu_memory_gb: Memory per GPU, or None.
        vcpus: vCPUs in the instance, or None (local rows: the machine Ray runs on).
        region: Region of the price, or empty.
        currency: ISO code of every price in the row.
        on_demand_per_hour: Price per instance-hour on demand, or None if not offered.
        spot_per_hour: Price per instance-hour on spot/preemptible, or None.
        interruption_band: AWS-style monthly interruption band, or empty if unknown.
        billing_granularity_s: Billed time is rounded up to this many seconds.
        min_billing_s: Least billed time of one interval.
        source: Where the prices come from.
        snapshot_date: When they were read (``YYYY-MM``).
        gpu_only: The prices are a GPU add-on's, without the VM it is attached to.
        vm_on_demand_per_hour, vm_spot_per_hour: That VM's price, where known (None:
            the VM is extra and not in the catalogue).
    """

    provider: str
    instance: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gb: float | None
    vcpus: int | None
    region: str
    currency: str
    on_demand_per_hour: float | None
    spot_per_hour: float | None
    interruption_band: str
    billing_granularity_s: int
    min_billing_s: int
    source: str
    snapshot_date: str
    gpu_only: bool = False
    vm_on_demand_per_hour: float | None = None
    vm_spot_per_hour: float | None = None

    @property
    def key(self) -> str:
        """``provider:instance``, the unique name of the row."""
        return f"{self.provider}:{self.instance}"

    def price_per_hour(self, spot: bool, field: str = "pricing.spot") -> float:
        """The instance-hour price; ConfigError if this offer has no such price."""
        price = self.spot_per_hour if spot else self.on_demand_per_hour
        if price is None:
            kind = "spot" if spot else "on-demand"
            raise ConfigError(field, f"{self.key} has no {kind} price in the catalogue", spot)
        return price

    def vm_per_hour(self, spot: bool) -> float | None:
        """The VM part of a GPU-only row's price (0 for a whole instance), or None when
        the VM's price is not in the catalogue."""
        if not self.gpu_only:
            return 0.0
        return self.vm_spot_per_hour if spot else self.vm_on_demand_per_hour

    def instance_price_per_hour(self, spot: bool, field: str = "pricing.spot") -> float:
        """What the provider bills per hour for the whole thing rented: the price, plus
        the VM of a GPU-only row where it is known (see :meth:`vm_per_hour`)."""
        return self.price_per_hour(spot, field) + (self.vm_per_hour(spot) or 0.0)

    @property
    def band(self) -> str:
        """The interruption band as shown: ``unknown`` where none is published."""
        return self.interruption_band or ("n/a" if self.provider == "local" else "unknown")

    def share(self, cpu: float, gpu: float, node_cpus: float | None = None) -> float:
        """Fraction of the instance one trial pays for.

        GPU trials pay ``gpu / gpu_count``; CPU-only trials pay ``cpu / vcpus`` (for rows
        without ``vcpus``, the CPUs of the node, ``node_cpus``). Never above 1.
        """
        if gpu > 0:
            if self.gpu_count <= 0:
                raise ConfigError("resources.gpu", f"{self.key} has no GPU", gpu)
            return min(1.0, gpu / self.gpu_count)
        # Only owned machines are priced by whatever node they are; a rented GPU row
        # without vCPUs is priced per GPU.
        cpus = self.vcpus or (node_cpus if self.provider == "local" or not self.gpu_count
                              else None)
        if not cpus:
            raise ConfigError(
                "pricing.instance",
                f"{self.key} is priced per GPU only (vCPUs unknown) but trials reserve no GPU",
                self.key,
            )
        return min(1.0, cpu / cpus)


class Catalog:
    """A set of offers keyed by ``provider:instance``."""

    def __init__(self, offers: Iterable[Offer]):
        self.offers: dict[str, Offer] = {}
        for offer in offers:
            self.offers[offer.key] = offer

    def __len__(self) -> int:
        return len(self.offers)

    def merged(self, other: "Catalog") -> "Catalog":
        """This catalogue with ``other``'s rows added, replacing rows with the same key."""
        return Catalog([*self.offers.values(), *other.offers.values()])

    def lookup(self, name: str, field: str = "pricing.instance") -> Offer:
        """Find an offer by ``provider:instance`` or by an unambiguous instance name."""
        if name in self.offers:
            return self.offers[name]
        matches = [o for o in self.offers.values() if o.instance == name]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            keys = ", ".join(sorted(o.key for o in matches))
            raise ConfigError(field, f"is ambiguous; use one of {keys}", name)
        # Suggest names that resolve: bare instance names only where they are unique.
        counts: dict[str, int] = {}
        for o in self.offers.values():
            counts[o.instance] = counts.get(o.instance, 0) + 1
        names = sorted(set(self.offers) | {i for i, c in counts.items() if c == 1})
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            "; `python -m hpsearch catalog` lists them")
        raise ConfigError(field, f"unknown instance{hint}", name)

    def search(self, gpu: str | None = None, spot: bool = False,
               max_price: float | None = None, currency: str | None = None) -> list[Offer]:
        """Offers matching the filters, cheapest first (by the spot or on-demand price).

        Args:
            gpu: Case-insensitive substring of the GPU model (``a100``, ``4090``).
            spot: Rank by spot price (offers without one are left out).
            max_price: Highest instance-hour price kept.
            currency: Keep only offers in this currency.
        """
        out = []
        for offer in self.offers.values():
            price = offer.spot_per_hour if spot else offer.on_demand_per_hour
            if price is None:
                continue
            if gpu and gpu.lower().replace(" ", "") not in offer.gpu_model.lower().replace(" ", ""):
                continue
            if max_price is not None and price > max_price:
                continue
            if currency and offer.currency != currency.upper():
                continue
            out.append((offer.currency, price, offer.key, offer))
        return [o for *_, o in sorted(out, key=lambda t: t[:3])]


def _number(text: str, where: str, column: str, *, integer: bool = False,
            optional: bool = True) -> float | int | None:
    text = text.strip()
    if not text:
        if optional:
            return None
        raise ConfigError(where, f"column {column} is required")
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise ConfigError(where, f"column {column} must be a number", text) from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(where, f"column {column} must be a finite number >= 0", text)
    return value


def parse_catalog(text: str, origin: str) -> Catalog:
    """Parse catalogue CSV text (lines starting with ``#`` are comments).

    Raises:
        ConfigError: naming ``origin:line`` and the column for any bad row.
    """
    # Comments and blank lines are skipped, but errors name the physical line.
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), start=1)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise ConfigError(origin, "catalogue is empty")
    header = tuple(c.strip() for c in next(csv.reader([numbered[0][1]])))
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ConfigError(origin, f"catalogue misses columns: {', '.join(missing)}")
    offers = []
    for n, line in numbered[1:]:
        where = f"{origin}:{n}"
        cells = next(csv.reader([line]))
        if len(cells) != len(header):
            raise ConfigError(where, f"has {len(cells)} fields, the header has {len(header)}")
        offers.append(_offer(dict(zip(header, cells)), where))
    return Catalog(offers)


def _offer(row: dict[str, str], where: str) -> Offer:
    """One row of a catalogue CSV (``where``: ``file:line`` for errors)."""
    provider, instance = row["provider"].strip(), row["instance"].strip()
    if not provider or not instance:
        raise ConfigError(where, "provider and instance are required")
    currency = row["currency"].strip().upper()
    if len(currency) != 3 or not currency.isalpha():
        raise ConfigError(where, "column currency must be a 3-letter code", currency)
    on_demand, spot = _prices(row, where)
    band = row["interruption_band"].strip()
    if band not in BANDS:
        raise ConfigError(where, f"interruption_band must be one of {BANDS[1:]} or empty",
                          band)
    granularity = _number(row["billing_granularity_s"], where, "billing_granularity_s",
                          integer=True, optional=False)
    if granularity < 1:
        raise ConfigError(where, "column billing_granularity_s must be >= 1", granularity)
    priced = (row.get("priced") or "").strip() or "instance"
    if priced not in PRICED:
        raise ConfigError(where, f"column priced must be one of {', '.join(PRICED)}",
                          priced)
    vm = {c: _number(row.get(c) or "", where, c) for c in OPTIONAL_COLUMNS[1:]}
    if priced == "instance" and any(v is not None for v in vm.values()):
        raise ConfigError(where, "a VM price belongs to a row priced for the GPU only "
                                 "(priced: gpu)", priced)
    return Offer(
        provider=provider,
        instance=instance,
        gpu_model=row["gpu_model"].strip(),
        gpu_count=int(_number(row["gpu_count"], where, "gpu_count", integer=True) or 0),
        gpu_memory_gb=_number(row["gpu_memory_gb"], where, "gpu_memory_gb"),
        vcpus=_number(row["vcpus"], where, "vcpus", integer=True),
        region=row["region"].strip(),
        currency=currency,
        on_demand_per_hour=on_demand,
        spot_per_hour=spot,
        interruption_band=band,
        billing_granularity_s=granularity,
        min_billing_s=int(_number(row["min_billing_s"], where, "min_billing_s",
                                  integer=True, optional=False)),
        source=row["source"].strip(),
        snapshot_date=row["snapshot_date"].strip(),
        gpu_only=priced == "gpu",
        vm_on_demand_per_hour=vm["vm_on_demand_per_hour"],
        vm_spot_per_hour=vm["vm_spot_per_hour"],
    )




def _prices(row: dict[str, str], where: str) -> tuple[float | None, float | None]:
    """A row's on-demand and spot prices: at least one, neither 0."""
    on_demand = _number(row["on_demand_per_hour"], where, "on_demand_per_hour")
    spot = _number(row["spot_per_hour"], where, "spot_per_hour")
    if on_demand is None and spot is None:
        raise ConfigError(where, "a row needs on_demand_per_hour or spot_per_hour")
    for column, price in (("on_demand_per_hour", on_demand), ("spot_per_hour", spot)):
        if price == 0:
            raise ConfigError(where, f"column {column} is 0; leave it empty if unknown")
    return on_demand, spot


def packaged() -> Catalog:
    """The catalogue shipped with hpsearch."""
    text = resources.files("hpsearch").joinpath("data/catalog.csv").read_text(encoding="utf-8")
    return parse_catalog(text, "hpsearch/data/catalog.csv")


def load(user_path: str | Path | None = None) -> Catalog:
    """The packaged catalogue, extended and overridden by ``user_path`` if given."""
    catalog = packaged()
    if user_path is None:
        return catalog
    path = Path(user_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("pricing.catalog", f"cannot read file ({exc.strerror})",
                          str(path)) from None
    return catalog.merged(parse_catalog(text, str(path)))
