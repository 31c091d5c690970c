"""Unit tests of hpsearch.tools.plan and its parts: the representative configuration,
the memory arithmetic, GPU fit, time per epoch, billing and the cost table.

Pure: hand-made probe figures and a small hand-made catalogue; no Ray, torch, Lightning
or Optuna is needed here (the real CPU probe is tested in test_plan_probe.py).
"""

from __future__ import annotations

import json
import math

import pytest

from hpsearch.money import nodekinds
from hpsearch.money.catalog import COLUMNS, parse_catalog
from hpsearch.spec.config import load
from hpsearch.errors import ConfigError
from hpsearch.adapters.trial.probe import ProbeFigures
from hpsearch.tools.plan import make_plan
from hpsearch.tools.plan_json import to_json
from hpsearch.tools.plan_memory import CUDA_CONTEXT_MIB, GIB, HEADROOM, MIB, estimate_memory
from hpsearch.tools.plan_offers import Packing, billed_s, pack
from hpsearch.tools.plan_point import representative_params
from hpsearch.tools.plan_speed import (
    GPU_EFFICIENCY, GPU_SPEEDS, STARTUP_S, TRAIN_STEP_FLOOR_S, VAL_STEP_FLOOR_S, Throughput,
    gpu_epoch_s, parse_throughput,
)
from hpsearch.tools.plan_text import render
from hpsearch.report.progress import text_table
from hpsearch.spec.space import CategoricalParam, FloatParam, IntParam, Space

# ---------------------------------------------------------------------------------------
# Fixtures: a catalogue, a config, probe figures.


def row(**over: str) -> str:
    values = {
        "provider": "acme", "instance": "box", "gpu_model": "T4", "gpu_count": "1",
        "gpu_memory_gb": "16", "vcpus": "8", "region": "", "currency": "USD",
        "on_demand_per_hour": "1.0", "spot_per_hour": "0.3", "interruption_band": "",
        "billing_granularity_s": "1", "min_billing_s": "60", "source": "test",
        "snapshot_date": "2026-11",
    }
    values.update(over)
    return ",".join(values[c] for c in COLUMNS)


def catalogue(*rows: str):
    return parse_catalog("\n".join([",".join(COLUMNS), *rows]) + "\n", "test.csv")


ROWS = [
    row(instance="small"),                                            # T4 16 GB, 1.0 / 0.3
    row(instance="big", gpu_model="A100-80GB", gpu_memory_gb="80",
        on_demand_per_hour="4.0", spot_per_hour="1.5"),
    row(instance="tiny", gpu_memory_gb="0.5", on_demand_per_hour="0.1",
        spot_per_hour="0.05"),                                       # too small
    row(instance="multi", gpu_model="A100-40GB", gpu_count="8", gpu_memory_gb="40",
        vcpus="96", on_demand_per_hour="32", spot_per_hour="12"),
    row(provider="cn", instance="v100", gpu_model="V100", gpu_memory_gb="32",
        currency="CNY", on_demand_per_hour="22", spot_per_hour="9", min_billing_s="1"),
    row(provider="local", instance="local-cpu", gpu_model="", gpu_count="0",
        gpu_memory_gb="", vcpus="", on_demand_per_hour="0.07", spot_per_hour="",
        min_billing_s="1"),
    row(provider="local", instance="local-gpu", gpu_model="RTX 4090", gpu_memory_gb="24",
        vcpus="", on_demand_per_hour="0.17", spot_per_hour="", min_billing_s="1"),
]


@pytest.fixture
def cat():
    return catalogue(*ROWS)


