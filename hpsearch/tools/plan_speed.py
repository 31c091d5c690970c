"""Seconds per epoch of one trial on each GPU model, for ``hpsearch plan``.

Pure module: the scaling. **Time per epoch** on a GPU, without ``--throughput``: the CPU
probe's measured seconds per batch (train and validation; data loading included),
scaled by the ratio of this CPU's measured matmul rate to the GPU's nominal dense rate
for the precision (datasheet TFLOPS, :data:`GPU_SPEEDS`) times :data:`GPU_EFFICIENCY`,
and never below :data:`TRAIN_STEP_FLOOR_S` / :data:`VAL_STEP_FLOOR_S` per batch (small
models are bound by Python and kernel-launch overhead, not FLOPs). This is a rough
guide, easily 2-3x off either way; a throughput measured on the target GPU
(``--throughput SAMPLES_PER_S``, optionally ``@MODEL`` to scale it to the other GPUs by
the same table) replaces it. With ``--throughput`` an epoch is its training samples /
throughput, plus validation in the proportion the CPU probe measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpsearch.adapters.trial.probe import ProbeFigures
from hpsearch.errors import ConfigError

#: Achieved share of a GPU's nominal rate in training, relative to this CPU's measured
#: matmul rate.
GPU_EFFICIENCY = 0.5
#: Least seconds a GPU spends per training / validation batch (Lightning's loop, the
#: optimizer step's kernels).
TRAIN_STEP_FLOOR_S = 0.002
VAL_STEP_FLOOR_S = 0.001
#: Seconds each trial spends starting (process spawn, imports of torch and Lightning).
STARTUP_S = 4.0


@dataclass(frozen=True)
class GpuSpeed:
    """Nominal dense throughput of a GPU model (NVIDIA datasheets, no sparsity).

    Attributes:
        fp32_tflops: Plain fp32 (PyTorch's default matmul precision uses no TF32).
        half_tflops: fp16/bf16 tensor cores with fp32 accumulation.
        bf16: Whether the GPU has bf16 (Ampere and later).
    """

    fp32_tflops: float
    half_tflops: float
    bf16: bool

    def tflops(self, precision: str) -> float | None:
        """The rate for ``precision``, or None where the GPU cannot run it (bf16)."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "bf16" and not self.bf16:
            return None
        return self.half_tflops


#: Keyed by the catalogue's ``gpu_model`` (H200 for detected machines).
GPU_SPEEDS: dict[str, GpuSpeed] = {
    "T4": GpuSpeed(8.1, 65.0, False),
    "V100": GpuSpeed(15.7, 125.0, False),
    "A10G": GpuSpeed(31.2, 70.0, True),
    "L4": GpuSpeed(30.3, 121.0, True),
    "RTX 3090": GpuSpeed(35.6, 71.0, True),
    "RTX 4090": GpuSpeed(82.6, 165.0, True),
    "A100-40GB": GpuSpeed(19.5, 312.0, True),
    "A100-80GB": GpuSpeed(19.5, 312.0, True),
    "H100": GpuSpeed(67.0, 989.0, True),
    "H200": GpuSpeed(67.0, 989.0, True),
}


@dataclass(frozen=True)
class Throughput:
    """A training throughput the user measured: samples per second, on ``model``
    (None: taken as is for every GPU)."""

    samples_per_s: float
    model: str | None = None


def parse_throughput(text: str, models: list[str]) -> Throughput:
    """``"1200"`` or ``"1200@A100-80GB"`` (a catalogue GPU model, any case)."""
    value, at, model = str(text).strip().partition("@")
    try:
        rate = float(value)
    except ValueError:
        raise ConfigError("--throughput", "must be samples per second, optionally "
                          "@MODEL (e.g. 1200@A100-80GB)", text) from None
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigError("--throughput", "must be > 0 samples per second", text)
    if not at:
        return Throughput(rate)
    if not model.strip():
        raise ConfigError("--throughput", "names no GPU model after '@' (e.g. "
                          "1200@A100-80GB)", text)
    known = {m.lower().replace(" ", ""): m for m in models}
    key = model.lower().replace(" ", "")
    if key not in known:
        raise ConfigError("--throughput", f"unknown GPU model '{model}'; known: "
                          f"{', '.join(sorted(set(models)))}", text)
    if known[key] not in GPU_SPEEDS:
        raise ConfigError("--throughput", f"no speed figure for {known[key]} to scale "
                          "from; give the throughput without @MODEL", text)
    return Throughput(rate, known[key])


def gpu_epoch_s(probe: ProbeFigures, model: str, precision: str, n_gpus: int = 1,
                throughput: Throughput | None = None) -> tuple[float | None, str]:
    """Seconds per epoch of one trial on ``n_gpus`` GPUs of ``model``; ``(None, why)``
    when unknown or the GPU cannot run the precision."""
    speed = GPU_SPEEDS.get(model)
    rate = speed.tflops(precision) if speed else None
    if speed is not None and rate is None:
        return None, f"no {precision} on {model}"
    n_gpus = max(1, n_gpus)
    if throughput is not None:
        if not probe.train_samples:
            return None, "training samples per epoch unknown"
        samples_per_s = throughput.samples_per_s
        if throughput.model is not None:
            reference = GPU_SPEEDS[throughput.model].tflops(precision)
            if reference is None:
                return None, f"no {precision} on {throughput.model}"
            if rate is None:
                return None, f"no speed figure for {model}"
            samples_per_s *= rate / reference
        return probe.train_samples / samples_per_s * (1.0 + probe.val_ratio), ""
    if rate is None:
        return None, f"no speed figure for {model}"
    if probe.train_step_s is None or not probe.train_batches or probe.cpu_gflops <= 0:
        return None, "no training batch was timed"
    scale = probe.cpu_gflops / (rate * 1000.0 * GPU_EFFICIENCY)
    train = max(probe.train_step_s * scale, TRAIN_STEP_FLOOR_S) * probe.train_batches
    val = 0.0
    if probe.val_step_s and probe.val_batches:
        val = max(probe.val_step_s * scale, VAL_STEP_FLOOR_S) * probe.val_batches
    return (train + val) / n_gpus, ""

