"""``hpsearch plan`` with the real CPU probe: the memory estimate against measured memory,
and the command on the digits example.

The memory test compares like with like. The plan probes ``tests.plan_trainables:wide_mlp``
(four Linear(1024, 1024) + ReLU blocks, batch 4096, Adam, fp32) in Lightning and predicts
what one training step holds at its peak (``MemoryEstimate.training_bytes``: weights,
gradients, optimizer state, saved activations and the largest of them once more; no
CUDA context). A fresh interpreter then builds the same model from the same params,
trains two steps in Lightning's order (forward, zero_grad, backward, optimizer step; the
second step is the steady state: gradients and Adam's state exist) and measures the peak
resident memory those steps add. Host-side data is loaded before the baseline (on a GPU
it stays in host memory); each step copies its batch, as the transfer to the device
would. glibc's mmap threshold is fixed at 64 KiB so that large tensors are mapped and
unmapped (resident memory follows live tensors, without heap fragmentation), and torch
runs on one thread. Peak: ``VmHWM`` after resetting it through ``/proc/self/clear_refs``
(Linux), else ``ru_maxrss``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from hpsearch.money import catalog as catalog_mod
from hpsearch.spec.config import load
from hpsearch.tools.plan import make_plan
from hpsearch.tools.plan_memory import MIB
from hpsearch.tools.plan_point import representative_params
from tests.test_cli_errors import env as cli_env
from tests.test_cli_errors import files_under, hpsearch

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "search_spaces" / "digits_mlp.yaml"

WIDE = {
    "name": "wide-mlp",
    "trainable": "tests.plan_trainables:wide_mlp",
    "objective": {"metric": "val_loss", "mode": "min"},
    "max_epochs": 2,
    "space": {
        "width": {"type": "categorical", "choices": [1024]},
        "depth": {"type": "categorical", "choices": [4]},
        "batch_size": {"type": "categorical", "choices": [4096]},
        "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
    },
    "search": {"n_trials": 2},
    "resources": {"cpu": 1, "gpu": 1},
}

MEASURE = r"""
import gc, json, resource, sys
import torch
torch.set_num_threads(1)
from tests.plan_trainables import wide_mlp

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)