def config(**over):
    raw = {
        "name": "plan-test",
        "trainable": "nosuch.module:build",  # validation does not import it
        "objective": {"metric": "val_acc", "mode": "max"},
        "max_epochs": 5,
        "space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "search": {"n_trials": 10},
        "resources": {"cpu": 1, "gpu": 1},
        "preemption": {"rate_per_hour": 0.0},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            raw[section] = {**raw.get(section, {}), name: value}
        else:
            raw[section] = value
    return load(raw)


def figures(**over) -> ProbeFigures:
    values = dict(
        params={"lr": 1e-3}, n_params=1_000_000, n_trainable=1_000_000, weight_bytes=4.0,
        optimizer="Adam", optimizer_bytes=8_000_000.0, activations_bytes=2_000_000.0,
        batch_size=100, train_batches=100, val_batches=10, train_samples=10_000,
        train_step_s=1.0, val_step_s=0.5, setup_s=1.0, threads=1, cpu_gflops=100.0,
        precision="fp32", measured_batches=8,
    )
    values.update(over)
    return ProbeFigures(**values)


def rows_by_key(plan):
    return {r.offer.key: r for r in [*plan.rows, *plan.too_small]}


# ---------------------------------------------------------------------------------------
# representative_params


def test_mid_point_of_each_kind():
    space = Space({
        "linear": FloatParam(0.0, 1.0),
        "log": FloatParam(1e-4, 1e-2, log=True),
        "stepped": FloatParam(0.0, 0.5, step=0.05),
        "drifty": FloatParam(0.1, 0.4, step=0.1),     # mid 0.25 is a tie: up to 0.3
        "width": IntParam(16, 256, log=True),          # geometric mean 64
        "odd_log": IntParam(16, 250, log=True),        # sqrt(4000) = 63.2 -> 63
        "tie": IntParam(1, 4),                         # 2.5 -> 3 (ties up)
        "grid": IntParam(8, 64, step=8),               # 36 -> 40 (nearest on the grid)
        "opt": CategoricalParam(("adam", "sgd")),
        "batch": CategoricalParam((32, 64, 128)),
    })
    params = representative_params(space, "mid")
    assert params == {"linear": 0.5, "log": pytest.approx(1e-3), "stepped": 0.25,
                      "drifty": 0.3, "width": 64, "odd_log": 63, "tie": 3, "grid": 40,
                      "opt": "adam", "batch": 32}
    assert params["drifty"] == 0.3  # exactly: no 0.30000000000000004
    assert isinstance(params["width"], int) and isinstance(params["grid"], int)
    assert space.contains(params)


def test_high_point_takes_the_top_and_the_largest_numeric_choice():
    space = Space({
        "lr": FloatParam(1e-4, 1e-2, log=True),
        "width": IntParam(16, 256, log=True),
        "grid": IntParam(8, 64, step=8),
        "batch": CategoricalParam((64, 32, 128)),
        "opt": CategoricalParam(("adam", "sgd")),
        "mixed": CategoricalParam((1, "two")),         # not all numbers: first choice
        "flag": CategoricalParam((False, True)),       # booleans are not sizes
    })
    params = representative_params(space, "high")
    assert params == {"lr": 1e-2, "width": 256, "grid": 64, "batch": 128, "opt": "adam",
                      "mixed": 1, "flag": False}
    assert space.contains(params)


def test_points_stay_on_the_grid_even_when_high_is_off_it():
    # The config loader rejects such steps; the helper must still never leave the grid.
    space = Space({"f": FloatParam(0.0, 1.0, step=0.3), "i": IntParam(0, 10, step=4)})
    assert representative_params(space, "high") == {"f": 0.9, "i": 8}
    assert representative_params(space, "mid") == {"f": 0.6, "i": 4}


def test_unknown_point_names_the_option():
    with pytest.raises(ConfigError) as err:
        representative_params(Space({}), "low")
    assert err.value.field == "--point" and err.value.value == "low"


# ---------------------------------------------------------------------------------------
# Memory


def test_memory_arithmetic():
    m = estimate_memory(1000, 800, 5000)
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, m.ddp_bytes) == (
        4000, 3200, 6400, 0)
    assert m.activations_bytes == 5000
    assert m.training_bytes == 4000 + 3200 + 6400 + 5000
    assert m.cuda_context_bytes == CUDA_CONTEXT_MIB * MIB
    assert m.total_bytes == m.training_bytes + CUDA_CONTEXT_MIB * MIB
    assert m.total_mib == pytest.approx(m.total_bytes / MIB)


def test_memory_variants():
    sgd = estimate_memory(1000, 1000, 0, optimizer_states=1.0)
    assert sgd.optimizer_bytes == 4000
    plain = estimate_memory(1000, 1000, 0, optimizer_states=0.0)
    assert plain.optimizer_bytes == 0
    measured = estimate_memory(1000, 1000, 0, optimizer_bytes=123.0)
    assert measured.optimizer_bytes == 123
    ddp = estimate_memory(1000, 1000, 0, n_gpus=2)
    assert ddp.ddp_bytes == ddp.gradients_bytes == 4000
    half = estimate_memory(1000, 1000, 0, weight_bytes=2.0)
    assert (half.weights_bytes, half.gradients_bytes) == (2000, 2000)
    transient = estimate_memory(1000, 1000, 50, transient_bytes=20)
    assert transient.training_bytes == 4000 + 4000 + 8000 + 50 + 20
    with pytest.raises(ValueError):
        estimate_memory(-1, 0, 0)
    with pytest.raises(ValueError):
        estimate_memory(1, 1, 1, transient_bytes=-1)
    with pytest.raises(ValueError):
        estimate_memory(1, 1, -5)


