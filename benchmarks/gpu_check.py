"""The real CUDA path, on a machine with an NVIDIA GPU: one prepared check.

    python -m benchmarks.gpu_check [--out DIR] [--trials 4] [--epochs 3]

1. **Inventory**: NVML's GPUs (model, memory, utilisation, driver) and what
   ``pricing.instance: auto`` prices this machine as.
2. **Sampler**: :class:`hpsearch.adapters.nvml.GpuSampler` on GPU 0 while a matmul loop keeps it
   busy, then idle: the busy reading must be higher than the idle one.
3. **GPU trials, a quarter GPU each** (``search_spaces/digits_gpu.yaml``, shortened):
   every trial trains on CUDA, four share a GPU, and each trial's Optuna attributes hold
   its GPU ids, mean utilisation and peak memory; the report's money paid for idle GPU
   time is printed.
4. **DDP on two GPUs** when the machine has two or more.
5. **plan** on the digits GPU example: its memory estimate against the peak memory a
   real trial's process reserved on the GPU (``gpu_torch_peak_mib``).

Prints one JSON object per step and exits 1 if any step failed; exits 2 without a GPU.
It is not part of the test suite (CI has no GPU); its output goes in the issue notes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from benchmarks.common import ROOT, local_ray

EXAMPLE = ROOT / "search_spaces" / "digits_gpu.yaml"


def _print(step: str, **figures) -> None:
    print(json.dumps({"step": step, **figures}, default=str), flush=True)


def inventory() -> dict:
    from hpsearch.spec import config as config_mod
    from hpsearch.adapters import nvml
    from hpsearch.money import pricing

    inv = nvml.inventory()
    config = config_mod.load(EXAMPLE)
    price = pricing.resolve(config, gpu=nvml.for_pricing(config))
    return {"available": inv.available, "message": inv.message, "driver": inv.driver_version,
            "cuda": inv.cuda_driver_version,
            "gpus": [{"index": g.index, "name": g.name, "memory_mib": g.memory_total_mib,
                      "util_pct": g.utilization_pct} for g in inv.gpus],
            "auto_price": {"instance": price.instance, "per_hour": price.per_hour,
                           "currency": price.currency, "note": price.note}}


def sampler() -> dict:
    import torch

    from hpsearch.adapters.nvml import GpuSampler

    x = torch.randn(8192, 8192, device="cuda")
    with GpuSampler(indices=[0], interval_s=0.1) as busy_sampler:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            x @ x
        torch.cuda.synchronize()
    busy = busy_sampler.stop()
    del x
    torch.cuda.empty_cache()
    time.sleep(1.0)
    with GpuSampler(indices=[0], interval_s=0.1) as idle_sampler:
        time.sleep(2.0)
    idle = idle_sampler.stop()
    ok = (busy["util_mean"] or 0) > (idle["util_mean"] or 0)
    return {"ok": ok, "busy": busy, "idle": idle}


def trials(out: Path, n: int, epochs: int, gpu: float, name: str) -> dict:
    import hpsearch
    from hpsearch.adapters.optuna.results import load_report

    result = hpsearch.run(EXAMPLE, {"name": name, "search.n_trials": n, "max_epochs": epochs,
                                    "resources.gpu": gpu, "pruning.policy": "none"},
                          run_dir=out / name, emit=None)
    rows = []
    for t in result.study.get_trials():
        a = t.user_attrs
        rows.append({"number": t.number, "state": t.state.name, "value": t.value,
                     "gpu_ids": a.get("gpu_ids"), "gpu_util_mean": a.get("gpu_util_mean"),
                     "gpu_mem_peak_mib": a.get("gpu_mem_peak_mib"),
                     "gpu_torch_peak_mib": a.get("gpu_torch_peak_mib"), "cost": a.get("cost")})
    report, _ = load_report(str(result.run_dir), None)
    s = report.summary
    ok = all(r["state"] == "COMPLETE" and r["gpu_util_mean"] is not None for r in rows)
    logs = "".join(p.read_text(errors="replace") for p in (result.run_dir / "logs").glob("*.log"))
    return {"ok": ok and "training on CPU" not in logs, "trials": rows,
            "idle_gpu_cost": s["idle_gpu_cost"], "gpu_util_mean": s["gpu_util_mean"],
            "total_cost": s["total_cost"], "currency": s["currency"],
            "cpu_fallback_in_logs": "training on CPU" in logs}


def plan_vs_measured(measured_mib: float | None) -> dict:
    from hpsearch.money import catalog
    from hpsearch.tools import plan
    from hpsearch.spec import config as config_mod
    from hpsearch.adapters.trial import probe

    config = config_mod.load(EXAMPLE)
    params = plan.representative_params(config.space)
    figures = probe.probe(config.trainable, params, threads=1)
    made = plan.make_plan(config, catalog.load(None), figures)
    return {"params": params, "estimate_mib": made.memory.total_mib,
            "training_mib": made.memory.training_bytes / 2**20,
            "measured_torch_peak_mib_any_trial": measured_mib}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="run dirs (default: a temporary folder)")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        _print("cuda", ok=False, why="torch sees no CUDA device: this check needs a GPU",
               torch=torch.__version__)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="hps-gpu-check-"))
    count = torch.cuda.device_count()
    local_ray(num_cpus=min(8, max(2, args.trials)), num_gpus=count)
    failed = 0
    steps = [("inventory", inventory), ("sampler", sampler),
             ("quarter_gpu_trials", lambda: trials(out, args.trials, args.epochs, 0.25,
                                                   "gpu-quarter"))]
    if count >= 2:
        steps.append(("ddp_two_gpus", lambda: trials(out, 2, args.epochs, 2, "gpu-ddp")))
    peak = None
    for name, step in steps:
        try:
            figures = step()
        except Exception:
            failed += 1
            _print(name, ok=False, error=traceback.format_exc()[-3000:])
            continue
        failed += figures.get("ok") is False
        if name == "quarter_gpu_trials":
            peaks = [r["gpu_torch_peak_mib"] for r in figures["trials"]
                     if r["gpu_torch_peak_mib"] is not None]
            peak = max(peaks) if peaks else None
        _print(name, **figures)
    try:
        _print("plan", **plan_vs_measured(peak))
    except Exception:
        failed += 1
        _print("plan", ok=False, error=traceback.format_exc()[-3000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
