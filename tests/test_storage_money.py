"""hpsearch.money.storage: the storage price list and what checkpoints cost (pure)."""

from __future__ import annotations

import pytest

from hpsearch.errors import ConfigError
from hpsearch.money import storage as sm
from hpsearch.recovery.checkpoint_usage import CheckpointUse


def test_the_packaged_price_list_has_a_local_row_of_zero_and_sources():
    rows = sm.packaged()
    local = rows["local:disk"]
    assert (local.per_gb_month, local.per_1k_writes, local.per_1k_reads) == (0, 0, 0)
    for row in rows.values():
        assert row.source and row.snapshot_date and len(row.currency) == 3, row
    s3 = rows["aws:s3-standard"]
    assert (s3.per_gb_month, s3.per_1k_writes, s3.per_1k_reads) == (0.023, 0.005, 0.0004)


@pytest.mark.parametrize("url, row", [
    (None, "local:disk"), ("/mnt/nfs/x", "local:disk"), ("file:///x", "local:disk"),
    ("s3://b/p", "aws:s3-standard"), ("gs://b", "gcp:gcs-standard"),
    ("abfs://c@a.dfs.core.windows.net/p", "azure:blob-hot"),
])
def test_the_default_row_follows_the_storage(url, row):
    assert sm.resolve(None, url).key == row


def test_a_named_row_and_a_bad_name():
    assert sm.resolve("aws:efs-standard", "/mnt/efs").per_gb_month == 0.30
    assert sm.resolve("r2", "s3://b").key == "cloudflare:r2"  # a unique service name
    with pytest.raises(ConfigError) as info:
        sm.resolve("aws:s3-standrd", "s3://b")
    assert str(info.value).startswith("checkpoint.storage_price: no such row")
    assert "aws:s3-standard" in str(info.value)


def test_a_bad_price_list_is_refused():
    with pytest.raises(ConfigError, match="columns must be"):
        sm.parse("a,b\n1,2\n")
    header = ",".join(sm.COLUMNS)
    with pytest.raises(ConfigError, match="per_gb_month: must be >= 0"):
        sm.parse(f"{header}\nx,y,object,USD,-1,0,0,,src,2026-11\n", "mine.csv")


def test_storage_money():
    s3 = sm.packaged()["aws:s3-standard"]
    # 2000 writes, 1000 reads; 10 GB held for a month; 5 GB held now.
    use = CheckpointUse(writes=2000, reads=1000, byte_s=10e9 * sm.MONTH_S,
                        stored_bytes=5_000_000_000)
    cost = sm.storage_cost(use, s3)
    assert cost.requests == pytest.approx(2 * 0.005 + 0.0004)
    assert cost.storage == pytest.approx(10 * 0.023)
    assert cost.total == pytest.approx(cost.requests + cost.storage)
    assert cost.per_month_kept == pytest.approx(5 * 0.023)
    assert cost.currency == "USD"
    free = sm.storage_cost(use, sm.packaged()["local:disk"])
    assert (free.total, free.per_month_kept) == (0.0, 0.0)
    assert sm.StoragePrice.from_dict(s3.to_dict()) == s3
    assert sm.StoragePrice.from_dict({}) is None

