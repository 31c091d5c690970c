"""Unit tests of hpsearch.money.pricing.resolve: the run's price of a trial-hour.

Pure: no Ray, torch, Lightning or Optuna is needed (nor imported) here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hpsearch.spec import config
from hpsearch.money.catalog import COLUMNS, packaged
from hpsearch.errors import ConfigError
from hpsearch.money.pricing import Price, default_instance, resolve

BASE: dict[str, Any] = {
    "name": "demo",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 10,
    "space": {"lr": {"type": "float", "low": 1.0e-4, "high": 0.1, "log": True}},
}


def make(pricing: dict | None = None, resources: dict | None = None) -> config.Config:
    raw = copy.deepcopy(BASE)
    if pricing is not None:
        raw["pricing"] = pricing
    if resources is not None:
        raw["resources"] = resources
    return config.load(raw)


CAT = packaged()


def test_default_instance_is_local_cpu_without_gpus():
    cfg = make()
    assert default_instance(cfg) == "local-cpu"
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert price.instance == "local:local-cpu"
    assert price.currency == "USD"
    assert price.spot is False
    assert price.share == pytest.approx(0.25)
    assert price.instance_per_hour == pytest.approx(0.07)
    assert price.per_hour == pytest.approx(0.07 / 4)


def test_default_instance_is_local_gpu_with_gpus():
    cfg = make(resources={"cpu": 2, "gpu": 0.5})
    assert default_instance(cfg) == "local-gpu"
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert price.instance == "local:local-gpu"
    assert price.share == pytest.approx(0.5)
    assert price.per_hour == pytest.approx(0.17 * 0.5)


def test_per_hour_is_instance_price_times_share():
    cfg = make({"instance": "p4d.24xlarge"}, {"cpu": 4, "gpu": 2})
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert price.instance == "aws:p4d.24xlarge"
    assert price.share == pytest.approx(2 / 8)
    assert price.instance_per_hour == pytest.approx(32.77)
    assert price.per_hour == pytest.approx(32.77 / 4)
    assert price.billing_granularity_s == 1 and price.min_billing_s == 60
    assert price.per_second == pytest.approx(price.per_hour / 3600)


def test_cpu_trial_on_a_gpu_row_with_vcpus_pays_its_vcpus():
    price = resolve(make({"instance": "aws:p3.2xlarge"}, {"cpu": 2}), node_cpus=64,
                    catalog=CAT)
    assert price.share == pytest.approx(2 / 8)
    assert price.per_hour == pytest.approx(3.06 / 4)


def test_spot_uses_the_spot_price():
    cfg = make({"instance": "aws:p3.2xlarge", "spot": True}, {"gpu": 1})
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert price.spot is True
    assert price.instance_per_hour == pytest.approx(0.95)
    assert price.per_hour == pytest.approx(0.95)


def test_spot_cny_row_keeps_its_currency_and_per_second_billing():
    cfg = make({"instance": "autodl:v100-32gb", "spot": True}, {"gpu": 1})
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert (price.currency, price.per_hour) == ("CNY", 9.0)
    assert (price.billing_granularity_s, price.min_billing_s) == (1, 1)


def test_spot_without_a_spot_price_is_an_error():
    with pytest.raises(ConfigError) as info:
        resolve(make({"spot": True}), node_cpus=4, catalog=CAT)
    assert info.value.field == "pricing.spot"


def test_on_demand_without_an_on_demand_price_is_an_error():
    from hpsearch.money.catalog import Catalog, Offer

    spot_only = Catalog([Offer("acme", "box", "V100", 1, 16, 8, "", "USD", None, 1.0, "",
                               1, 0, "test", "2026-11")])
    with pytest.raises(ConfigError) as info:
        resolve(make({"instance": "acme:box"}, {"gpu": 1}), node_cpus=4, catalog=spot_only)
    assert "on-demand" in str(info.value)


def test_a_gpu_only_row_is_priced_with_its_vm_or_says_the_vm_is_not_counted():
    t4 = resolve(make({"instance": "gcp:nvidia-tesla-t4"}, {"gpu": 1}), node_cpus=4,
                 catalog=CAT)
    assert t4.instance_per_hour == pytest.approx(0.35 + 0.19)
    assert "VM" in t4.note and "0.19" in t4.note
    l4 = resolve(make({"instance": "gcp:nvidia-l4", "spot": True}, {"gpu": 1}),
                 node_cpus=4, catalog=CAT)
    assert l4.instance_per_hour == pytest.approx(0.22)
    assert "not counted" in l4.note


def test_explicit_price_is_custom_with_share_one():
    cfg = make({"price_per_hour": 2.5, "currency": "eur"}, {"cpu": 1, "gpu": 0.25})
    price = resolve(cfg, node_cpus=4, catalog=CAT)
    assert price == Price(per_hour=2.5, currency="EUR", instance="custom", spot=False,
                          instance_per_hour=2.5, share=1.0)
    assert price.to_dict()["instance"] == "custom"


def test_unknown_instance_names_the_field():
    with pytest.raises(ConfigError) as info:
        resolve(make({"instance": "p3.2xlarg"}), node_cpus=4, catalog=CAT)
    assert info.value.field == "pricing.instance"
    assert "p3.2xlarge" in str(info.value)


@pytest.mark.parametrize(
    "pricing, field",
    [
        ({"price_per_hour": 1.0}, "pricing.currency"),
        ({"price_per_hour": 1.0, "currency": "USD", "instance": "local-cpu"},
         "pricing.price_per_hour"),
        ({"price_per_hour": 1.0, "currency": "USD", "spot": True}, "pricing.spot"),
        ({"price_per_hour": 0}, "pricing.price_per_hour"),
        ({"currency": "dollars"}, "pricing.currency"),
    ],
    ids=["no_currency", "with_instance", "spot_with_price", "zero_price", "bad_currency"],
)
def test_config_validation_errors(pricing, field):
    with pytest.raises(ConfigError) as info:
        make(pricing)
    assert info.value.field == field


def test_currency_must_match_the_row():
    cfg = make({"instance": "autodl:v100-32gb", "currency": "USD"}, {"gpu": 1})
    with pytest.raises(ConfigError) as info:
        resolve(cfg, node_cpus=4, catalog=CAT)
    assert info.value.field == "pricing.currency"
    assert "CNY" in str(info.value) and "USD" in str(info.value)


def test_matching_currency_is_accepted():
    cfg = make({"instance": "autodl:v100-32gb", "currency": "cny"}, {"gpu": 1})
    assert resolve(cfg, node_cpus=4, catalog=CAT).currency == "CNY"


def test_user_catalog_is_honoured(tmp_path):
    path = tmp_path / "mine.csv"
    values = {c: "" for c in COLUMNS}
    values.update(provider="lab", instance="a6000", gpu_model="RTX A6000", gpu_count="2",
                  currency="EUR", on_demand_per_hour="1.2", billing_granularity_s="60",
                  min_billing_s="600", source="our invoice", snapshot_date="2026-10")
    override = dict(values, provider="local", instance="local-cpu", gpu_model="",
                    gpu_count="0", currency="USD", on_demand_per_hour="0.5",
                    billing_granularity_s="1", min_billing_s="0")
    path.write_text(",".join(COLUMNS) + "\n" + ",".join(values[c] for c in COLUMNS) + "\n"
                    + ",".join(override[c] for c in COLUMNS) + "\n", encoding="utf-8")
    price = resolve(make({"instance": "a6000", "catalog": str(path)}, {"gpu": 1}),
                    node_cpus=4)
    assert price.instance == "lab:a6000"
    assert (price.currency, price.share, price.per_hour) == ("EUR", 0.5, 0.6)
    assert (price.billing_granularity_s, price.min_billing_s) == (60, 600)
    overridden = resolve(make({"catalog": str(path)}), node_cpus=2)
    assert overridden.instance_per_hour == 0.5
    assert overridden.per_hour == pytest.approx(0.25)


def test_unreadable_user_catalog(tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve(make({"catalog": str(tmp_path / "missing.csv")}), node_cpus=4)
    assert info.value.field == "pricing.catalog"


def test_node_cpus_defaults_to_this_machine(monkeypatch):
    monkeypatch.setattr("hpsearch.money.pricing.os.cpu_count", lambda: 8)
    price = resolve(make(resources={"cpu": 2}), catalog=CAT)
    assert price.share == pytest.approx(0.25)


def test_cpu_trial_on_a_gpu_only_row_is_an_error():
    # gcp GPU rows are priced per GPU (no vCPUs): a trial reserving no GPU cannot be
    # priced as a share of them. resolve always fills node_cpus in, and Offer.share then
    # silently bills cpu/node_cpus of a GPU price instead of raising.
    cfg = make({"instance": "gcp:nvidia-l4"}, {"cpu": 1, "gpu": 0})
    with pytest.raises(ConfigError) as info:
        resolve(cfg, node_cpus=4, catalog=CAT)
    assert info.value.field in ("pricing.instance", "resources.gpu")
