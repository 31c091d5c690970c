"""The probes behind ``python -m hpsearch doctor`` that need torch, Ray or a database.

Each returns plain data (:mod:`hpsearch.tools.doctor` turns it into checks) and never raises
for a broken environment. The Ray cluster is asked from a child process with a time
limit: ``ray.init(address=...)`` to an address where something listens but no Ray head
answers retries forever (measured: more than two minutes with Ray 2.60), and a port
where nothing listens is refused at once by a plain TCP connect first.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

from dataclasses import dataclass, field
from typing import Any, Mapping

#: Seconds the Ray probe may take to connect and list the cluster.
RAY_TIMEOUT_S = 30.0
#: Seconds a TCP connect to the head (or a database) may take.
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class TorchInfo:
    """What torch says about CUDA (see :func:`hpsearch.adapters.system.torch_info`).

    Attributes:
        version: ``torch.__version__``, or None when torch cannot be imported.
        cuda_build: ``torch.version.cuda`` (e.g. ``12.4``), None for a CPU-only build.
        cuda_available: ``torch.cuda.is_available()``.
        devices: The names of the CUDA devices torch sees.
        error: Why torch could not be imported, or the warning CUDA initialisation gave.
    """

    version: str | None
    cuda_build: str | None = None
    cuda_available: bool = False
    devices: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node: ``NodeID``, ``Alive``, address and ``Resources`` of ``ray.nodes()``."""

    node_id: str
    alive: bool
    address: str
    resources: Mapping[str, float] = field(default_factory=dict)

    def as_ray_node(self) -> dict[str, Any]:
        return {"NodeID": self.node_id, "Alive": self.alive,
                "NodeManagerAddress": self.address, "Resources": dict(self.resources)}


@dataclass(frozen=True)
class ClusterInfo:
    """What a Ray cluster said (or why it said nothing).

    Attributes:
        address: The address asked.
        error: Why it could not be reached; empty when it answered.
        resources: ``ray.cluster_resources()``.
        nodes: Every node ``ray.nodes()`` lists, dead ones included.
        seconds: How long connecting and listing took.
        storage: ``{node id: why it cannot reach the checkpoint storage, or None}``
            when the storage was probed (empty otherwise).
        storage_error: Why the probe could not write there from here, if so.
    """

    address: str
    error: str = ""
    resources: Mapping[str, float] = field(default_factory=dict)
    nodes: tuple[NodeInfo, ...] = ()
    seconds: float = 0.0
    storage: Mapping[str, str | None] = field(default_factory=dict)
    storage_error: str = ""


#: Prefixes the child's one line of JSON (Ray may print to stdout too).
MARKER = "@@hpsearch-doctor@@"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def torch_info() -> TorchInfo:
    """torch's version, CUDA build, ``cuda.is_available()`` and device names.

    The warning CUDA initialisation gives (e.g. a driver too old for this build) is
    kept in ``error``.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch

            version = str(torch.__version__)
            build = torch.version.cuda
            available = bool(torch.cuda.is_available())
            devices: tuple[str, ...] = ()
            if available:
                devices = tuple(torch.cuda.get_device_name(i)
                                for i in range(torch.cuda.device_count()))
        except Exception as exc:  # ImportError, OSError (a missing CUDA library), ...
            return TorchInfo(None, error=_first_line(exc))
    notes = [str(w.message).strip().splitlines()[0] for w in caught
             if "cuda" in str(w.message).lower() and str(w.message).strip()]
    return TorchInfo(version, build, available, devices, notes[0] if notes else "")


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for ``auto``."""
    text = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _tcp_error(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.timeout:
        return f"no reply from {host}:{port} within {timeout_s:g} s"
    except OSError as exc:
        return f"nothing accepts connections at {host}:{port} ({exc.strerror or exc})"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the hpsearch this process runs
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def cluster_info(address: str, timeout_s: float = RAY_TIMEOUT_S,
                 storage_url: str | None = None) -> ClusterInfo:
    """Connect to the Ray cluster at ``address`` and list its resources and nodes; with
    ``storage_url``, also probe whether every alive node reaches the checkpoint storage
    there (see :mod:`hpsearch.adapters.ray.storage`; its files are removed again).

    Args:
        address: ``host:port`` of the head's GCS, ``ray://host:port`` or ``auto``.
        timeout_s: Most seconds for connecting and listing (the storage probe has
            :data:`STORAGE_PROBE_S` more).
        storage_url: The checkpoint storage's root (a path or a URL), or None.

    Returns:
        A :class:`ClusterInfo`; ``error`` says why nothing came back.
    """
    start = time.monotonic()
    target = _host_port(address)
    if target is not None:
        error = _tcp_error(*target)
        if error is not None:
            return ClusterInfo(address, error=error, seconds=time.monotonic() - start)
    code = ("import sys; from hpsearch.adapters.system import probe_cluster; "
            "probe_cluster(*sys.argv[1:])")
    args = [address] + ([storage_url] if storage_url is not None else [])
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_child_env(),
                            start_new_session=True)
    try:
        out, err = proc.communicate(
            timeout=timeout_s + (STORAGE_PROBE_S + 5 if storage_url is not None else 0))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return ClusterInfo(address, seconds=time.monotonic() - start, error=(
            f"no Ray head answered within {timeout_s:g} s (something accepts connections "
            f"there: is it the head's GCS port, 6379 by default? A busy head or a slow "
            f"link may need longer: doctor --timeout S)"))
    seconds = time.monotonic() - start
    lines = [line for line in out.splitlines() if line.startswith(MARKER)]
    if not lines:
        tail = [line for line in err.strip().splitlines() if line.strip()]
        return ClusterInfo(address, seconds=seconds, error=(
            f"the probe exited with code {proc.returncode}: "
            f"{tail[-1] if tail else 'no output'}"))
    data = json.loads(lines[-1][len(MARKER):])
    if data.get("error"):
        return ClusterInfo(address, error=data["error"], seconds=seconds)
    nodes = tuple(NodeInfo(str(n.get("NodeID", "")), bool(n.get("Alive")),
                           str(n.get("NodeManagerAddress", "")),
                           dict(n.get("Resources") or {})) for n in data["nodes"])
    probed = data.get("storage") or {}
    return ClusterInfo(address, "", dict(data["resources"]), nodes, seconds,
                       storage=dict(probed.get("nodes") or {}),
                       storage_error=probed.get("error") or "")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, OSError):
        proc.kill()
    proc.communicate()