def test_fits_keeps_headroom_and_the_gpu_fraction():
    limit = 1.0 * GIB * HEADROOM
    exact = estimate_memory(0, 0, limit, cuda_context_mib=0)
    over = estimate_memory(0, 0, limit + 1, cuda_context_mib=0)
    assert exact.fits(1.0) and not over.fits(1.0)
    assert exact.fits(2.0, 0.5) and not exact.fits(1.9, 0.5)
    assert exact.fits(1.0, 3.0)  # a fraction above 1 counts as the whole GPU
    assert not exact.fits(None) and not exact.fits(0)


# ---------------------------------------------------------------------------------------
# Throughput and time per epoch


def test_parse_throughput():
    models = ["T4", "RTX 4090", "A100-80GB", "FOO"]
    assert parse_throughput("1200", models) == Throughput(1200.0)
    assert parse_throughput(" 1200 ", models) == Throughput(1200.0)
    assert parse_throughput("1.5e3@t4", models) == Throughput(1500.0, "T4")
    assert parse_throughput("800@rtx4090", models) == Throughput(800.0, "RTX 4090")


@pytest.mark.parametrize("text, fragment", [
    ("abc", "samples per second"),
    ("", "samples per second"),
    ("0", "> 0"),
    ("-5", "> 0"),
    ("nan", "> 0"),
    ("inf", "> 0"),
    ("1200@", "no GPU model"),
    ("1200@Z9", "unknown GPU model 'Z9'"),
    ("1200@FOO", "no speed figure for FOO"),
])
def test_parse_throughput_errors_name_the_option(text, fragment):
    with pytest.raises(ConfigError) as err:
        parse_throughput(text, ["T4", "FOO"])
    assert err.value.field == "--throughput"
    assert fragment in str(err.value)
    assert f"(got {text!r})" in str(err.value)


def test_epoch_scaled_from_the_cpu_probe():
    p = figures(train_step_s=10.0, val_step_s=5.0)  # slow enough to stay above the floors
    scale = p.cpu_gflops / (GPU_SPEEDS["V100"].fp32_tflops * 1000 * GPU_EFFICIENCY)
    expected = 10.0 * scale * 100 + 5.0 * scale * 10
    epoch, why = gpu_epoch_s(p, "V100", "fp32")
    assert epoch == pytest.approx(expected) and why == ""
    # Two GPUs (DDP) split the epoch; fp16 uses the tensor-core rate.
    assert gpu_epoch_s(p, "V100", "fp32", n_gpus=2)[0] == pytest.approx(expected / 2)
    half = p.cpu_gflops / (GPU_SPEEDS["V100"].half_tflops * 1000 * GPU_EFFICIENCY)
    assert gpu_epoch_s(p, "V100", "fp16")[0] == pytest.approx(
        10.0 * half * 100 + 5.0 * half * 10)


def test_epoch_floors_small_steps():
    p = figures(train_step_s=1e-4, val_step_s=1e-5)
    epoch, _ = gpu_epoch_s(p, "H100", "bf16")
    assert epoch == pytest.approx(TRAIN_STEP_FLOOR_S * 100 + VAL_STEP_FLOOR_S * 10)


@pytest.mark.parametrize("model", ["T4", "V100"])
def test_bf16_is_unsupported_before_ampere(model):
    epoch, why = gpu_epoch_s(figures(), model, "bf16")
    assert epoch is None and why == f"no bf16 on {model}"
    # ... even with a throughput measured elsewhere.
    epoch, why = gpu_epoch_s(figures(), model, "bf16", throughput=Throughput(1000.0))
    assert epoch is None and why == f"no bf16 on {model}"
    assert gpu_epoch_s(figures(), model, "fp16")[0] is not None


