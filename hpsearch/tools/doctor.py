"""``python -m hpsearch doctor``: is this machine (and cluster) ready to run a search?

Pure module: the checks are plain data (:class:`Check`), rendered one line each with a
status mark and, when not ok, an indented ``fix:`` line. The facts come from probes
that import nothing heavy at module level: torch is imported inside
:func:`hpsearch.adapters.system.torch_info`; a Ray cluster is asked from a child
process (:func:`hpsearch.adapters.system.cluster_info`) so that an address where
no Ray head answers cannot hang the doctor; NVML through :func:`hpsearch.adapters.nvml.inventory`.

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

import json
import os
import platform
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpsearch.adapters.system import (RAY_TIMEOUT_S, ClusterInfo, NodeInfo,
                                      TorchInfo)

OK = "ok"
WARN = "warn"
FAIL = "fail"
STATUSES = (OK, WARN, FAIL)
MARKS = {OK: "[ok]  ", WARN: "[warn]", FAIL: "[FAIL]"}


CUDA_FIX = ("install a CUDA build of torch matching the driver, e.g. `pip install torch "
            "--index-url https://download.pytorch.org/whl/cu124` (pick the CUDA version "
            "at most the driver's, as `nvidia-smi` shows it)")


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes:
        name: What was checked (``torch``, ``nvml``, ``run dir``, ...).
        status: ``ok``, ``warn`` (works, but worth knowing) or ``fail`` (something a
            run needs is broken).
        message: One line: what was found.
        fix: What to do about it; empty when ``status`` is ``ok``.
    """

    name: str
    status: str
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def render(checks: Iterable[Check]) -> list[str]:
    """One line per check (``[ok]   name: message``), plus ``fix:`` lines when not ok."""
    lines = []
    for check in checks:
        lines.append(f"{MARKS[check.status]} {check.name}: {check.message}")
        if check.status != OK and check.fix:
            lines.append(f"       fix: {check.fix}")
    return lines


def to_json(checks: Iterable[Check]) -> str:
    """The checks as a JSON list of ``{name, status, message, fix}``."""
    return json.dumps([c.to_dict() for c in checks], indent=2)


def exit_code(checks: Iterable[Check]) -> int:
    """1 if any check failed, else 0."""
    return 1 if any(c.status == FAIL for c in checks) else 0


def summary(checks: Sequence[Check]) -> str:
    """``3 ok, 1 warning, 0 failed``."""
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    return (f"{counts[OK]} ok, {counts[WARN]} warning(s), {counts[FAIL]} failed")


# ---------------------------------------------------------------------------------------
# Facts gathered by the probes.


# ---------------------------------------------------------------------------------------
# Interpreting the facts.


def python_check() -> Check:
    version = platform.python_version()
    if sys.version_info < (3, 10):
        return Check("python", FAIL, f"Python {version} ({sys.executable})",
                     "hpsearch needs Python 3.10 or later")
    return Check("python", OK, f"Python {version} ({sys.executable})")


def hpsearch_check() -> Check:
    from hpsearch.version import __version__

    where = Path(__file__).resolve().parent
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


#: (check name, distribution, what to ``pip install``, whether a missing one fails).
PACKAGES = (
    ("lightning", "pytorch-lightning", "pytorch-lightning", True),
    ("ray", "ray", "ray[tune]", True),
    ("optuna", "optuna", "optuna", True),
    ("optuna-dashboard", "optuna-dashboard", "optuna-dashboard", False),
)


def requirements() -> dict[str, str]:
    """``{distribution: specifier}`` hpsearch was installed with (empty from a checkout
    that was never ``pip install``-ed)."""
    from importlib import metadata

    try:
        from packaging.requirements import InvalidRequirement, Requirement

        lines = metadata.requires("hpsearch") or []
    except (ImportError, metadata.PackageNotFoundError):
        return {}
    out = {}
    for line in lines:
        if ";" in line:  # extras (test, bench) are not needed to run
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        # Lower bounds first: ">=2.2,<3" reads better than SpecifierSet's "<3,>=2.2".
        out[req.name.lower()] = ",".join(sorted(
            (str(spec) for spec in req.specifier), key=lambda t: (not t.startswith(">"), t)))
    return out


