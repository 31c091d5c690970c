"""GPUs through NVML: what this machine has, how busy it is, and which catalogue row it is.

Importable without pynvml or torch: ``pynvml`` (package ``nvidia-ml-py``) is imported
inside the functions that talk to the driver, and every NVML failure becomes plain data
(``available=False`` and a human message) instead of an exception. Without an NVIDIA
driver, ``pynvml.nvmlInit()`` raises ``pynvml.NVMLError_LibraryNotFound``; that and every
other ``pynvml.NVMLError`` are caught here.

NVML indices are the driver's (PCI bus order, what ``nvidia-smi`` shows); they ignore
``CUDA_VISIBLE_DEVICES``. :func:`visible_indices` maps that variable (indices or UUIDs)
to NVML indices.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from hpsearch.money.pricing import DetectedGpu


MIB = 1024 * 1024


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML sees it.

    Attributes:
        index: NVML index (``nvidia-smi`` order).
        name: The model name NVML reports, e.g. ``NVIDIA H100 80GB HBM3``.
        uuid: ``GPU-...``, or empty if NVML would not say.
        memory_total_mib: Memory on the card, MiB.
        memory_used_mib: Memory in use by every process, MiB.
        memory_free_mib: Memory free, MiB.
        utilization_pct: Share of the last sample period (1/6 s to 1 s, by model) during
            which a kernel ran, 0-100; None if not supported (e.g. MIG).
        temperature_c: Core temperature in degrees Celsius, or None.
    """

    index: int
    name: str
    uuid: str
    memory_total_mib: float
    memory_used_mib: float
    memory_free_mib: float
    utilization_pct: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True)
class Inventory:
    """The GPUs of this machine, or why there are none.

    Attributes:
        available: True when NVML answered (the list may still be empty: ``gpus``).
        gpus: The GPUs, in NVML order.
        driver_version: e.g. ``550.54.15``; empty when unknown.
        cuda_driver_version: The CUDA version the driver supports, e.g. ``12.4``; empty
            when unknown.
        message: One human sentence: what was found, or why nothing was.
    """

    available: bool
    gpus: tuple[Gpu, ...] = ()
    driver_version: str = ""
    cuda_driver_version: str = ""
    message: str = ""

    @property
    def count(self) -> int:
        return len(self.gpus)

    def models(self) -> dict[str, int]:
        """``{model name: count}``, in NVML order of first appearance."""
        out: dict[str, int] = {}
        for gpu in self.gpus:
            out[gpu.name] = out.get(gpu.name, 0) + 1
        return out

    def main_model(self) -> str | None:
        """The model most GPUs have (the first one on a tie), or None without GPUs."""
        models = self.models()
        if not models:
            return None
        return max(models, key=lambda name: (models[name], -list(models).index(name)))


def _text(value: Any) -> str:
    # Older pynvml releases return bytes.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def nvml_error_message(exc: BaseException) -> str:
    """A human sentence for an NVML failure, saying what to do about it."""
    import pynvml

    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return ("NVML library not found (libnvidia-ml.so): no NVIDIA driver is installed "
                "on this machine, so trials train on CPU")
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return ("the NVIDIA driver is installed but not loaded (no GPU, or the kernel "
                "module failed: see `dmesg`, `nvidia-smi`); trials train on CPU")
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return ("no permission to query the NVIDIA driver (in a container: run it with "
                "the NVIDIA runtime, e.g. `docker run --gpus all`)")
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return ("the NVML library and the loaded NVIDIA kernel module have different "
                "versions (a driver upgrade without a reboot?); reboot or reload the module")
    if isinstance(exc, (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)):
        return ("a GPU fell off the bus or needs a reset (see `nvidia-smi` and `dmesg`); "
                "reset it (`nvidia-smi -r`) or reboot")
    if isinstance(exc, pynvml.NVMLError_FunctionNotFound):
        return ("the NVIDIA driver is older than this NVML binding expects (a function "
                "is missing); upgrade the driver")
    # The generic text of several codes needs the library itself ("NVML Error with
    # code 25" without it), so the class name says which error it was.
    kind = type(exc).__name__.replace("NVMLError_", "").replace("NVMLError", "error")
    return f"NVML failed ({kind}: {exc}); see `nvidia-smi`"


