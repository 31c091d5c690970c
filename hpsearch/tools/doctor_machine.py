"""The doctor's checks of this machine: Python, hpsearch, torch, NVML and CUDA.

Pure module: each check interprets facts gathered elsewhere (torch's answers from
:func:`hpsearch.adapters.system.torch_info`, the GPUs from
:func:`hpsearch.adapters.nvml.inventory`), so it runs on plain data.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from hpsearch.adapters.system import TorchInfo
from hpsearch.tools.doctor_checks import FAIL, OK, WARN, Check

CUDA_FIX = ("install a CUDA build of torch matching the driver, e.g. `pip install torch "
            "--index-url https://download.pytorch.org/whl/cu124` (pick the CUDA version "
            "at most the driver's, as `nvidia-smi` shows it)")



def python_check() -> Check:
    """This Python: hpsearch needs 3.10 or later."""
    version = platform.python_version()
    if sys.version_info < (3, 10):
        return Check("python", FAIL, f"Python {version} ({sys.executable})",
                     "hpsearch needs Python 3.10 or later")
    return Check("python", OK, f"Python {version} ({sys.executable})")


def hpsearch_check() -> Check:
    """hpsearch's version and where this copy lives (its package folder)."""
    from hpsearch.version import __version__

    where = Path(__file__).resolve().parents[1]
    return Check("hpsearch", OK, f"hpsearch {__version__} ({where})")


def torch_check(info: TorchInfo) -> Check:
    """torch's version, build and the CUDA devices it sees."""
    if info.version is None:
        return Check("torch", FAIL, f"torch cannot be imported: {info.error}",
                     "install torch: `pip install torch==2.13.0` for the CPU build, or "
                     "the CUDA build on a GPU machine (see the README)")
    if info.cuda_build is None:
        return Check("torch", OK, f"torch {info.version}, a CPU-only build (no CUDA): "
                                  "trials train on CPU (a GPU machine needs a CUDA build "
                                  "of torch)")
    if not info.cuda_available:
        why = f" ({info.error})" if info.error else ""
        return Check("torch", OK, f"torch {info.version}, built for CUDA {info.cuda_build},"
                                  f" but CUDA is not available{why}: trials train on CPU")
    names = _counted(info.devices)
    return Check("torch", OK, f"torch {info.version}, CUDA {info.cuda_build}: "
                              f"{len(info.devices)} device(s): {names}")


def nvml_check(inventory: Any) -> Check:
    """The driver and GPUs NVML lists (``inventory``: :class:`hpsearch.adapters.nvml.Inventory`)."""
    if not inventory.available:
        return Check("nvml", WARN, inventory.message,
                     "only if this machine has an NVIDIA GPU: install or load the NVIDIA "
                     "driver until `nvidia-smi` lists it (in a container, run it with "
                     "`--gpus all`); GPU use per trial and `pricing.instance: auto` read "
                     "the GPUs through NVML")
    if not inventory.gpus:
        return Check("nvml", WARN, inventory.message,
                     "check `nvidia-smi` and `dmesg`: the driver runs but lists no GPU")
    cards = ", ".join(
        f"{g.index}: {g.name} ({g.memory_total_mib / 1024:.0f} GiB, "
        f"{g.memory_used_mib / 1024:.1f} GiB used)" for g in inventory.gpus)
    return Check("nvml", OK, f"driver {inventory.driver_version or '?'}, CUDA "
                             f"{inventory.cuda_driver_version or '?'}: {cards}")


def cuda_check(info: TorchInfo, inventory: Any,
               env: Mapping[str, str] | None = None) -> Check:
    """Whether torch can use the GPUs NVML sees."""
    from hpsearch.adapters.nvml import visible_indices

    env = os.environ if env is None else env
    n_nvml = len(inventory.gpus)
    visible = visible_indices(env)
    n_visible = n_nvml if visible is None else len([i for i in visible if i < n_nvml])
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    masked = f" (CUDA_VISIBLE_DEVICES={cvd!r})" if cvd is not None else ""
    if info.version is None:
        return Check("cuda", FAIL, "torch is missing, so no trial can train",
                     "install torch (see the torch line)")
    if n_nvml == 0:
        if info.cuda_available:
            return Check("cuda", OK, f"torch sees {len(info.devices)} CUDA device(s), "
                                     "NVML none (GPU use per trial is not sampled)")
        return Check("cuda", OK, "no GPU: trials train on CPU (`resources.gpu: 0`)")
    if info.cuda_build is None:
        # A +cpu wheel of the same version counts as installed: pip must be forced.
        fix = CUDA_FIX.replace("install a CUDA build", "replace the CPU-only wheel with a "
                               "CUDA build").replace("pip install torch",
                                                     "pip install --force-reinstall torch")
        return Check("cuda", FAIL,
                     f"NVML sees {n_nvml} GPU(s) but torch {info.version} is a CPU-only "
                     "build: trials would train on CPU",
                     f"{fix}; this driver supports CUDA "
                     f"{inventory.cuda_driver_version or '?'}")
    if not info.cuda_available:
        if n_visible == 0:
            return Check("cuda", WARN, f"NVML sees {n_nvml} GPU(s), none visible to CUDA"
                                       f"{masked}: trials train on CPU",
                         "unset CUDA_VISIBLE_DEVICES (or list the GPUs to use)")
        why = f": {info.error}" if info.error else ""
        return Check("cuda", FAIL,
                     f"NVML sees {n_nvml} GPU(s) but torch (CUDA {info.cuda_build}) cannot "
                     f"use them{why}",
                     f"the driver supports CUDA {inventory.cuda_driver_version or '?'}: "
                     f"install a torch build for that CUDA version or older, or upgrade the "
                     f"driver; then `python -c 'import torch; print(torch.cuda.is_available())'`")
    if len(info.devices) < n_visible:
        return Check("cuda", WARN, f"torch sees {len(info.devices)} of the {n_visible} "
                                   f"GPU(s) NVML lists{masked}",
                     "check CUDA_VISIBLE_DEVICES and `nvidia-smi` (a GPU in a bad state?)")
    return Check("cuda", OK, f"torch uses the {len(info.devices)} GPU(s) NVML sees{masked}")


def _counted(names: Iterable[str]) -> str:
    """``2 x H100, 1 x A100``: each name once, with how often it occurs."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())