def package_check(name: str, dist: str, pip_name: str, required: bool,
                  version: Callable[[str], str | None],
                  wanted: Mapping[str, str]) -> Check:
    """Whether ``dist`` is installed, at a version hpsearch accepts."""
    found = version(dist)
    if found is None:
        status = FAIL if required else WARN
        what = "is not installed" + ("" if required else
                                     ": `hpsearch dashboard` and the optuna-dashboard "
                                     "command need it")
        return Check(name, status, f"{dist} {what}", f"pip install {pip_name}")
    spec = wanted.get(dist.lower(), "")
    if spec:
        try:
            from packaging.specifiers import SpecifierSet

            ok = SpecifierSet(spec).contains(found, prereleases=True)
        except Exception:  # an odd local version string: do not guess
            ok = True
        if not ok:
            return Check(name, FAIL if required else WARN,
                         f"{dist} {found} is installed, but hpsearch needs {dist}{spec}",
                         f"pip install '{pip_name}{spec}'")
    return Check(name, OK, f"{dist} {found}" + (f" (hpsearch needs {spec})" if spec else ""))


def local_ray_check(inventory: Any, cpus: int | None = None,
                    trial_gpus: float = 0.0) -> Check:
    """Without an address: what the local Ray that ``run`` starts would get, and whether
    a trial reserving ``trial_gpus`` could be placed on it."""
    from hpsearch.adapters.nvml import visible_indices

    cpus = cpus or os.cpu_count() or 1
    visible = visible_indices()
    gpus = inventory.count if visible is None else len(
        [i for i in visible if i < inventory.count])
    message = (f"no cluster address: `run` starts a local Ray with this machine's "
               f"{cpus} CPU(s) and {gpus} GPU(s) (not started now; `--address HOST:PORT` "
               f"or `cluster.address` checks a running cluster)")
    if trial_gpus > gpus:
        return Check("ray cluster", FAIL,
                     f"{message}; trials reserve resources.gpu={trial_gpus:g}, so none "
                     f"could start here",
                     "run on a machine with enough GPUs, join a cluster that has them "
                     "(cluster.address), or set resources.gpu: 0 to train on CPU")
    return Check("ray cluster", OK, message)


UNREACHABLE_FIX = ("start the head on the head machine with `ray start --head "
                   "--port=6379` and pass the address it prints (HOST:6379); check the "
                   "host, the port and firewalls between here and the head "
                   "(`ray status --address HOST:PORT`)")


def _gib(value: float) -> str:
    return f"{value / 1024 ** 3:.1f} GiB"


def node_kind(node: NodeInfo) -> str:
    """``spot``, ``on-demand`` or ``undeclared``, with ``instance X`` when declared."""
    from hpsearch.money import nodekinds

    kind = nodekinds.parse_node(node.as_ray_node())
    text = {True: "spot", False: "on-demand", None: "undeclared kind"}[kind.spot]
    if kind.instance:
        text += f", instance {kind.instance}"
    return text


def cluster_checks(info: ClusterInfo, catalog: Any = None, config: Any = None) -> list[Check]:
    """The cluster's reachability and resources, then one check per alive node.

    A node declares its kind with the custom resources ``hps_spot`` or
    ``hps_on_demand`` and ``hps_instance=<catalogue row>`` (see
    :mod:`hpsearch.money.nodekinds`). A node that declares none runs any trial, priced at
    ``pricing.instance``, as long as no node declares a kind; once some node does,
    trials ask for their kind and an undeclared node gets none.
    """
    from hpsearch.money import nodekinds

    if info.error:
        return [Check("ray cluster", FAIL, f"cannot reach the Ray cluster at {info.address}: "
                                           f"{info.error}", UNREACHABLE_FIX)]
    res = info.resources
    alive = [n for n in info.nodes if n.alive]
    dead = len(info.nodes) - len(alive)
    totals = (f"CPU {res.get('CPU', 0):g}, GPU {res.get('GPU', 0):g}, memory "
              f"{_gib(res.get('memory', 0))}")
    checks = [Check("ray cluster", OK,
                    f"{info.address}: {len(alive)} alive node(s)"
                    f"{f', {dead} dead' if dead else ''}; {totals} ({info.seconds:.1f} s)")]
    kinds = [nodekinds.parse_node(n.as_ray_node()) for n in alive]
    declared = nodekinds.declared(kinds)
    checks += [_node_check(node, kind, declared, catalog)
               for node, kind in zip(alive, kinds)]
    if config is not None:
        fit = _fit_check(config, info)
        if fit is not None:
            checks.append(fit)
    return checks