params = json.loads(sys.argv[1])
first, data = wide_mlp(params)          # builds the data module (and a model, dropped)
del first
data.setup()
host = list(data.train_dataloader())    # host-side batches: not device memory
# torch's one-off state (autograd engine, kernels, Adam's code) on a tiny model.
tiny = torch.nn.Linear(8, 8)
opt = torch.optim.Adam(tiny.parameters())
for _ in range(2):
    loss = tiny(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
del tiny, opt, loss
gc.collect()
baseline = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                    # resets VmHWM to the current RSS
    how = "VmHWM"
except OSError:
    how = "ru_maxrss"

model, _ = wide_mlp(params)
opt = model.configure_optimizers()
for i in range(2):                      # Lightning's order
    batch = [t.clone() for t in host[i % len(host)]]   # the copy to the device
    loss = model.loss(batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del batch, loss
if how == "VmHWM":
    peak = status("VmHWM")
else:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"baseline": baseline, "peak": peak, "how": how}))
"""


def measure_rss(params: dict) -> dict:
    env = cli_env()
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(params)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_memory_estimate_within_20_percent_of_measured():
    from hpsearch.adapters.trial.probe import probe

    config = load(WIDE)
    params = representative_params(config.space, "mid")
    figures = probe(config.trainable, params, probe_batches=1, threads=1)
    plan = make_plan(config, catalog_mod.packaged(), figures)
    m = plan.memory

    # The parts the probe measured are what the model is.
    width, depth, batch = 1024, 4, 4096
    n_params = depth * (width * width + width) + width * 10 + 10
    assert figures.n_params == figures.n_trainable == n_params
    assert figures.batch_size == batch
    assert m.optimizer_bytes == pytest.approx(2 * 4 * n_params, rel=0.01)  # Adam
    # Saved for backward: the input and each ReLU's output, batch x width fp32 each.
    assert m.activations_bytes == pytest.approx((depth + 1) * batch * width * 4, rel=0.05)
    assert m.transient_bytes == batch * width * 4

    measured = measure_rss(params)
    added = measured["peak"] - measured["baseline"]
    ratio = m.training_bytes / added
    print(f"\nplan training_bytes {m.training_bytes / MIB:.1f} MiB (weights "
          f"{m.weights_bytes / MIB:.1f}, gradients {m.gradients_bytes / MIB:.1f}, "
          f"optimizer {m.optimizer_bytes / MIB:.1f}, activations "
          f"{m.activations_bytes / MIB:.1f}, transient {m.transient_bytes / MIB:.1f}); "
          f"measured peak RSS added by two steps {added / MIB:.1f} MiB "
          f"({measured['how']}); estimate/measured {ratio:.3f}")
    assert 0.8 <= ratio <= 1.2, (m, measured)


# ---------------------------------------------------------------------------------------
# The command on the digits example.


@pytest.mark.slow
def test_plan_digits(tmp_path):
    proc = hpsearch("plan", str(DIGITS), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    out = proc.stdout
    for part in ("weights", "gradients", "optimizer", "activations", "transient",
                 "cuda context", "total"):
        assert f"\n  {part} " in out, part
    assert "Plan for 'digits-mlp'" in out
    assert "Recommended (USD): " in out
    assert "GPUs that fit, cheapest first" in out
    assert files_under(tmp_path) == set()  # nothing written


@pytest.mark.slow
def test_plan_digits_json_with_a_throughput(tmp_path):
    proc = hpsearch("plan", str(DIGITS), "--json", "--throughput", "5000@T4",
                    "--trials", "4", "--epochs", "3", "--set", "search.seed=1",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"memory", "rows", "recommendation", "trials", "epochs", "probe",
            "params"} <= set(data)
    assert (data["trials"], data["epochs"]) == (4, 3)
    assert data["throughput"] == {"samples_per_s": 5000.0, "gpu": "T4"}
    assert {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
            "cuda_context_bytes", "training_bytes", "total_bytes"} <= set(data["memory"])
    rows = {r["instance"]: r for r in data["rows"]}
    for r in rows.values():
        assert {"instance", "gpu", "fits", "epoch_s", "on_demand_cost", "spot_cost",
                "currency"} <= set(r)
    p = data["probe"]
    val_ratio = (p["val_step_s"] * p["val_batches"]) / (p["train_step_s"] * p["train_batches"])
    t4 = rows["aws:g4dn.xlarge"]
    assert t4["epoch_s"] == pytest.approx(p["train_samples"] / 5000 * (1 + val_ratio))
    # Scaled to an A100 by nominal fp32 rates (19.5 vs 8.1 TFLOPS).
    a100 = rows["gcp:nvidia-tesla-a100"]
    assert a100["epoch_s"] == pytest.approx(t4["epoch_s"] * 8.1 / 19.5)
    # Billed as instances: the 4 trials run on `nodes` one-GPU instances in waves, each
    # rental billed once with the row's 60 s minimum (not 60 s per trial).
    waves = -(-4 // (t4["nodes"] * t4["slots"]))
    assert t4["rented_s"] == pytest.approx(waves * t4["trial_s"])
    assert t4["billed_s"] == max(60, math.ceil(t4["rented_s"]))
    assert t4["on_demand_cost"] == pytest.approx(t4["nodes"] * t4["billed_s"] / 3600 * 0.526)
    assert t4["on_demand_cost"] < 4 * 60 / 3600 * 0.526  # not a minimum per trial
    usd = data["recommendation"]["USD"]
    fitting = [r for r in data["rows"] if r["fits"] and r["currency"] == "USD"
               and not r["owned"] and (r["on_demand_cost"] or r["spot_cost"])]
    cheapest = min(min(c for c in (r["on_demand_cost"], r["spot_cost"]) if c is not None)
                   for r in fitting)
    assert usd["cost"] == pytest.approx(cheapest)


SPACE = """\
name: plan-bad
trainable: {trainable}
objective: {{metric: val_acc, mode: max}}
max_epochs: 2
space:
  lr: {{type: float, low: 1.0e-4, high: 0.3, log: true}}
search: {{n_trials: 2}}
"""


@pytest.mark.parametrize("extra, fragments", [
    (["--throughput", "abc"], ["--throughput:", "samples per second", "(got 'abc')"]),
    (["--throughput", "100@Z9"], ["--throughput:", "unknown GPU model 'Z9'"]),
    (["--trials", "0"], ["--trials:", ">= 1", "(got '0')"]),
    (["--epochs", "x"], ["--epochs:", ">= 1", "(got 'x')"]),
    (["--probe-batches", "0"], ["--probe-batches:", "(got '0')"]),
    (["--currency", "EUR"], ["--currency:", "known: CNY, USD", "(got 'EUR')"]),
], ids=["throughput", "throughput-model", "trials", "epochs", "probe-batches", "currency"])
@pytest.mark.slow
def test_plan_bad_option_is_one_line(tmp_path, extra, fragments):
    proc = hpsearch("plan", str(DIGITS), *extra, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpsearch: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.slow
def test_plan_trainable_that_fails_to_build(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(trainable="tests.plan_trainables:broken"),
                     encoding="utf-8")
    proc = hpsearch("plan", str(space), cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "hpsearch: error: trainable: building it at the probed configuration raised "
        "ValueError: no such layer: 'Linaer' (got 'tests.plan_trainables:broken')"]
    assert files_under(tmp_path) == {"space.yaml"}


@pytest.mark.slow
def test_plan_help_names_every_option(tmp_path):
    proc = hpsearch("plan", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    for option in ("--set", "--point", "--precision", "--optimizer", "--throughput",
                   "--trials", "--epochs", "--currency", "--probe-batches", "--json"):
        assert option in proc.stdout
