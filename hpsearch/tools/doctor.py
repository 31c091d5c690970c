"""``python -m hpsearch doctor``: is this machine (and cluster) ready to run a search?

Pure module: it runs the checks and returns them as plain data
(:class:`~hpsearch.tools.doctor_checks.Check`, printed by that module). The facts come
from probes that import nothing heavy at module level: torch is imported inside
:func:`hpsearch.adapters.system.torch_info`; a Ray cluster is asked from a child
process (:func:`hpsearch.adapters.system.cluster_info`) so that an address where
no Ray head answers cannot hang the doctor; NVML through :func:`hpsearch.adapters.nvml.inventory`.
Each family of checks has its module: this machine (:mod:`.doctor_machine`), the
packages (:mod:`.doctor_packages`), the cluster (:mod:`.doctor_cluster`), the
``space.yaml`` and its price (:mod:`.doctor_space`), and where a run writes
(:mod:`.doctor_storage`).

What is checked, in order: Python and hpsearch; torch (version, CUDA build, devices);
NVML (driver, GPUs, memory); whether torch can use the GPUs NVML sees; Lightning, Ray,
Optuna and optuna-dashboard (installed, and within hpsearch's requirements); the Ray
cluster (``--address`` or ``cluster.address``: total resources and each node's kind),
or else what a local Ray would get; with a ``space.yaml``: the config, the run dir and
the Optuna storage (writable, reachable) and the price of a trial-hour; without one,
``./runs``. Nothing is left behind: a writability probe creates and deletes one
temporary file. Any ``fail`` makes the exit code 1, else 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from hpsearch.adapters.system import RAY_TIMEOUT_S, ClusterInfo
from hpsearch.tools.doctor_checks import Check
from hpsearch.tools.doctor_cluster import cluster_checks, local_ray_check
from hpsearch.tools.doctor_machine import (cuda_check, hpsearch_check, nvml_check,
                                           python_check, torch_check)
from hpsearch.tools.doctor_packages import (PACKAGES, installed_version, package_check,
                                            requirements)
from hpsearch.tools.doctor_space import load_space, pricing_check
from hpsearch.tools.doctor_storage import (checkpoint_storage_checks, run_dir_check,
                                           runs_check, storage_check, storage_write_error)


def diagnose(space: str | Path | None = None, overrides: Sequence[str] = (),
             run_dir: str | Path | None = None, address: str | None = None,
             ray_timeout_s: float = RAY_TIMEOUT_S) -> list[Check]:
    """Run every check; the Python form of ``python -m hpsearch doctor``.

    Args:
        space: A ``space.yaml`` whose run dir, storage, price and cluster to check.
        overrides: ``--set`` overrides for it.
        run_dir: The run dir ``run --run-dir`` would get (default ``runs/<name>``).
        address: A Ray cluster to check (default ``cluster.address`` of ``space``);
            without one no Ray is started.
        ray_timeout_s: Most seconds the cluster may take to answer.

    Returns:
        The checks, in the order described in the module docstring. Nothing raises for
        a broken environment: every problem is a ``fail`` check.
    """
    from hpsearch.adapters import system

    checks, inventory = _environment_checks()
    config = catalog = None
    if space is not None:
        config, catalog = load_space(space, overrides, checks)
        if config is not None and address is None:
            address = config.cluster.address
    ckpt_url, ckpt_default = _checkpoints_of(config, run_dir)
    info = None
    if address is not None:
        info = system.cluster_info(address, ray_timeout_s, storage_url=ckpt_url)
        checks += cluster_checks(info, catalog, config)
    else:
        checks.append(local_ray_check(
            inventory, trial_gpus=config.resources.gpu if config is not None else 0.0))

    if config is not None:
        checks += _run_checks(config, run_dir, info, ckpt_url, ckpt_default)
    elif space is None:
        checks.append(runs_check() if run_dir is None else
                      run_dir_check(Path(run_dir), default=False))
    return checks


def _environment_checks() -> tuple[list[Check], Any]:
    """This machine's checks (Python, hpsearch, torch, NVML, CUDA, the packages) and the
    NVML inventory they read."""
    from hpsearch.adapters import nvml
    from hpsearch.adapters import system

    checks = [python_check(), hpsearch_check()]
    info = system.torch_info()
    inventory = nvml.inventory()
    checks += [torch_check(info), nvml_check(inventory), cuda_check(info, inventory)]
    wanted = requirements()
    for name, dist, pip_name, required in PACKAGES:
        checks.append(package_check(name, dist, pip_name, required, installed_version,
                                    wanted))
    return checks, inventory


def _checkpoints_of(config: Any,
                    run_dir: str | Path | None) -> tuple[str | None, bool | None]:
    """``(where the run's checkpoints go, whether that is the default place)``; both
    None without a config."""
    if config is None:
        return None, None
    from hpsearch.driver import default_run_dir

    path = Path(run_dir) if run_dir is not None else default_run_dir(config.name)
    default = config.checkpoint.storage is None
    return (str(path.absolute() / "checkpoints") if default
            else config.checkpoint.storage), default


def _run_checks(config: Any, run_dir: str | Path | None, info: ClusterInfo | None,
                ckpt_url: str, ckpt_default: bool) -> list[Check]:
    """The run's own checks: its run dir, study storage, price and checkpoint storage
    (written from here when no cluster was checked, from every node when one was)."""
    from hpsearch.driver import default_run_dir, storage_url_for

    path = Path(run_dir) if run_dir is not None else default_run_dir(config.name)
    checks = [run_dir_check(path, default=run_dir is None),
              storage_check(storage_url_for(config, path.absolute()), path,
                            default=config.storage is None),
              pricing_check(config)]
    local_error = None
    if info is None and not ckpt_default:
        local_error = storage_write_error(ckpt_url)
    return checks + checkpoint_storage_checks(ckpt_url, ckpt_default, info, local_error)