def _node_check(node: Any, kind: Any, declared: bool, catalog: Any) -> Check:
    """One alive node: its kind and resources, whether trials are placed on it
    (``declared``: some node declares its kind) and whether its instance can be priced."""
    from hpsearch.money import nodekinds

    name = f"ray node {node.address} ({node.node_id[:8]})"
    own = (f"CPU {node.resources.get('CPU', 0):g}, GPU {node.resources.get('GPU', 0):g}")
    text = f"{node_kind(node)}; {own}"
    if kind.spot is None and declared:
        return Check(
            name, WARN, f"{text}: other nodes declare their kind, so no trial is "
                        "placed on this one",
            f"start it with `--resources '{{\"{nodekinds.ON_DEMAND}\": 1000}}'` (or "
            f"{nodekinds.SPOT}), plus `\"{nodekinds.INSTANCE_PREFIX}<catalogue row>\": "
            f"1000` to price it")
    if kind.spot is None and not kind.instance:
        text += (": runs any trial at the configured price (no node declares "
                 f"{nodekinds.SPOT}/{nodekinds.ON_DEMAND})")
    if kind.instance and catalog is not None:
        from hpsearch.errors import ConfigError

        try:
            catalog.lookup(kind.instance)
        except ConfigError as exc:
            return Check(
                name, FAIL, f"{text}: its instance cannot be priced: {exc.reason}",
                "declare a catalogue row (`python -m hpsearch catalog` lists them) or "
                "add the row with pricing.catalog")
    return Check(name, OK, text)


def _fit_check(config: Any, info: ClusterInfo) -> Check | None:
    """A failed check when no node of the cluster is large enough for one trial."""
    from hpsearch.core.placement import check_fits
    from hpsearch.errors import ConfigError

    try:
        check_fits(config, [n.as_ray_node() for n in info.nodes])
    except ConfigError as exc:
        return Check("trial fits", FAIL, str(exc),
                     "lower resources.cpu / resources.gpu, or add a node that large")
    return None


def checkpoint_storage_checks(url: str, default: bool, info: ClusterInfo | None = None,
                              local_error: str | None = None) -> list[Check]:
    """Whether the checkpoints can be written where they go: from here
    (``local_error``, or ``info.storage_error``) and, on a cluster, from every alive
    node (``info.storage``: the probe of :func:`hpsearch.adapters.system.cluster_info`).
    """
    from hpsearch.recovery.storage import fix_hint, shown

    where = "the run dir's checkpoints/" if default else shown(url)
    error = local_error or (info.storage_error if info is not None else "")
    if error:
        return [Check("checkpoint storage", FAIL, f"{where}: cannot be written from here: "
                                                  f"{error}", fix_hint(url, False))]
    if info is None or info.error:
        text = (f"{where} (this machine's disk)" if default else
                f"{where}: a token was written, read back and deleted")
        return [Check("checkpoint storage", OK, text)]
    address = {n.node_id: n.address for n in info.nodes}
    failed = {n: e for n, e in info.storage.items() if e is not None}
    checks = [Check("checkpoint storage", FAIL,
                    f"node {address.get(node, '?')} ({node[:8]}) cannot reach {where}: "
                    f"{why}", fix_hint(url, default)) for node, why in failed.items()]
    if not failed:
        checks.append(Check("checkpoint storage", OK,
                            f"{where}: every alive node ({len(info.storage)}) read the "
                            f"driver's token there and wrote its own"))
    return checks


# ---------------------------------------------------------------------------------------
# Storage.


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable(path: Path) -> str | None:
    """Why a directory could not be created at (or a file written into) ``path``, or
    None when it can: a temporary file is created and deleted in ``path`` or in its
    nearest existing parent; nothing else is touched."""
    base = _nearest_existing(path)
    if not base.is_dir():
        return f"{base} is a file, not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".hpsearch-doctor-", dir=base)
    except OSError as exc:
        return f"cannot create a file in {base} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def run_dir_check(run_dir: Path, default: bool) -> Check:
    from hpsearch.report.progress import display_path

    shown = display_path(run_dir.absolute())
    why = writable(run_dir)
    if why is not None:
        return Check("run dir", FAIL, f"{shown} cannot be created or written: {why}",
                     "choose another run dir (`--run-dir DIR`, or another `name`) or make "
                     "that directory writable")
    if run_dir.is_dir():
        state = "exists and is writable"
        if (run_dir / "space.yaml").is_file():
            state += " (a run dir: `run` continues its study)"
    else:
        state = f"will be created (in {_nearest_existing(run_dir)}, writable)"
    return Check("run dir", OK, f"{shown} {state}"
                                + (" (the default: runs/<name>)" if default else ""))


def runs_check(cwd: Path | None = None) -> Check:
    """Without a space.yaml: can ``./runs`` hold run dirs?"""
    runs = (cwd or Path.cwd()) / "runs"
    why = writable(runs)
    if why is not None:
        return Check("run dir", FAIL, f"runs/ (where run dirs go by default) is not "
                                      f"writable: {why}",
                     "run from a writable directory, or give `run --run-dir DIR`")
    return Check("run dir", OK, f"{runs} is writable (run dirs go to runs/<name> by "
                                "default; give SPACE.yaml to check its own)")


