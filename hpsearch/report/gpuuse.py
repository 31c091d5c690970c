"""How busy a trial kept its GPUs, over all its attempts, and the money its idle time cost.

Pure module. A trial process samples its GPUs through NVML
(:class:`hpsearch.adapters.nvml.GpuSampler`) and reports, with every epoch, the figures of that
process so far: mean utilisation, seconds sampled, peak memory. A trial restarted after
a preemption or a failure runs in a new process (a new *attempt*) whose figures start
again from zero, so the driver keeps each attempt's latest figures and combines them
(:func:`combine`): utilisation weighted by each attempt's sampled seconds, the highest
memory peak.

Money paid for idle GPU time (:func:`idle_cost`) is an estimate: a trial's cost times
the share of its sampled time the GPU ran no kernel (``1 - utilisation / 100``). NVML's
utilisation is device-wide, so trials sharing a GPU (fractional ``resources.gpu``) see
their joint use, and each pays for the idle share of its fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hpsearch import keys
from hpsearch.scalars import finite

METHOD_IDLE = (
    "estimate: each GPU trial's cost x (1 - its mean GPU utilisation / 100), NVML's "
    "device-wide utilisation sampled while it trained; trials without GPU samples count 0")


@dataclass(frozen=True)
class GpuUse:
    """One attempt's (or a whole trial's) GPU figures.

    Attributes:
        util_mean: Mean utilisation in percent over the sampled time, or None.
        sampled_s: Seconds over which utilisation was sampled.
        mem_peak_mib: Highest device memory in use seen on one of its GPUs, MiB, or None.
        torch_peak_mib: Highest memory torch's caching allocator reserved in the trial's
            own process, MiB, or None (the trial's own share of a shared GPU).
    """

    util_mean: float | None = None
    sampled_s: float = 0.0
    mem_peak_mib: float | None = None
    torch_peak_mib: float | None = None

    @property
    def empty(self) -> bool:
        return (self.util_mean is None and self.mem_peak_mib is None
                and self.torch_peak_mib is None)


def _read(values: Mapping[str, Any], util: str, seconds: str, mem: str,
          torch_peak: str) -> GpuUse | None:
    use = GpuUse(util_mean=finite(values.get(util)),
                 sampled_s=finite(values.get(seconds)) or 0.0,
                 mem_peak_mib=finite(values.get(mem)),
                 torch_peak_mib=finite(values.get(torch_peak)))
    return None if use.empty else use


def from_result(result: Mapping[str, Any]) -> GpuUse | None:
    """The :class:`GpuUse` a trial result carries (``hps_gpu_*`` keys), or None."""
    return _read(result, keys.GPU_UTIL, keys.GPU_SAMPLED_S, keys.GPU_MEM_PEAK_MIB,
                 keys.GPU_TORCH_PEAK_MIB)


def from_attrs(attrs: Mapping[str, Any]) -> GpuUse | None:
    """A trial's combined :class:`GpuUse` from its Optuna user attributes, or None."""
    return _read(attrs, keys.ATTR_GPU_UTIL, keys.ATTR_GPU_SAMPLED_S,
                 keys.ATTR_GPU_MEM_PEAK_MIB, keys.ATTR_GPU_TORCH_PEAK_MIB)


def _peak(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def combine(uses: Iterable[GpuUse]) -> GpuUse:
    """Combine attempts: utilisation weighted by sampled seconds (a plain mean where no
    attempt has sampled seconds), the highest peaks, the summed seconds."""
    uses = list(uses)
    rated = [u for u in uses if u.util_mean is not None]
    seconds = sum(u.sampled_s for u in rated)
    if not rated:
        util = None
    elif seconds > 0:
        util = sum(u.util_mean * u.sampled_s for u in rated) / seconds
    else:
        util = sum(u.util_mean for u in rated) / len(rated)
    return GpuUse(util_mean=util, sampled_s=sum(u.sampled_s for u in uses),
                  mem_peak_mib=_peak(u.mem_peak_mib for u in uses),
                  torch_peak_mib=_peak(u.torch_peak_mib for u in uses))


def _write(use: GpuUse, util: str, seconds: str, mem: str,
           torch_peak: str) -> dict[str, float]:
    out = {seconds: use.sampled_s}
    for key, value in ((util, use.util_mean), (mem, use.mem_peak_mib),
                       (torch_peak, use.torch_peak_mib)):
        if value is not None:
            out[key] = value
    return out


def to_result(use: GpuUse) -> dict[str, float]:
    """The ``hps_gpu_*`` result keys of ``use`` (figures that are None left out)."""
    return _write(use, keys.GPU_UTIL, keys.GPU_SAMPLED_S, keys.GPU_MEM_PEAK_MIB,
                  keys.GPU_TORCH_PEAK_MIB)


def to_attrs(use: GpuUse) -> dict[str, float]:
    """The Optuna user attributes of a trial's combined ``use`` (None figures left out)."""
    return _write(use, keys.ATTR_GPU_UTIL, keys.ATTR_GPU_SAMPLED_S,
                  keys.ATTR_GPU_MEM_PEAK_MIB, keys.ATTR_GPU_TORCH_PEAK_MIB)


def idle_cost(cost: float | None, util_mean: float | None) -> float | None:
    """The part of ``cost`` paid while the GPU was idle, or None when either is unknown.

    Utilisation is clamped to 0-100.
    """
    cost, util = finite(cost), finite(util_mean)
    if cost is None or util is None:
        return None
    return cost * (1.0 - min(100.0, max(0.0, util)) / 100.0)