def test_epoch_unknown_gpu_or_untimed_probe():
    assert gpu_epoch_s(figures(), "FOO", "fp32") == (None, "no speed figure for FOO")
    untimed = figures(train_step_s=None)
    assert gpu_epoch_s(untimed, "T4", "fp32") == (None, "no training batch was timed")


def test_epoch_from_a_throughput_as_given():
    p = figures()  # 10,000 samples; validation takes 0.5 x 10 / (1.0 x 100) = 5% more
    assert p.val_ratio == pytest.approx(0.05)
    for model in ("T4", "A100-80GB", "FOO"):  # every GPU, even one without a speed figure
        epoch, _ = gpu_epoch_s(p, model, "fp32", throughput=Throughput(1000.0))
        assert epoch == pytest.approx(10.0 * 1.05)
    # The throughput is the trial's: more GPUs do not divide it again.
    epoch, _ = gpu_epoch_s(p, "T4", "fp32", n_gpus=4, throughput=Throughput(1000.0))
    assert epoch == pytest.approx(10.5)
    assert gpu_epoch_s(figures(train_samples=None), "T4", "fp32",
                       throughput=Throughput(1000.0))[0] is None


def test_epoch_from_a_throughput_scaled_from_its_gpu():
    p = figures(val_step_s=None)
    on_t4 = Throughput(1000.0, "T4")
    assert gpu_epoch_s(p, "T4", "fp32", throughput=on_t4)[0] == pytest.approx(10.0)
    ratio = GPU_SPEEDS["A100-40GB"].fp32_tflops / GPU_SPEEDS["T4"].fp32_tflops
    assert gpu_epoch_s(p, "A100-40GB", "fp32", throughput=on_t4)[0] == pytest.approx(
        10.0 / ratio)
    ratio16 = GPU_SPEEDS["A100-40GB"].half_tflops / GPU_SPEEDS["T4"].half_tflops
    assert gpu_epoch_s(p, "A100-40GB", "fp16", throughput=on_t4)[0] == pytest.approx(
        10.0 / ratio16)
    assert gpu_epoch_s(p, "FOO", "fp32", throughput=on_t4) == (
        None, "no speed figure for FOO")


# ---------------------------------------------------------------------------------------
# Billing


@pytest.mark.parametrize("run_s, granularity, minimum, billed", [
    (0.5, 1, 0, 1.0),
    (10.0, 1, 0, 10.0),
    (59.0, 1, 60, 60.0),
    (61.0, 1, 60, 61.0),
    (61.0, 60, 0, 120.0),
    (120.0, 60, 60, 120.0),
    (0.0, 1, 60, 60.0),
])
def test_billed_seconds(run_s, granularity, minimum, billed):
    offer = catalogue(row(billing_granularity_s=str(granularity),
                          min_billing_s=str(minimum))).lookup("acme:box")
    assert billed_s(run_s, offer) == billed


# ---------------------------------------------------------------------------------------
# make_plan


def given(cat, **kwargs):
    """A plan from a throughput without @MODEL: 10 s per epoch everywhere, 5 s start-up."""
    kwargs.setdefault("throughput", Throughput(1000.0))
    probe = kwargs.pop("probe", figures(val_step_s=None))
    cfg = kwargs.pop("cfg", config())
    return make_plan(cfg, cat, probe, **kwargs)


def test_the_search_rents_instances_for_its_waves_and_bills_each_once(cat):
    plan = given(cat)  # 10 trials x (5 s start-up + 5 epochs x 10 s) = 55 s each
    rows = rows_by_key(plan)
    small = rows["acme:small"]
    assert small.trial_s == pytest.approx(STARTUP_S + 1.0 + 50.0) == pytest.approx(55.0)
    # One 1-GPU instance runs the ten trials one after another: rented 550 s.
    assert (small.nodes, small.slots, small.wall_s) == (1, 1, pytest.approx(550.0))
    assert small.billed_s == 550.0 and not small.minimum_billed
    assert small.on_demand_cost == pytest.approx(550 / 3600 * 1.0)
    assert small.spot_cost == pytest.approx(550 / 3600 * 0.3)
    assert small.spot_factor == pytest.approx(1.0)  # preemption.rate_per_hour: 0
    assert small.idle_cost == pytest.approx(0.0)
    v100 = rows["cn:v100"]
    assert v100.on_demand_cost == pytest.approx(550 / 3600 * 22)