def storage_check(url: str, run_dir: Path, default: bool = False,
                  connect: Callable[[str], str | None] | None = None) -> Check:
    """The Optuna storage: a SQLite file's directory is writable; any other URL connects.

    Args:
        url: The storage URL ``run`` would use.
        run_dir: The run dir (to show paths relative to it).
        default: Whether ``url`` is the default ``<run dir>/optuna.db``.
        connect: ``url -> error or None`` for non-SQLite URLs (default
            :func:`hpsearch.adapters.system.rdb_error`).
    """
    from hpsearch.report.progress import display_url
    from hpsearch.spec.config import sqlite_file

    shown = display_url(url, run_dir.absolute())
    db = sqlite_file(url)
    if db is not None:
        # SQLite writes a journal next to the file: its directory must be writable too.
        if not db.exists():
            why = writable(db.parent)
        elif not db.is_file():
            why = f"{db} is not a file"
        elif not os.access(db, os.W_OK):
            why = f"{db} is read-only"
        else:
            why = writable(db.parent)
        if why is not None:
            fix = ("it is the run dir's optuna.db: fix the run dir (see above), or point "
                   "`storage` elsewhere" if default else
                   "point `storage` at a writable path (`--set storage=sqlite:////abs/"
                   "path.db`), or drop it to use <run dir>/optuna.db")
            return Check("storage", FAIL, f"{shown}: the SQLite file cannot be created or "
                                          f"written: {why}", fix)
        state = "exists" if db.exists() else "will be created"
        where = ", in the run dir" if default else ""
        return Check("storage", OK, f"{shown} (SQLite; {state}{where})")
    if url.startswith("sqlite:"):
        return Check("storage", WARN, f"{shown}: not a SQLite file URL (sqlite:///path)",
                     "use `sqlite:////absolute/path.db` or `sqlite:///relative/path.db`")
    if connect is None:
        from hpsearch.adapters.system import rdb_error

        connect = rdb_error
    error = connect(url)
    if error is not None:
        return Check("storage", FAIL, f"{shown}: cannot connect: {error}",
                     "check the URL, that the database server is up and reachable from "
                     "here and the credentials; the driver package must be installed "
                     "(e.g. psycopg2-binary for postgresql://, pymysql for "
                     "mysql+pymysql://)")
    return Check("storage", OK, f"{shown}: connected")


def pricing_check(config: Any) -> Check:
    from hpsearch.adapters import nvml
    from hpsearch.money import pricing
    from hpsearch.money.fmt import fmt_money
    from hpsearch.errors import ConfigError

    try:
        price = pricing.resolve(config, gpu=nvml.for_pricing(config))
    except ConfigError as exc:
        return Check("pricing", FAIL, str(exc),
                     "`python -m hpsearch catalog` lists the catalogue's rows; or set "
                     "pricing.price_per_hour with pricing.currency")
    text = (f"a trial-hour costs {fmt_money(price.per_hour, price.currency)} on "
            f"{price.instance}{' (spot)' if price.spot else ''}")
    if price.note:
        text += f"; {price.note}"
    return Check("pricing", OK, text)


# ---------------------------------------------------------------------------------------
# Everything.


def _counted(names: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _storage_write_error(url: str) -> str | None:
    """Why a token cannot be written, read back and deleted at ``url`` from here."""
    from hpsearch.adapters.ray.storage import StorageProbe

    probe = StorageProbe(url)
    try:
        probe.open()
        if probe.files.read(f"{probe.folder}/driver") != probe.token.encode():
            return "what was written cannot be read back"
    except Exception as exc:  # no credentials, no route, a missing package, ...
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    finally:
        probe.close()
    return None


def _load_space(space: str | Path, overrides: Sequence[str],
                checks: list[Check]) -> tuple[Any, Any]:
    """``(config, catalog)`` of ``space`` (None for what does not load), its check
    appended to ``checks``; the pricing check reports a catalogue that does not load."""
    from hpsearch.errors import ConfigError
    from hpsearch.money import catalog as catalog_mod
    from hpsearch.spec import config as config_mod

    try:
        config = config_mod.load(space, list(overrides))
    except ConfigError as exc:
        checks.append(Check("space.yaml", FAIL, str(exc),
                            "fix the file; `python -m hpsearch validate SPACE.yaml` "
                            "checks it alone"))
        return None, None
    checks.append(Check("space.yaml", OK, f"{space}: {config.name}, "
                                          f"{len(config.space)} parameter(s)"))
    try:
        return config, catalog_mod.load(config.pricing.catalog)
    except ConfigError:
        return config, None


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
        config, catalog = _load_space(space, overrides, checks)
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
        checks.append(package_check(name, dist, pip_name, required, _version, wanted))
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
        local_error = _storage_write_error(ckpt_url)
    return checks + checkpoint_storage_checks(ckpt_url, ckpt_default, info, local_error)
