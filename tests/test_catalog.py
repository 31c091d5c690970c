"""Unit tests of hpsearch.money.catalog: the packaged price catalogue, lookups, search, user CSVs
and a trial's share of an instance.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here.
"""

from __future__ import annotations

import re

import pytest

from hpsearch.money import catalog as catalog_mod
from hpsearch.money.catalog import COLUMNS, Catalog, Offer, load, packaged, parse_catalog
from hpsearch.errors import EXIT_CONFIG, ConfigError

HEADER = ",".join(COLUMNS)


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return packaged()


def row(**over: str) -> str:
    """One CSV row with sensible defaults (a 1-GPU USD offer), columns overridden."""
    values = {
        "provider": "acme", "instance": "box-1", "gpu_model": "V100", "gpu_count": "1",
        "gpu_memory_gb": "16", "vcpus": "8", "region": "eu", "currency": "USD",
        "on_demand_per_hour": "1.5", "spot_per_hour": "0.5", "interruption_band": "<5%",
        "billing_granularity_s": "1", "min_billing_s": "60", "source": "test",
        "snapshot_date": "2026-11",
    }
    values.update(over)
    return ",".join(values[c] for c in COLUMNS)


def write_csv(tmp_path, *lines: str, name: str = "user.csv"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# The packaged catalogue


#: (provider, GPU model substring) every packaged catalogue must cover.
REQUIRED = [
    ("aws", "V100"), ("aws", "T4"), ("aws", "A10G"), ("aws", "A100"), ("aws", "H100"),
    ("gcp", "T4"), ("gcp", "L4"), ("gcp", "A100"), ("gcp", "H100"),
    ("runpod", "RTX 3090"), ("runpod", "RTX 4090"), ("runpod", "A100-80GB"),
    ("runpod", "H100"),
    ("autodl", "V100"), ("autodl", "RTX 3090"), ("autodl", "RTX 4090"), ("autodl", "A100"),
]


def test_packaged_catalogue_parses(cat):
    assert len(cat) >= 20
    assert all(isinstance(o, Offer) for o in cat.offers.values())
    assert catalog_mod.SCHEMA_VERSION == 2


@pytest.mark.parametrize("provider, gpu", REQUIRED, ids=lambda v: str(v))
def test_packaged_catalogue_covers(cat, provider, gpu):
    hits = [o for o in cat.offers.values()
            if o.provider == provider and gpu.lower() in o.gpu_model.lower()]
    assert hits, f"no {provider} {gpu} row"
    # Every required offer has a price one can rent at.
    assert all(o.on_demand_per_hour or o.spot_per_hour for o in hits)


def test_packaged_autodl_prices_in_cny_per_second(cat):
    rows = [o for o in cat.offers.values() if o.provider == "autodl"]
    assert rows
    assert {o.currency for o in rows} == {"CNY"}
    assert {o.billing_granularity_s for o in rows} == {1}
    v100 = cat.lookup("autodl:v100-32gb")
    assert v100.on_demand_per_hour == pytest.approx(22.0)
    assert v100.spot_per_hour == pytest.approx(9.0)


def test_packaged_reference_prices(cat):
    p3 = cat.lookup("aws:p3.2xlarge")
    assert (p3.gpu_model, p3.gpu_count, p3.on_demand_per_hour) == ("V100", 1, 3.06)
    assert 0.92 <= p3.spot_per_hour <= 0.97
    assert cat.lookup("gcp:nvidia-tesla-t4").on_demand_per_hour == pytest.approx(0.35)
    assert cat.lookup("gcp:nvidia-h100-80gb").spot_per_hour == pytest.approx(2.25)
    assert cat.lookup("runpod:rtx-4090").on_demand_per_hour == pytest.approx(0.60)


def test_packaged_local_rows(cat):
    cpu = cat.lookup("local-cpu")
    gpu = cat.lookup("local-gpu")
    assert cpu.key == "local:local-cpu" and gpu.key == "local:local-gpu"
    assert cpu.gpu_count == 0 and cpu.gpu_model == ""
    assert gpu.gpu_count >= 1
    assert cpu.on_demand_per_hour > 0 and gpu.on_demand_per_hour > 0


def test_every_packaged_row_is_well_formed(cat):
    for offer in cat.offers.values():
        where = offer.key
        assert offer.source.strip(), where
        assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", offer.snapshot_date), where
        assert re.fullmatch(r"[A-Z]{3}", offer.currency), where
        assert offer.on_demand_per_hour is not None or offer.spot_per_hour is not None, where
        for price in (offer.on_demand_per_hour, offer.spot_per_hour):
            assert price is None or price > 0, where
        assert offer.billing_granularity_s >= 1, where
        assert offer.min_billing_s >= 0, where
        assert offer.interruption_band in catalog_mod.BANDS, where
        assert offer.gpu_count >= 0, where
        if offer.gpu_count:
            assert offer.gpu_model, where


# ---------------------------------------------------------------------------------------
# lookup


def test_lookup_by_key_and_by_unique_instance(cat):
    by_key = cat.lookup("aws:p3.2xlarge")
    by_name = cat.lookup("p3.2xlarge")
    assert by_key is by_name
    assert by_key.provider == "aws" and by_key.instance == "p3.2xlarge"


def test_lookup_ambiguous_name_lists_keys(cat):
    with pytest.raises(ConfigError) as info:
        cat.lookup("rtx-4090")
    err = info.value
    assert err.field == "pricing.instance"
    assert "ambiguous" in str(err)
    assert "autodl:rtx-4090" in str(err) and "runpod:rtx-4090" in str(err)
    # The full key resolves the ambiguity.
    assert cat.lookup("autodl:rtx-4090").currency == "CNY"


def test_lookup_unknown_instance_suggests_close_matches(cat):
    with pytest.raises(ConfigError) as info:
        cat.lookup("p3.2xlarg")
    err = info.value
    assert err.exit_code == EXIT_CONFIG
    assert err.field == "pricing.instance"
    assert err.value == "p3.2xlarg"
    text = str(err)
    assert text.startswith("pricing.instance:")
    assert "'p3.2xlarg'" in text
    assert "did you mean" in text
    assert "aws:p3.2xlarge" in text or "p3.2xlarge," in text or "p3.2xlarge?" in text


def test_lookup_unknown_without_close_match_points_at_the_listing(cat):
    with pytest.raises(ConfigError) as info:
        cat.lookup("zzzzzzzzzzzz", field="x.instance")
    assert info.value.field == "x.instance"
    assert "python -m hpsearch catalog" in str(info.value)


def test_lookup_suggestions_are_distinct_and_resolvable(cat):
    # Instance names shared by two providers (rtx-3090 at runpod and autodl) must not be
    # suggested twice, nor as bare names that lookup would then reject as ambiguous.
    with pytest.raises(ConfigError) as info:
        cat.lookup("rtx-309")
    suggested = str(info.value).split("did you mean ", 1)[1].split("?", 1)[0].split(", ")
    assert len(suggested) == len(set(suggested)), suggested
    for name in suggested:
        cat.lookup(name)  # raises if a suggestion is itself ambiguous


# ---------------------------------------------------------------------------------------
# prices


def test_price_per_hour_on_demand_and_spot(cat):
    p3 = cat.lookup("aws:p3.2xlarge")
    assert p3.price_per_hour(spot=False) == pytest.approx(3.06)
    assert p3.price_per_hour(spot=True) == pytest.approx(0.95)


def test_price_per_hour_missing_spot_is_an_error(cat):
    with pytest.raises(ConfigError) as info:
        cat.lookup("local-cpu").price_per_hour(spot=True)
    assert info.value.field == "pricing.spot"
    assert "local:local-cpu" in str(info.value) and "spot" in str(info.value)


def test_price_per_hour_missing_on_demand_is_an_error():
    offer = parse_catalog(HEADER + "\n" + row(on_demand_per_hour="") + "\n",
                          "mine.csv").lookup("acme:box-1")
    with pytest.raises(ConfigError) as info:
        offer.price_per_hour(spot=False)
    assert "on-demand" in str(info.value) and "acme:box-1" in str(info.value)
    assert offer.price_per_hour(spot=True) > 0


@pytest.mark.parametrize("key", ["autodl:rtx-3090", "autodl:rtx-4090", "autodl:a100-80gb"])
def test_packaged_cny_market_rows_have_an_on_demand_price_saying_where_it_is_from(cat, key):
    offer = cat.lookup(key)
    assert offer.on_demand_per_hour > offer.spot_per_hour > 0
    assert "on-demand ESTIMATED" in offer.source and offer.snapshot_date


def test_packaged_interruption_bands_are_the_advisors_or_say_unknown(cat):
    aws = {o.key: o.interruption_band for o in cat.offers.values() if o.provider == "aws"}
    assert aws == {"aws:p3.2xlarge": ">20%", "aws:g4dn.xlarge": "15-20%",
                   "aws:g5.xlarge": ">20%", "aws:p4d.24xlarge": "10-15%",
                   "aws:p5.48xlarge": ">20%"}
    for offer in cat.offers.values():
        if offer.provider in ("gcp", "runpod", "autodl"):
            assert offer.interruption_band == "unknown" and offer.band == "unknown"
        if offer.provider == "local":
            assert offer.band == "n/a"


def test_gpu_only_rows_are_marked_and_carry_their_vm_where_known(cat):
    gcp = [o for o in cat.offers.values() if o.provider == "gcp"]
    assert gcp and all(o.gpu_only for o in gcp)
    assert not any(o.gpu_only for o in cat.offers.values() if o.provider != "gcp")
    t4 = cat.lookup("gcp:nvidia-tesla-t4")
    assert (t4.vm_on_demand_per_hour, t4.vm_spot_per_hour) == (0.19, 0.04)
    assert t4.instance_price_per_hour(False) == pytest.approx(0.35 + 0.19)
    assert t4.instance_price_per_hour(True) == pytest.approx(0.14 + 0.04)
    l4 = cat.lookup("gcp:nvidia-l4")
    assert l4.vm_per_hour(False) is None  # extra, and not in the catalogue
    assert l4.instance_price_per_hour(False) == pytest.approx(0.56)
    assert cat.lookup("aws:p3.2xlarge").vm_per_hour(True) == 0.0


def test_a_schema_1_csv_reads_as_whole_instances_and_a_vm_price_needs_priced_gpu(tmp_path):
    offer = parse_catalog(HEADER + "\n" + row() + "\n", "old.csv").lookup("acme:box-1")
    assert not offer.gpu_only and offer.vm_per_hour(False) == 0.0
    extra = HEADER + ",priced,vm_on_demand_per_hour,vm_spot_per_hour\n"
    gpu = parse_catalog(extra + row() + ",gpu,0.2,\n", "new.csv").lookup("acme:box-1")
    assert gpu.gpu_only and gpu.vm_per_hour(False) == 0.2 and gpu.vm_per_hour(True) is None
    with pytest.raises(ConfigError) as info:
        parse_catalog(extra + row() + ",instance,0.2,\n", "new.csv")
    assert "priced: gpu" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_catalog(extra + row() + ",vm,,\n", "new.csv")
    assert "column priced" in str(info.value)


# ---------------------------------------------------------------------------------------
# search


def _prices(offers, spot=False):
    return [o.spot_per_hour if spot else o.on_demand_per_hour for o in offers]


def test_search_sorted_by_price_within_a_currency(cat):
    for currency in ("USD", "CNY"):
        offers = cat.search(currency=currency)
        assert len(offers) >= 2
        prices = _prices(offers)
        assert prices == sorted(prices)
        assert {o.currency for o in offers} == {currency}


def test_search_without_filters_lists_every_on_demand_offer(cat):
    offers = cat.search()
    expected = {o.key for o in cat.offers.values() if o.on_demand_per_hour is not None}
    assert {o.key for o in offers} == expected
    # Every packaged rentable row has an on-demand price (estimated where unpublished).
    assert "autodl:rtx-3090" in {o.key for o in offers}


@pytest.mark.parametrize("query", ["a100", "A100", "a 100"])
def test_search_gpu_filter_case_and_space_insensitive(cat, query):
    offers = cat.search(gpu=query)
    assert offers
    assert all("A100" in o.gpu_model for o in offers)
    keys = {o.key for o in offers}
    assert {"aws:p4d.24xlarge", "gcp:nvidia-tesla-a100", "runpod:a100-80gb"} <= keys


def test_search_gpu_filter_ignores_spaces(cat):
    offers = cat.search(gpu="rtx4090")
    keys = {o.key for o in offers}
    assert "runpod:rtx-4090" in keys and "local:local-gpu" in keys
    assert all(o.gpu_model.replace(" ", "") == "RTX4090" for o in offers)
    assert {o.key for o in cat.search(gpu="RTX 4090")} == keys


def test_search_spot_ranks_by_spot_price_and_drops_rows_without_one(cat):
    offers = cat.search(spot=True)
    assert offers
    assert all(o.spot_per_hour is not None for o in offers)
    keys = {o.key for o in offers}
    assert "local:local-cpu" not in keys and "local:local-gpu" not in keys
    assert "autodl:rtx-3090" in keys  # spot-only row is in a spot listing
    usd = [o for o in offers if o.currency == "USD"]
    assert _prices(usd, spot=True) == sorted(_prices(usd, spot=True))
    # Ranking by spot differs from ranking by on-demand (p3 is cheap on spot).
    assert _prices(usd, spot=True) != _prices(usd)


def test_search_max_price_is_inclusive_and_uses_the_ranked_price(cat):
    offers = cat.search(max_price=0.56, currency="USD")
    assert offers
    assert all(o.on_demand_per_hour <= 0.56 for o in offers)
    assert "gcp:nvidia-l4" in {o.key for o in offers}  # exactly 0.56
    assert "aws:g5.xlarge" not in {o.key for o in offers}
    spot = cat.search(max_price=1.0, spot=True, currency="USD")
    assert "aws:p3.2xlarge" in {o.key for o in spot}  # 0.95 spot, 3.06 on demand


def test_search_currency_filter(cat):
    cny = cat.search(currency="CNY", spot=True)
    assert {o.provider for o in cny} == {"autodl"}
    assert all(o.currency == "CNY" for o in cny)
    assert cat.search(currency="EUR") == []


def test_search_currency_filter_case_insensitive(cat):
    # Currencies are upper-cased when parsed (and in the config); the filter should be
    # case-insensitive like the GPU filter (`hpsearch catalog --currency cny`).
    assert cat.search(currency="cny") == cat.search(currency="CNY") != []


# ---------------------------------------------------------------------------------------
# User CSVs


def test_user_csv_extends_and_overrides(tmp_path):
    path = write_csv(
        tmp_path,
        HEADER,
        row(provider="acme", instance="box-1"),
        row(provider="aws", instance="p3.2xlarge", on_demand_per_hour="2.5",
            spot_per_hour=""),
    )
    base = packaged()
    merged = load(path)
    assert len(merged) == len(base) + 1
    new = merged.lookup("acme:box-1")
    assert new.on_demand_per_hour == 1.5 and new.spot_per_hour == 0.5
    assert new.interruption_band == "<5%" and new.min_billing_s == 60
    p3 = merged.lookup("aws:p3.2xlarge")
    assert p3.on_demand_per_hour == 2.5 and p3.spot_per_hour is None
    # The packaged catalogue itself is untouched.
    assert packaged().lookup("aws:p3.2xlarge").on_demand_per_hour == 3.06


def test_load_without_user_path_is_the_packaged_catalogue():
    assert load(None).offers == packaged().offers


def test_user_csv_comment_lines_are_skipped(tmp_path):
    path = write_csv(tmp_path, "# my prices", HEADER, "# a comment between rows",
                     row(instance="box-2"), "   # indented comment")
    assert load(path).lookup("acme:box-2").gpu_model == "V100"


def test_user_csv_lowercase_currency_is_normalised(tmp_path):
    path = write_csv(tmp_path, HEADER, row(currency="eur"))
    assert load(path).lookup("acme:box-1").currency == "EUR"


def test_user_csv_missing_column(tmp_path):
    header = ",".join(c for c in COLUMNS if c != "spot_per_hour")
    values = row().split(",")
    del values[COLUMNS.index("spot_per_hour")]
    path = write_csv(tmp_path, header, ",".join(values))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(path) in str(info.value)
    assert "spot_per_hour" in str(info.value)


#: Bad rows, each on line 3 of the file (the header is line 1, a good row line 2).
BAD_ROWS = [
    ("non_numeric_price", row(on_demand_per_hour="cheap"), "on_demand_per_hour"),
    ("nan_price", row(spot_per_hour="nan"), "spot_per_hour"),
    ("negative_price", row(on_demand_per_hour="-1"), "on_demand_per_hour"),
    ("zero_on_demand", row(on_demand_per_hour="0"), "on_demand_per_hour"),
    ("zero_spot", row(spot_per_hour="0.0"), "spot_per_hour"),
    ("both_prices_empty", row(on_demand_per_hour="", spot_per_hour=""), "on_demand_per_hour"),
    ("bad_currency_length", row(currency="US"), "currency"),
    ("bad_currency_digits", row(currency="US1"), "currency"),
    ("bad_band", row(interruption_band="3%"), "interruption_band"),
    ("zero_granularity", row(billing_granularity_s="0"), "billing_granularity_s"),
    ("missing_granularity", row(billing_granularity_s=""), "billing_granularity_s"),
    ("fractional_gpu_count", row(gpu_count="1.5"), "gpu_count"),
    ("missing_instance", row(instance=""), "instance"),
]


@pytest.mark.parametrize("bad, column", [b[1:] for b in BAD_ROWS], ids=[b[0] for b in BAD_ROWS])
def test_user_csv_bad_row_names_file_line_and_column(tmp_path, bad, column):
    path = write_csv(tmp_path, HEADER, row(instance="good"), bad)
    with pytest.raises(ConfigError) as info:
        load(path)
    err = info.value
    assert err.field == f"{path}:3"
    assert column in str(err)
    assert err.exit_code == EXIT_CONFIG


def test_user_csv_short_row_names_file_and_line(tmp_path):
    # A row with fewer fields than the header (a truncated line, a missing comma) is a
    # ConfigError naming the line, not an AttributeError on the missing cells.
    path = write_csv(tmp_path, HEADER, row(instance="good"), "acme,box-2,V100,1")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.field == f"{path}:3"


def test_user_csv_line_numbers_count_comment_lines(tmp_path):
    # The bad row is on physical line 4 of the file; the comments above it count.
    path = write_csv(tmp_path, "# my prices", "# second comment", HEADER,
                     row(currency="XX"))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.field == f"{path}:4"


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_user_csv(tmp_path, kind):
    path = tmp_path / "nope.csv" if kind == "missing" else tmp_path
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.field == "pricing.catalog"
    assert str(path) in str(info.value)


def test_parse_catalog_names_origin():
    with pytest.raises(ConfigError) as info:
        parse_catalog(HEADER + "\n" + row(interruption_band="often") + "\n", "mine.csv")
    assert info.value.field == "mine.csv:2"
    assert "'often'" in str(info.value)


# ---------------------------------------------------------------------------------------
# Offer.share


def test_share_gpu_trial_pays_its_gpus(cat):
    assert cat.lookup("aws:p3.2xlarge").share(cpu=1, gpu=0.5) == pytest.approx(0.5)
    assert cat.lookup("aws:p3.2xlarge").share(cpu=1, gpu=1) == pytest.approx(1.0)
    assert cat.lookup("aws:p4d.24xlarge").share(cpu=4, gpu=1) == pytest.approx(1 / 8)
    assert cat.lookup("aws:p4d.24xlarge").share(cpu=4, gpu=2) == pytest.approx(2 / 8)


def test_share_cpu_trial_pays_its_vcpus(cat):
    p3 = cat.lookup("aws:p3.2xlarge")  # 8 vCPUs
    assert p3.share(cpu=2, gpu=0) == pytest.approx(0.25)
    assert p3.share(cpu=2, gpu=0, node_cpus=100) == pytest.approx(0.25)  # vcpus win


def test_share_local_rows_use_node_cpus(cat):
    local = cat.lookup("local-cpu")
    assert local.share(cpu=1, gpu=0, node_cpus=4) == pytest.approx(0.25)
    assert local.share(cpu=0.5, gpu=0, node_cpus=16) == pytest.approx(1 / 32)


def test_share_is_capped_at_one(cat):
    assert cat.lookup("aws:p3.2xlarge").share(cpu=1, gpu=2) == 1.0
    assert cat.lookup("local-cpu").share(cpu=8, gpu=0, node_cpus=4) == 1.0
    assert cat.lookup("aws:g4dn.xlarge").share(cpu=64, gpu=0) == 1.0


def test_share_gpu_trial_on_cpu_only_row_is_an_error(cat):
    with pytest.raises(ConfigError) as info:
        cat.lookup("local-cpu").share(cpu=1, gpu=1, node_cpus=4)
    assert info.value.field == "resources.gpu"
    assert "no GPU" in str(info.value)


def test_share_cpu_trial_on_gpu_only_row_is_an_error(cat):
    l4 = cat.lookup("gcp:nvidia-l4")
    assert l4.vcpus is None
    with pytest.raises(ConfigError) as info:
        l4.share(cpu=1, gpu=0)
    assert info.value.field == "pricing.instance"
    assert "gcp:nvidia-l4" in str(info.value)


def test_share_local_row_without_node_cpus_is_an_error(cat):
    with pytest.raises(ConfigError):
        cat.lookup("local-cpu").share(cpu=1, gpu=0)