def test_a_60_s_minimum_is_billed_once_per_instance_not_per_trial():
    cat = catalogue(row(instance="small"))
    short = given(cat, trials=3, epochs=1, throughput=Throughput(1e6))  # ~6 s trials
    (small,) = short.rows
    assert small.wall_s < 20 and small.billed_s == 60.0 and small.minimum_billed
    assert small.on_demand_cost == pytest.approx(60 / 3600 * 1.0)  # not 3 x 60 s
    assert small.idle_cost == pytest.approx((60 - small.wall_s) / 3600 * 1.0)
    assert pack(3, 1.0, 1.0) == Packing(slots=1, nodes=1, waves=3)


def test_trials_packed_on_an_8_gpu_instance_leave_its_last_wave_idle(cat):
    multi = rows_by_key(given(cat))["acme:multi"]
    # Eight trials at once, then two: rented 2 x 55 s, paid 8 GPUs throughout.
    assert (multi.nodes, multi.slots, multi.wall_s) == (1, 8, pytest.approx(110.0))
    assert multi.share == pytest.approx(1 / 8)
    assert multi.on_demand_cost == pytest.approx(110 / 3600 * 32)
    work = 10 * 55 / 8 / 3600 * 32
    assert multi.idle_cost == pytest.approx(110 / 3600 * 32 - work)
    assert multi.idle_share == pytest.approx(6 / 16)


def test_concurrency_rents_several_instances(cat):
    plan = given(cat, cfg=config(search={"n_trials": 10, "concurrency": 4}))
    small = rows_by_key(plan)["acme:small"]
    # Four 1-GPU instances, three waves (4, 4, 2): 165 s each.
    assert (small.nodes, small.wall_s) == (4, pytest.approx(165.0))
    assert small.on_demand_cost == pytest.approx(4 * 165 / 3600 * 1.0)
    assert small.idle_cost == pytest.approx((4 * 165 - 550) / 3600 * 1.0)
    assert pack(10, 1.0, 8.0, concurrency=4) == Packing(slots=8, nodes=1, waves=3)
    assert pack(10, 0.5, 1.0) == Packing(slots=2, nodes=1, waves=5)


def test_costs_above_the_minimum_and_granularity(cat):
    coarse = catalogue(row(instance="hourly", billing_granularity_s="3600", min_billing_s="0"))
    hourly = given(coarse, epochs=20).rows[0]  # 10 x 205 s = 2050 s: one hour billed
    assert hourly.billed_s == 3600.0 and hourly.minimum_billed
    assert hourly.on_demand_cost == pytest.approx(1.0)


def test_spot_cost_grows_with_the_preemption_rate(cat):
    plan = given(cat, cfg=config(preemption__rate_per_hour=2.0), epochs=100)
    small = rows_by_key(plan)["acme:small"]
    factor = nodekinds.spot_cost_factor(2.0, 10.0 / 2, STARTUP_S + 1.0)
    assert factor > 1 and small.spot_factor == pytest.approx(factor)
    assert small.spot_billed_s == math.ceil(10 * small.trial_s * factor)
    assert small.spot_cost == pytest.approx(small.spot_billed_s / 3600 * 0.3)
    assert small.on_demand_cost == pytest.approx(small.billed_s / 3600 * 1.0)


def test_rows_cheapest_first_usd_first_and_too_small_apart(cat):
    plan = given(cat)
    keys = [r.offer.key for r in plan.rows]
    # USD rows by their cheaper option, then the other currencies; CPU rows never.
    assert keys == ["local:local-gpu", "acme:small", "acme:big", "acme:multi", "cn:v100"]
    assert [r.offer.key for r in plan.too_small] == ["acme:tiny"]
    assert plan.too_small[0].why == "memory" and not plan.too_small[0].fits
    assert all(r.fits for r in plan.rows)


def test_recommendation_is_the_cheapest_rentable_fit_per_currency(cat):
    plan = given(cat)
    recs = plan.recommendations()
    assert set(recs) == {"USD", "CNY"}
    row, cost, kind = recs["USD"]
    # local:local-gpu is cheaper but is a machine one owns: never recommended.
    assert (row.offer.key, kind) == ("acme:small", "spot")
    assert cost == pytest.approx(550 / 3600 * 0.3)
    cheapest = min((r.best[0], r.offer.key) for r in plan.rows
                   if r.offer.currency == "USD" and r.offer.provider != "local")
    assert cheapest == (cost, "acme:small")
    row, cost, kind = recs["CNY"]
    assert (row.offer.key, kind) == ("cn:v100", "spot")