def probe_cluster(address: str, storage_url: str | None = None) -> None:
    """In the child process: connect, list, probe the checkpoint storage from every
    alive node (with ``storage_url``), print one marker line of JSON, disconnect."""
    import logging

    import ray

    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # ConnectionError, ValueError (a bad address), ...
        print(MARKER + json.dumps({"error": _first_line(exc)}), flush=True)
        return
    try:
        keep = ("NodeID", "Alive", "NodeManagerAddress", "Resources")
        nodes = ray.nodes()
        data = {"resources": ray.cluster_resources(),
                "nodes": [{k: n.get(k) for k in keep} for n in nodes]}
        if storage_url is not None:
            data["storage"] = probe_storage(storage_url, nodes)
    except Exception as exc:
        data = {"error": _first_line(exc)}
    finally:
        ray.shutdown()
    print(MARKER + json.dumps(data), flush=True)


#: Seconds every node has to answer doctor's storage probe.
STORAGE_PROBE_S = 20.0


def probe_storage(url: str, nodes: list[dict]) -> dict:
    """``{"error": why the driver cannot write there or None, "nodes": {node id: why
    it cannot reach it, or None}}``; the probe's files are removed again."""
    from hpsearch.adapters.ray.storage import StorageProbe, alive_nodes

    probe = StorageProbe(url, timeout_s=STORAGE_PROBE_S)
    try:
        probe.open()
    except Exception as exc:  # no credentials, no route, read-only, ...
        probe.close()
        return {"error": _first_line(exc), "nodes": {}}
    try:
        return {"error": None, "nodes": probe.probe(alive_nodes(nodes))}
    finally:
        probe.close()


def _connect_args(url: str) -> dict:
    # Drivers wait a long time on an unreachable host unless told otherwise.
    if url.startswith(("postgresql", "mysql")):
        return {"connect_timeout": int(CONNECT_TIMEOUT_S)}
    return {}


def rdb_error(url: str) -> str | None:
    """Why the Optuna storage at ``url`` cannot be used, or None.

    Connects without writing anything; when the database already holds Optuna's
    tables, opens it as ``optuna.storages.RDBStorage`` (tables not created) so that a
    schema from another Optuna version is reported too.
    """
    try:
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        engine = sqlalchemy.create_engine(url, poolclass=NullPool,
                                          connect_args=_connect_args(url))
        try:
            with engine.connect():
                pass
            has_study = sqlalchemy.inspect(engine).has_table("version_info")
        finally:
            engine.dispose()
        if has_study:
            import optuna

            optuna.storages.RDBStorage(url, skip_table_creation=True)
    except Exception as exc:  # no driver, refused, bad credentials, old schema, ...
        return _first_line(exc)
    return None