def _init() -> tuple[Any, str | None]:
    """``(pynvml, None)`` after a successful ``nvmlInit``, else ``(None, why)``."""
    try:
        import pynvml
    except ImportError:
        return None, ("pynvml is not installed (pip install nvidia-ml-py), so GPUs cannot "
                      "be listed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, nvml_error_message(exc)
    except OSError as exc:  # a broken library file
        return None, f"NVML could not be loaded: {exc}"
    return pynvml, None


def _optional(call, *args) -> Any:
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _cuda_version(value: int | None) -> str:
    if not value:
        return ""
    return f"{value // 1000}.{value % 1000 // 10}"


def inventory() -> Inventory:
    """The GPUs of this machine through NVML; never raises.

    Returns:
        ``Inventory(available=False, message=...)`` when there is no NVML (no driver, no
        library, no permission), ``available=True`` with an empty ``gpus`` when the
        driver runs but has no GPU, else every GPU with its memory (MiB), utilisation
        and temperature.
    """
    nvml, why = _init()
    if nvml is None:
        return Inventory(available=False, message=why or "NVML is unavailable")
    try:
        driver = _text(_optional(nvml.nvmlSystemGetDriverVersion) or "")
        cuda = _cuda_version(_optional(nvml.nvmlSystemGetCudaDriverVersion))
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return Inventory(False, (), driver, cuda, nvml_error_message(exc))
        gpus = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = _text(nvml.nvmlDeviceGetName(handle))
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except nvml.NVMLError as exc:
                return Inventory(False, (), driver, cuda,
                                 f"GPU {index}: {nvml_error_message(exc)}")
            util = _optional(nvml.nvmlDeviceGetUtilizationRates, handle)
            temp = _optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            gpus.append(Gpu(
                index=index,
                name=name,
                uuid=_text(_optional(nvml.nvmlDeviceGetUUID, handle) or ""),
                memory_total_mib=memory.total / MIB,
                memory_used_mib=memory.used / MIB,
                memory_free_mib=memory.free / MIB,
                utilization_pct=None if util is None else float(util.gpu),
                temperature_c=None if temp is None else float(temp),
            ))
    finally:
        _optional(nvml.nvmlShutdown)
    if not gpus:
        message = f"NVIDIA driver {driver or '?'} is loaded but reports no GPU"
    else:
        models = ", ".join(f"{n} x {name}" for name, n in Inventory(True, tuple(gpus))
                           .models().items())
        message = (f"{len(gpus)} GPU(s): {models}; driver {driver or '?'}, CUDA "
                   f"{cuda or '?'}")
    return Inventory(True, tuple(gpus), driver, cuda, message)


def detected_gpu_model() -> str | None:
    """The model most of this machine's GPUs have (NVML name), or None without GPUs."""
    return inventory().main_model()


# ---------------------------------------------------------------------------------------
# Sampling utilisation and memory while a trial runs.


def visible_indices(env: dict[str, str] | None = None) -> list[int] | None:
    """NVML indices of the GPUs ``CUDA_VISIBLE_DEVICES`` names (indices or UUIDs).

    Entries are read in order, as CUDA reads them: the first invalid one (``-1``, a MIG
    instance, an unknown UUID) ends the list, so ``"1,-1,2"`` is ``[1]``. Returns None
    when the variable is unset (every GPU is visible), and [] when it hides every GPU
    (``""``, ``"-1"``) or names only MIG instances (NVML has no utilisation for those).
    UUIDs (``GPU-...``) are resolved through NVML; without NVML they are skipped and only
    numeric entries are kept. A GPU named twice is listed once.

    Args:
        env: The environment to read; default ``os.environ``.
    """
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out: list[int] = []
    nvml: Any = None
    tried_nvml = False
    try:
        for item in (part.strip() for part in raw.split(",")):
            if not item:
                continue
            if item.isdigit():
                index: int | None = int(item)
            elif item.startswith("GPU-"):
                if not tried_nvml:
                    nvml, _ = _init()
                    tried_nvml = True
                if nvml is None:
                    continue  # without NVML a UUID cannot be placed; keep the rest
                handle = _optional(nvml.nvmlDeviceGetHandleByUUID, item)
                index = None if handle is None else _optional(nvml.nvmlDeviceGetIndex,
                                                              handle)
                if index is None:
                    break  # an unknown UUID is invalid: CUDA stops there
            else:  # CUDA stops at the first invalid entry (e.g. "-1", a MIG id)
                break
            if int(index) not in out:
                out.append(int(index))
    finally:
        if nvml is not None:
            _optional(nvml.nvmlShutdown)
    return out


def sample(handles: Sequence[Any]) -> list[tuple[float | None, float | None]]:
    """One reading per NVML handle: ``(utilisation %, memory used MiB)``.

    A figure NVML cannot give (MIG, a lost GPU) is None. NVML must be initialised by
    the caller (:class:`GpuSampler` does it).
    """
    import pynvml

    out: list[tuple[float | None, float | None]] = []
    for handle in handles:
        util = _optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
        out.append((None if util is None else float(util.gpu),
                    None if memory is None else memory.used / MIB))
    return out


@dataclass
class _Readings:
    util: list[float] = field(default_factory=list)
    mem_peak_mib: dict[int, float] = field(default_factory=dict)
    n: int = 0


class GpuSampler:
    """Samples the utilisation and memory of some GPUs in a background thread.

    Use it around a trial's training::

        sampler = GpuSampler(indices=[0], interval_s=1.0).start()
        ...  # train
        figures = sampler.stop()  # {"util_mean": 87.5, "mem_peak_mib": 10342.0, ...}

    One NVML call pair per GPU per interval (microseconds each): negligible next to a
    training step. The figures are device-wide, as NVML gives them: a GPU shared by
    several trials (fractional ``resources.gpu``) reports their joint use.

    Without NVML (no driver, no GPU) or with no GPU to watch, ``start`` starts no thread
    and ``stop`` returns the same keys with None figures; nothing raises.

    Args:
        indices: NVML indices to watch; None = the GPUs ``CUDA_VISIBLE_DEVICES`` names
            (every GPU when it is unset).
        interval_s: Seconds between samples (> 0). NVML's utilisation is itself the
            busy share of its last 1/6-1 s window.
    """

    def __init__(self, indices: Iterable[int] | None = None, interval_s: float = 1.0):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.indices = None if indices is None else [int(i) for i in indices]
        self.interval_s = float(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readings = _Readings()
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self.message = ""
        self._started_at: float | None = None
        self._elapsed_s = 0.0

    @property
    def active(self) -> bool:
        """Whether a sampling thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "GpuSampler":
        """Start sampling (a no-op without NVML or GPUs); returns ``self``."""
        if self._thread is not None:
            return self
        self._stop.clear()  # a sampler stopped earlier may start again
        self._handles = []
        nvml, why = _init()
        if nvml is None:
            self.message = why or "NVML is unavailable"
            return self
        indices = self.indices if self.indices is not None else visible_indices()
        if indices is None:
            count = _optional(nvml.nvmlDeviceGetCount) or 0
            indices = list(range(count))
        for index in dict.fromkeys(indices):  # a GPU named twice is sampled once
            handle = _optional(nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is not None:
                self._handles.append((index, handle))
        if not self._handles:
            _optional(nvml.nvmlShutdown)
            self.message = "no GPU to sample"
            return self
        self._nvml = nvml
        self._started_at = time.monotonic()
        self._record()  # one reading even for a trial shorter than the interval
        self._thread = threading.Thread(target=self._loop, name="hpsearch-gpu-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def _record(self) -> None:
        readings = sample([h for _, h in self._handles])
        with self._lock:
            self._readings.n += 1
            for (index, _), (util, mem) in zip(self._handles, readings):
                if util is not None:
                    self._readings.util.append(util)
                if mem is not None:
                    peak = self._readings.mem_peak_mib.get(index, 0.0)
                    self._readings.mem_peak_mib[index] = max(peak, mem)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._record()

    def snapshot(self) -> dict[str, Any]:
        """The figures so far, without stopping (same keys as :meth:`stop`)."""
        with self._lock:
            readings = self._readings
            util = readings.util
            peaks = dict(readings.mem_peak_mib)
            n = readings.n
        elapsed = self._elapsed_s
        if self._started_at is not None:
            elapsed = time.monotonic() - self._started_at
        return {
            "util_mean": sum(util) / len(util) if util else None,
            "mem_peak_mib": max(peaks.values()) if peaks else None,
            "mem_peak_mib_by_gpu": {str(i): v for i, v in sorted(peaks.items())} or None,
            "n_samples": n,
            "sampled_s": elapsed if n else None,
            "gpu_indices": [i for i, _ in self._handles] or None,
        }

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return the figures.

        Returns:
            ``util_mean``: mean utilisation % over every sample of every watched GPU;
            ``mem_peak_mib``: the highest memory used on any one watched GPU, MiB;
            ``mem_peak_mib_by_gpu``: ``{"index": peak MiB}``; ``n_samples``;
            ``sampled_s``: seconds between start and stop; ``gpu_indices``. Figures are
            None when nothing was sampled (no NVML, no GPU).
        """
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
            self._thread = None
            if self._started_at is not None:
                self._elapsed_s = time.monotonic() - self._started_at
                self._started_at = None
            if self._nvml is not None:
                _optional(self._nvml.nvmlShutdown)
                self._nvml = None
        return self.snapshot()

    def __enter__(self) -> "GpuSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# 


@functools.lru_cache(maxsize=1)
def detected() -> DetectedGpu:
    """What ``pricing.instance: auto`` prices: this machine's main GPU model and its
    memory, or why there is none (NVML asked once per process)."""
    inv = inventory()
    model = inv.main_model()
    memory = next((g.memory_total_mib for g in inv.gpus if g.name == model), None)
    return DetectedGpu(model, memory, inv.message)


def for_pricing(config: Any) -> DetectedGpu | None:
    """The detection :func:`hpsearch.money.pricing.resolve` needs for ``config``: NVML's
    findings when ``pricing.instance`` is ``auto``, else None (NVML is not asked)."""
    from hpsearch.money.pricing import AUTO

    return detected() if config.pricing.instance == AUTO else None