def gpu_only_catalogue():
    extra = ",".join([*COLUMNS, "priced", "vm_on_demand_per_hour", "vm_spot_per_hour"])
    return parse_catalog("\n".join([
        extra,
        row(provider="cloud", instance="gpu-nvm", on_demand_per_hour="0.2",
            spot_per_hour="0.1") + ",gpu,,",
        row(provider="cloud", instance="gpu-vm", on_demand_per_hour="0.25",
            spot_per_hour="0.12") + ",gpu,0.1,0.05",
        row(instance="whole", on_demand_per_hour="0.5", spot_per_hour="0.2") + ",instance,,",
    ]) + "\n", "test.csv")


def test_a_gpu_only_row_is_billed_with_its_vm_or_never_recommended_silently():
    plan = given(gpu_only_catalogue(), trials=1)
    rows = rows_by_key(plan)
    with_vm = rows["cloud:gpu-vm"]
    assert not with_vm.vm_missing
    assert with_vm.spot_cost == pytest.approx(60 / 3600 * (0.12 + 0.05))
    without = rows["cloud:gpu-nvm"]
    assert without.vm_missing and without.spot_cost == pytest.approx(60 / 3600 * 0.1)
    row_, cost, kind = plan.recommendations()["USD"]
    assert row_.offer.key == "cloud:gpu-nvm"  # the cheapest price, VM not counted ...
    text = "\n".join(render(plan, text_table))
    assert ("Recommended (USD): cloud:gpu-nvm (T4) spot, about 0.001667 USD for the search "
            "plus its VM, which is billed on top and not in the catalogue") in text
    # ... so the line after it names the cheapest whole instance, VM included.
    assert "the cheapest whole instance: cloud:gpu-vm (T4) spot" in text
    assert "cloud:gpu-nvm *" in text and "* the GPU's price only" in text
    assert to_json(plan)["rows"][0]["vm_missing"] is True


def test_recommendation_on_demand_without_a_spot_price():
    cat = catalogue(row(instance="od-only", spot_per_hour=""),
                    row(instance="dear", on_demand_per_hour="5", spot_per_hour="2"))
    row_, cost, kind = given(cat).recommendations()["USD"]
    assert (row_.offer.key, kind) == ("acme:od-only", "on-demand")


def test_memory_decides_what_fits():
    cat = catalogue(row(instance="t4"),
                    row(instance="a100", gpu_model="A100-80GB", gpu_memory_gb="80"))
    # 10.5 GiB with the CUDA context: within a T4's 16 GiB x 0.95.
    ten = figures(activations_bytes=10 * GIB)
    plan = given(cat, probe=ten)
    assert sorted(r.offer.key for r in plan.rows) == ["acme:a100", "acme:t4"]
    # Half a GPU per trial: 7.6 GiB usable on a T4 is too little, 38 GiB on an A100 fits.
    half = given(cat, probe=ten, cfg=config(resources={"cpu": 1, "gpu": 0.5}))
    assert [r.offer.key for r in half.rows] == ["acme:a100"]
    t4 = half.too_small[0]
    assert t4.offer.key == "acme:t4" and t4.why == "memory"
    assert t4.available_mib == pytest.approx(16 * 1024 * 0.5 * HEADROOM)
    assert half.rows[0].share == 0.5
    # Two half-GPU trials at once on the one GPU: five waves.
    assert half.rows[0].wall_s == pytest.approx(5 * half.rows[0].trial_s)
    assert half.rows[0].on_demand_cost == pytest.approx(
        math.ceil(half.rows[0].wall_s) / 3600 * 1.0)


def test_several_gpus_per_trial(cat):
    plan = given(cat, cfg=config(resources={"cpu": 1, "gpu": 2}))
    assert [r.offer.key for r in plan.rows] == ["acme:multi"]
    assert rows_by_key(plan)["acme:small"].why == "1 GPU(s), a trial needs 2"
    assert plan.memory.ddp_bytes == plan.memory.gradients_bytes
    assert plan.rows[0].share == pytest.approx(2 / 8)


