"""The GPU inventory (NVML), its sampler, NVML names -> catalogue rows, and
``pricing.instance: auto``.

The no-GPU tests run for real on a machine without an NVIDIA driver (this one and CI;
they are marked to be skipped on a machine with a driver, where they cannot hold). The
real NVML path is checked on a GPU machine by ``bash benchmarks/gpu_check.sh``. Name
matching and ``auto`` run everywhere on the packaged catalogue with real NVML names.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pynvml
import pytest

from hpsearch.money import catalog as catalog_mod
from hpsearch.adapters import nvml
from hpsearch.money import gpu_models
from hpsearch.money import pricing
from hpsearch.spec import config
from hpsearch.errors import ConfigError

from .test_cli_errors import EXAMPLE, hpsearch


def _nvml_library_missing() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return True
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return False


NO_NVML = _nvml_library_missing()
no_driver = pytest.mark.skipif(not NO_NVML, reason="this machine has an NVIDIA driver")

CAT = catalog_mod.load(None)
MODELS = sorted({o.gpu_model for o in CAT.offers.values() if o.gpu_model})


# ---------------------------------------------------------------------------------------
# No GPU, for real.


@no_driver
def test_inventory_without_driver_is_data_not_an_exception():
    inv = nvml.inventory()
    assert inv.available is False
    assert inv.gpus == () and inv.count == 0
    assert inv.models() == {} and inv.main_model() is None
    assert inv.driver_version == "" and inv.cuda_driver_version == ""
    assert inv.message.startswith("NVML library not found")
    assert "no NVIDIA driver" in inv.message and "CPU" in inv.message


@no_driver
def test_detected_gpu_model_is_none_without_driver():
    assert nvml.detected_gpu_model() is None


@no_driver
def test_sampler_without_driver_starts_no_thread_and_returns_none_figures():
    threads_before = {t.name for t in threading.enumerate()}
    sampler = nvml.GpuSampler(interval_s=0.01)
    assert sampler.start() is sampler
    assert sampler.active is False
    assert "NVML library not found" in sampler.message
    assert "hpsearch-gpu-sampler" not in {t.name for t in threading.enumerate()}
    assert {t.name for t in threading.enumerate()} <= threads_before
    figures = sampler.stop()
    assert figures == {
        "util_mean": None, "mem_peak_mib": None, "mem_peak_mib_by_gpu": None,
        "n_samples": 0, "sampled_s": None, "gpu_indices": None,
    }
    # Stopping twice and using it as a context manager are harmless too.
    assert sampler.stop() == figures
    with nvml.GpuSampler(indices=[0]) as again:
        assert again.active is False
    assert again.snapshot()["n_samples"] == 0


@no_driver
def test_visible_uuids_without_driver_are_skipped():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-1b2c3d4e-0000-0000-0000-000000000000,1"}
    assert nvml.visible_indices(env) == [1]


def test_sampler_rejects_a_non_positive_interval():
    with pytest.raises(ValueError, match="interval_s"):
        nvml.GpuSampler(interval_s=0)


def test_inventory_main_model_is_the_most_common_then_the_first():
    def card(index: int, name: str) -> nvml.Gpu:
        return nvml.Gpu(index, name, f"GPU-{index}", 1024.0, 0.0, 1024.0)

    inv = nvml.Inventory(True, (card(0, "Tesla T4"), card(1, "NVIDIA L4"),
                               card(2, "NVIDIA L4")))
    assert inv.models() == {"Tesla T4": 1, "NVIDIA L4": 2}
    assert inv.main_model() == "NVIDIA L4"
    tie = nvml.Inventory(True, (card(0, "Tesla T4"), card(1, "NVIDIA L4")))
    assert tie.main_model() == "Tesla T4"


# ---------------------------------------------------------------------------------------
# NVML errors -> messages.

ERROR_CLASSES = sorted(name for name in dir(pynvml) if name.startswith("NVMLError_"))

SPECIFIC = {
    "NVMLError_LibraryNotFound": ["NVML library not found", "no NVIDIA driver", "CPU"],
    "NVMLError_DriverNotLoaded": ["not loaded", "nvidia-smi", "CPU"],
    "NVMLError_NoPermission": ["no permission", "--gpus all"],
    "NVMLError_LibRmVersionMismatch": ["different versions", "reboot"],
    "NVMLError_GpuIsLost": ["fell off the bus", "reboot"],
    "NVMLError_ResetRequired": ["needs a reset", "nvidia-smi -r"],
    "NVMLError_FunctionNotFound": ["older", "upgrade the driver"],
}


def test_every_pynvml_error_class_is_known_here():
    # A new pynvml release with new classes still gets a message (the generic one).
    assert len(ERROR_CLASSES) >= 20
    assert set(SPECIFIC) <= set(ERROR_CLASSES)


@pytest.mark.parametrize("name", ERROR_CLASSES)
def test_nvml_error_message_for_each_error_class(name):
    cls = getattr(pynvml, name)
    exc = cls()
    assert isinstance(exc, pynvml.NVMLError)
    # The base class maps a code to the same subclass.
    assert type(pynvml.NVMLError(exc.value)) is cls
    message = nvml.nvml_error_message(exc)
    assert message and "\n" not in message
    if name in SPECIFIC:
        for fragment in SPECIFIC[name]:
            assert fragment in message, message
    else:
        kind = name[len("NVMLError_"):]
        assert message.startswith(f"NVML failed ({kind}: "), message
        assert "nvidia-smi" in message


def test_nvml_error_message_of_the_base_class():
    message = nvml.nvml_error_message(pynvml.NVMLError(12345))
    assert message.startswith("NVML failed (error: ")


# ---------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES -> NVML indices.


@pytest.mark.parametrize("value, expected", [
    (None, None),
    ("0,2", [0, 2]),
    ("2,0", [2, 0]),
    (" 0 , 1 ", [0, 1]),
    ("-1", []),
    ("", []),
    ("1,-1,2", [1]),
    ("0,0,1", [0, 1]),
    ("MIG-4c9a0b2e-1111-2222-3333-444444444444", []),
    ("1,MIG-4c9a0b2e-1111-2222-3333-444444444444,2", [1]),
])
def test_visible_indices(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert nvml.visible_indices(env) == expected


def test_visible_indices_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml.visible_indices() == [3, 1]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml.visible_indices() is None


# ---------------------------------------------------------------------------------------
# NVML names -> catalogue models and rows (the packaged catalogue).


@pytest.mark.parametrize("name, memory_mib, model", [
    ("NVIDIA H100 80GB HBM3", None, "H100"),
    ("NVIDIA H100 PCIe", None, "H100"),
    ("Tesla V100-SXM2-16GB", None, "V100"),
    ("Tesla V100-PCIE-32GB", None, "V100"),
    ("NVIDIA GeForce RTX 4090", None, "RTX 4090"),
    ("NVIDIA GeForce RTX 4090 D", None, None),
    ("NVIDIA GeForce RTX 3090", None, "RTX 3090"),
    ("NVIDIA GeForce RTX 3090 Ti", None, None),
    ("NVIDIA A100-SXM4-80GB", None, "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", None, "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", None, "A100-40GB"),
    ("NVIDIA A100-PCIE", 81920, "A100-80GB"),
    ("NVIDIA A100-PCIE", 40960, "A100-40GB"),
    ("NVIDIA A100-PCIE", None, None),  # which A100 is unknown without its memory
    ("NVIDIA A10G", None, "A10G"),
    ("NVIDIA L4", None, "L4"),
    ("NVIDIA L40S", None, None),
    ("Tesla T4", None, "T4"),
    ("NVIDIA H200", None, None),
    ("nvidia geforce rtx 4090", None, "RTX 4090"),
])
def test_catalogue_model(name, memory_mib, model):
    assert gpu_models.catalogue_model(name, MODELS, memory_mib=memory_mib) == model


def test_catalogue_model_prefers_the_memory_specific_model():
    models = ["A100", "A100-80GB"]
    assert gpu_models.catalogue_model("NVIDIA A100-SXM4-80GB", models) == "A100-80GB"
    assert gpu_models.catalogue_model("NVIDIA A100-SXM4-40GB", models) == "A100"
    assert gpu_models.catalogue_model("NVIDIA A10G", models) is None


def _row(name: str, memory_mib: float | None = None, provider: str | None = None):
    return gpu_models.match_catalog_gpu(name, CAT, memory_mib=memory_mib, provider=provider)


@pytest.mark.parametrize("name, memory_mib, model, memory_gb", [
    ("NVIDIA H100 80GB HBM3", None, "H100", 80),
    ("Tesla V100-SXM2-16GB", None, "V100", 16),
    ("Tesla V100-PCIE-32GB", None, "V100", 32),
    ("NVIDIA GeForce RTX 4090", None, "RTX 4090", 24),
    ("NVIDIA A100-SXM4-80GB", None, "A100-80GB", 80),
    ("NVIDIA A100-SXM4-40GB", None, "A100-40GB", 40),
    ("NVIDIA A100-PCIE", 81920, "A100-80GB", 80),
    ("NVIDIA A10G", None, "A10G", 24),
    ("NVIDIA L4", None, "L4", 24),
    ("Tesla T4", None, "T4", 16),
])
def test_match_catalog_gpu(name, memory_mib, model, memory_gb):
    offer = _row(name, memory_mib)
    assert offer is not None
    assert offer.gpu_model == model
    assert offer.gpu_memory_gb == memory_gb


def test_match_catalog_gpu_prefers_the_16gb_v100_row_and_single_gpu_rows():
    assert _row("Tesla V100-SXM2-16GB").key == "aws:p3.2xlarge"
    # H100 rows: an 8-GPU p5 and single-GPU rows; the single-GPU one comes first.
    assert _row("NVIDIA H100 80GB HBM3").gpu_count == 1


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 3090 Ti", "NVIDIA H200",
                                  "NVIDIA A100-PCIE", "Quadro RTX 6000"])
def test_match_catalog_gpu_none_for_models_the_catalogue_lacks(name):
    assert _row(name) is None


def test_match_catalog_gpu_by_provider():
    assert _row("NVIDIA GeForce RTX 4090", provider="local").key == "local:local-gpu"
    assert _row("Tesla V100-SXM2-16GB", provider="local").key == "local:local-gpu-cny"
    assert _row("NVIDIA GeForce RTX 4090", provider="autodl").key == "autodl:rtx-4090"
    assert _row("Tesla T4", provider="local") is None


def test_match_catalog_gpu_by_provider_falls_back_to_a_less_specific_model():
    # A local generic A100 row next to rented A100-80GB rows: the local one is found.
    text = ",".join(catalog_mod.COLUMNS) + "\n" + (
        "local,my-a100,A100,1,80,,,USD,0.9,,,1,1,own box,2026-11\n")
    cat = CAT.merged(catalog_mod.parse_catalog(text, "extra.csv"))
    offer = gpu_models.match_catalog_gpu("NVIDIA A100-SXM4-80GB", cat, provider="local")
    assert offer is not None and offer.key == "local:my-a100"
    assert gpu_models.match_catalog_gpu("NVIDIA A100-SXM4-80GB", cat).gpu_model == "A100-80GB"


# ---------------------------------------------------------------------------------------
# pricing.instance: auto.

BASE: dict[str, Any] = {
    "name": "auto",
    "trainable": "hpsearch.examples.digits:build",
    "objective": {"metric": "val_acc"},
    "max_epochs": 10,
    "space": {"lr": {"type": "float", "low": 1.0e-4, "high": 0.1, "log": True}},
}


def make(pricing_section: dict, resources: dict | None = None) -> config.Config:
    raw = copy.deepcopy(BASE)
    raw["pricing"] = pricing_section
    if resources is not None:
        raw["resources"] = resources
    return config.load(raw)


def test_config_accepts_auto_and_documents_it():
    assert make({"instance": "auto"}).pricing.instance == "auto"
    docs = {key: doc for key, _default, doc in config.reference_keys()}
    assert "`auto`" in docs["pricing.instance"]
    assert "NVML" in docs["pricing.instance"]


def test_auto_instance_without_gpu_is_local_cpu():
    name, note = pricing.auto_instance(None, CAT)
    assert name == "local:local-cpu"
    assert "no GPU detected" in note and "local:local-cpu" in note
    _, note = pricing.auto_instance(None, CAT, detail="NVML library not found")
    assert note.endswith("NVML library not found")


@pytest.mark.parametrize("model, currency, memory_mib, row", [
    ("NVIDIA GeForce RTX 4090", None, None, "local:local-gpu"),
    ("NVIDIA GeForce RTX 4090", "USD", None, "local:local-gpu"),
    ("Tesla V100-SXM2-32GB", "CNY", None, "local:local-gpu-cny"),
    ("Tesla V100-SXM2-16GB", "CNY", None, "local:local-gpu-cny"),
    ("Tesla V100-SXM2-16GB", None, None, "local:local-gpu-cny"),
])
def test_auto_instance_picks_the_local_row_of_the_model(model, currency, memory_mib, row):
    name, note = pricing.auto_instance(model, CAT, currency, memory_mib)
    assert name == row
    assert model in note and row in note and "depreciation row" in note


def test_auto_instance_falls_back_to_local_gpu_naming_the_model():
    name, note = pricing.auto_instance("NVIDIA H200", CAT)
    assert name == "local:local-gpu"
    assert "NVIDIA H200" in note and "no local row" in note and "pricing.catalog" in note


def test_auto_instance_fallback_keeps_the_currency():
    # An RTX 4090 in a CNY run: the RTX 4090 local row is USD, the CNY GPU row is kept.
    name, note = pricing.auto_instance("NVIDIA GeForce RTX 4090", CAT, "CNY")
    assert name == "local:local-gpu-cny"
    assert "no local row" in note


def test_auto_instance_errors_when_no_local_row_has_the_currency():
    with pytest.raises(ConfigError, match="pricing.instance: auto: no GPU detected") as info:
        pricing.auto_instance(None, CAT, "CNY")
    assert "CNY" in str(info.value) and "pricing.catalog" in str(info.value)
    with pytest.raises(ConfigError, match="no local GPU row is priced in EUR"):
        pricing.auto_instance("NVIDIA H200", CAT, "EUR")


def test_resolve_auto_without_gpu_is_local_cpu_with_a_note():
    price = pricing.resolve(make({"instance": "auto"}), node_cpus=4, catalog=CAT,
                            gpu=pricing.NO_GPU)
    assert price.instance == "local:local-cpu"
    assert price.per_hour == pytest.approx(0.07 / 4)
    assert "no GPU detected" in price.note


def test_resolve_auto_with_an_rtx_4090():
    cfg = make({"instance": "auto"}, {"cpu": 2, "gpu": 1})
    price = pricing.resolve(cfg, catalog=CAT, gpu=pricing.DetectedGpu("NVIDIA GeForce RTX 4090"))
    assert price.instance == "local:local-gpu"
    assert price.currency == "USD" and price.per_hour == pytest.approx(0.17)
    assert "NVIDIA GeForce RTX 4090" in price.note


def test_resolve_auto_with_a_v100_in_cny():
    cfg = make({"instance": "auto", "currency": "CNY"}, {"gpu": 1})
    price = pricing.resolve(cfg, catalog=CAT, gpu=pricing.DetectedGpu("Tesla V100-SXM2-32GB"))
    assert price.instance == "local:local-gpu-cny"
    assert price.currency == "CNY" and price.per_hour == pytest.approx(15.0)


def test_resolve_auto_with_an_unknown_model_falls_back_with_a_note():
    cfg = make({"instance": "auto"}, {"gpu": 1})
    price = pricing.resolve(cfg, catalog=CAT, gpu=pricing.DetectedGpu("NVIDIA H200"))
    assert price.instance == "local:local-gpu"
    assert "NVIDIA H200" in price.note and "local:local-gpu" in price.note


def test_resolve_auto_with_gpu_trials_but_no_gpu_is_an_error():
    cfg = make({"instance": "auto"}, {"gpu": 1})
    with pytest.raises(ConfigError, match="pricing.instance: auto prices this machine's GPU"):
        pricing.resolve(cfg, catalog=CAT, gpu=pricing.NO_GPU)


def test_resolve_a_named_instance_has_no_note():
    price = pricing.resolve(make({"instance": "local-cpu"}), node_cpus=2, catalog=CAT)
    assert price.note == ""
    # A node that declares its instance is priced at it, not at the auto row.
    cfg = make({"instance": "auto"}, {"gpu": 1})
    node = pricing.resolve(cfg, catalog=CAT, instance="aws:p3.2xlarge", spot=True,
                           gpu=pricing.DetectedGpu("NVIDIA GeForce RTX 4090"))
    assert node.instance == "aws:p3.2xlarge" and node.note == ""


@no_driver
def test_resolve_auto_detects_no_gpu_here():
    price = pricing.resolve(make({"instance": "auto"}), node_cpus=2, catalog=CAT,
                            gpu=nvml.detected())
    assert price.instance == "local:local-cpu"
    assert "NVML library not found" in price.note


def test_resolve_auto_needs_what_nvml_found():
    # Pricing never talks to the hardware itself: the composition root asks NVML.
    with pytest.raises(ValueError, match="auto"):
        pricing.resolve(make({"instance": "auto"}), node_cpus=2, catalog=CAT)
    assert nvml.for_pricing(make({"instance": "local-cpu"})) is None


@pytest.mark.slow
@no_driver
def test_validate_cli_with_auto_prints_why(tmp_path):
    proc = hpsearch("validate", str(EXAMPLE), "--no-import", "--set",
                    "pricing.instance=auto", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "instance: auto" in proc.stdout
    lines = proc.stderr.splitlines()
    assert "on local:local-cpu" in lines[0]
    assert lines[1].startswith("pricing.instance auto: no GPU detected, so priced as "
                               "local:local-cpu; NVML library not found")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@no_driver
def test_validate_cli_with_auto_and_gpu_trials_fails_cleanly(tmp_path):
    proc = hpsearch("validate", str(EXAMPLE), "--no-import", "--set",
                    "pricing.instance=auto", "--set", "resources.gpu=1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("hpsearch: error: pricing.instance: auto prices")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
