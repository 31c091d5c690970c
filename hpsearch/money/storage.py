"""What checkpoints cost: the storage price list and the money of a trial's checkpoints.

Pure module. Storage that survives a spot instance (an object store, a NAS) is billed per
GB-month and per request; a node's own disk costs nothing beyond its instance (and
vanishes with it). ``hpsearch/data/storage.csv`` (schema 1, its own file beside the
compute catalogue) has one row per service with its currency, source and snapshot date.

What a trial's checkpoints used is recovery's record
(:class:`hpsearch.recovery.checkpoint_usage.CheckpointUse`: one per attempt, combined per
trial); this module prices it (:func:`storage_cost`):

* requests: write-class (PUT, POST, COPY, LIST) and read-class (GET, HEAD) requests
  times the row's price per 1000;
* storage while the run ran: bytes held times seconds, in GB-months (10^9 bytes for
  730 hours), times the row's price per GB-month;
* kept after the run: the bytes the trial's checkpoints hold now cost
  ``per_gb_month`` every month until they are deleted (shown apart: it is not yet
  spent).
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Mapping

from hpsearch.errors import ConfigError
from hpsearch.recovery.checkpoint_usage import CheckpointUse

SCHEMA_VERSION = 1
COLUMNS = ("provider", "service", "kind", "currency", "per_gb_month", "per_1k_writes",
           "per_1k_reads", "region", "source", "snapshot_date")
FIELD = "checkpoint.storage_price"
#: Seconds in the month storage is billed by (730 hours).
MONTH_S = 730 * 3600.0
GB = 1e9
#: The row a storage gets when ``checkpoint.storage_price`` is not set, by URL scheme.
BY_SCHEME = {"s3": "aws:s3-standard", "gs": "gcp:gcs-standard",
             "gcs": "gcp:gcs-standard", "abfs": "azure:blob-hot",
             "abfss": "azure:blob-hot", "az": "azure:blob-hot"}
LOCAL_ROW = "local:disk"

METHOD = (
    "requests counted by each trial's checkpoint store (uploads, manifests, listings, "
    "downloads) times the price per 1000; storage: bytes held x seconds while the "
    "trials ran, in GB-months (10^9 bytes, 730 h), times the price per GB-month; what "
    "the checkpoints hold now costs that price every month until deleted")


@dataclass(frozen=True)
class StoragePrice:
    """One row of the storage price list.

    Attributes:
        provider: ``aws``, ``gcp``, ``local``, ...
        service: ``s3-standard``, ``efs-standard``, ``disk``, ...
        kind: ``object``, ``nas`` or ``disk``.
        currency: ISO code of every price in the row.
        per_gb_month: Price of 10^9 bytes stored for 730 hours.
        per_1k_writes: Price of 1000 write-class requests.
        per_1k_reads: Price of 1000 read-class requests.
        region: Region of the price, or empty.
        source: Where the prices come from.
        snapshot_date: When they were read (``YYYY-MM``).
    """

    provider: str
    service: str
    kind: str
    currency: str
    per_gb_month: float
    per_1k_writes: float
    per_1k_reads: float
    region: str
    source: str
    snapshot_date: str

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.service}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StoragePrice | None":
        try:
            return cls(**{k: data[k] for k in COLUMNS})
        except (KeyError, TypeError):
            return None


def _float(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(where, "must be a number", text) from None
    if value < 0:
        raise ConfigError(where, "must be >= 0", text)
    return value


def parse(text: str, source: str = "hpsearch/data/storage.csv") -> dict[str, StoragePrice]:
    """The rows of a storage price list in CSV (comment lines start with ``#``)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    reader = csv.DictReader(lines)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ConfigError(source, f"columns must be {', '.join(COLUMNS)}",
                          ",".join(reader.fieldnames or ()))
    rows = {}
    for n, row in enumerate(reader, start=2):
        where = f"{source}:{n}"
        price = StoragePrice(
            row["provider"], row["service"], row["kind"], row["currency"].upper(),
            *(_float(row[c], f"{where}.{c}") for c in
              ("per_gb_month", "per_1k_writes", "per_1k_reads")),
            row["region"], row["source"], row["snapshot_date"])
        rows[price.key] = price
    return rows


def packaged() -> dict[str, StoragePrice]:
    """The price list shipped with hpsearch."""
    text = resources.files("hpsearch").joinpath("data/storage.csv").read_text(encoding="utf-8")
    return parse(text)


def default_row(storage_url: str | None) -> str:
    """The row a checkpoint storage is priced at by default (see :data:`BY_SCHEME`)."""
    if not storage_url or "://" not in storage_url:
        return LOCAL_ROW
    return BY_SCHEME.get(storage_url.split("://", 1)[0].lower(), LOCAL_ROW)


def resolve(name: str | None, storage_url: str | None,
            rows: Mapping[str, StoragePrice] | None = None) -> StoragePrice:
    """The price of the run's checkpoint storage: row ``name``, or the default for the
    storage URL.

    Raises:
        ConfigError: ``checkpoint.storage_price`` names no row (with close matches).
    """
    rows = packaged() if rows is None else rows
    key = name or default_row(storage_url)
    if key in rows:
        return rows[key]
    by_service = [r for r in rows.values() if r.service == key]
    if len(by_service) == 1:
        return by_service[0]
    close = difflib.get_close_matches(key, list(rows), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else (
        f"; rows: {', '.join(sorted(rows))}")
    raise ConfigError(FIELD, f"no such row in the storage price list{hint}", key)


@dataclass(frozen=True)
class StorageCost:
    """The money of some checkpoints at one storage price (all in ``currency``).

    Attributes:
        requests: Money for requests.
        storage: Money for bytes held while the trials ran.
        total: ``requests + storage``: spent.
        per_month_kept: What the bytes held now cost each further month.
        currency: The price's currency.
    """

    requests: float
    storage: float
    total: float
    per_month_kept: float
    currency: str


def storage_cost(use: CheckpointUse, price: StoragePrice) -> StorageCost:
    """The money of ``use`` at ``price`` (see the module docstring)."""
    requests = (use.writes * price.per_1k_writes + use.reads * price.per_1k_reads) / 1000.0
    held = use.byte_s / GB / MONTH_S * price.per_gb_month
    return StorageCost(requests, held, requests + held,
                       use.stored_bytes / GB * price.per_gb_month, price.currency)