def test_bf16_rows_on_old_gpus_have_no_time(cat):
    plan = make_plan(config(), cat, figures(), precision="bf16")
    rows = rows_by_key(plan)
    assert rows["acme:small"].fits and rows["acme:small"].epoch_s is None
    assert rows["acme:small"].why == "no bf16 on T4"
    assert rows["cn:v100"].on_demand_cost is None
    assert plan.recommendations()["USD"][0].offer.key in ("acme:big", "acme:multi")
    assert "CNY" not in plan.recommendations()
    with pytest.raises(ConfigError) as err:
        make_plan(config(), cat, figures(), precision="bf16",
                  throughput=Throughput(1000.0, "T4"))
    assert err.value.field == "--throughput"


def test_memory_from_the_probe(cat):
    plan = given(cat, probe=figures(largest_activation_bytes=500_000.0))
    m = plan.memory
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == (
        4_000_000, 4_000_000, 8_000_000)
    assert (m.activations_bytes, m.transient_bytes, m.ddp_bytes) == (2_000_000, 500_000, 0)
    assert m.training_bytes == 18_500_000


def test_optimizer_given_replaces_the_measured_state(cat):
    measured = given(cat)
    assert measured.memory.optimizer_bytes == 8_000_000
    sgd = given(cat, optimizer="sgd")
    assert sgd.memory.optimizer_bytes == 4_000_000
    assert "sgd as given" in sgd.optimizer_note


@pytest.mark.parametrize("kwargs, option", [
    ({"trials": 0}, "--trials"),
    ({"epochs": 0}, "--epochs"),
    ({"precision": "fp8"}, "--precision"),
    ({"optimizer": "lion"}, "--optimizer"),
    ({"currency": "EUR"}, "--currency"),
])
def test_bad_options_name_the_option(cat, kwargs, option):
    with pytest.raises(ConfigError) as err:
        given(cat, **kwargs)
    assert err.value.field == option


def test_currency_filter_and_defaults(cat):
    plan = given(cat, currency="cny")
    assert [r.offer.key for r in plan.rows] == ["cn:v100"]
    assert plan.cpu_row is None  # local-cpu is priced in USD
    assert plan.trials == 10 and plan.epochs == 5
    assert given(cat, trials=3).trials == 3


def test_cpu_reference_row(cat):
    plan = given(cat, node_cpus=4)
    key, cost, currency = plan.cpu_row
    p = figures(val_step_s=None)
    run = STARTUP_S + p.setup_s + 5 * p.cpu_epoch_s  # 505 s on this CPU
    assert (key, currency) == ("local:local-cpu", "USD")
    # Four 1-CPU trials at once on the 4-CPU machine: three waves, the machine billed.
    assert cost == pytest.approx(math.ceil(3 * run) / 3600 * 0.07)


def test_render_and_json(cat):
    plan = given(cat, trials=1, cfg=config(budget={"max_cost": 0.001},
                                           pricing={"instance": "acme:small"}))
    lines = render(plan, text_table)
    text = "\n".join(lines)
    assert "Recommended (USD): acme:small (T4) spot" in text
    assert "Recommended (CNY): cn:v100 (V100) spot" in text
    assert "budget.max_cost 0.001 USD: OVER" in text
    assert "+ billed at least 60 s per instance" in text
    assert "^ a machine you own" in text
    assert "Too small for this trial: acme:tiny" in text
    assert "weights" in text and "activations" in text and "cuda context" in text
    data = json.loads(json.dumps(to_json(plan)))
    assert {"memory", "rows", "recommendation", "trials", "epochs"} <= set(data)
    assert data["memory"]["training_bytes"] == plan.memory.training_bytes
    first = data["rows"][0]
    assert {"instance", "gpu", "fits", "epoch_s", "on_demand_cost", "spot_cost",
            "currency"} <= set(first)
    assert [r["instance"] for r in data["rows"] if not r["fits"]] == ["acme:tiny"]
    assert data["recommendation"]["USD"]["instance"] == "acme:small"
    assert data["recommendation"]["USD"]["kind"] == "spot"


def test_render_when_nothing_fits():
    cat = catalogue(row(instance="tiny", gpu_memory_gb="1"))
    plan = given(cat, probe=figures(activations_bytes=4 * GIB))
    text = "\n".join(render(plan, text_table))
    assert "No catalogue GPU fits this trial." in text
    assert "Recommended" not in text
    assert plan.recommendations() == {}
