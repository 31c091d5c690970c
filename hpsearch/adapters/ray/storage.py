"""Can every Ray node reach the checkpoint storage? Asked before a run spends anything,
and again for every node that joins later.

The probe (:class:`StorageProbe`) writes a token where the checkpoints go, from the
driver; then a task pinned to each node (``num_cpus=0``, so a busy node or a head that
runs no trials answers too) reads that token and writes one of its own, which the
driver reads back. A node passes only if both work: it sees the storage the driver sees
(a node whose own disk sits at the run dir's path does not: its read finds nothing) and
what it writes reaches it (credentials, permissions, a route to the endpoint).

:class:`StorageGuard` runs the probe for nodes that join while the run goes on (a
replacement spot node) from the Tune loop, without blocking it, and records every
verdict in :class:`~hpsearch.core.placement.Placement`, whose label selector keeps
trials off the nodes that failed. Each trial also reads the driver's token before it
trains (:class:`~hpsearch.recovery.storage.ProbeToken`), which covers a trial that
lands on a new node before its probe answered.
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from typing import Any, Callable

from hpsearch.recovery import storage
from hpsearch.recovery.storage import fix_hint

log = logging.getLogger("hpsearch")

#: Seconds a node has to answer the probe.
PROBE_TIMEOUT_S = 60.0
#: Least seconds between two looks for new nodes.
POLL_S = 2.0


def _on_node(url: str, driver_name: str, token: str, reply_name: str) -> str | None:
    """The probe's task on a node: read the driver's token, write this node's."""
    error = storage.check_token(url, driver_name, token)
    if error is not None:
        return error
    try:
        storage.Files(storage.open_location(url)).write(reply_name, token.encode())
    except Exception as exc:  # a read-only mount, no write permission, ...
        return f"it cannot write there: {storage._first_line(exc)}"
    return None


_REMOTE: Any = None


def _remote():
    """:func:`_on_node` as a Ray task (made once per process)."""
    global _REMOTE
    if _REMOTE is None:
        import ray

        _REMOTE = ray.remote(num_cpus=0, max_retries=0)(_on_node)
    return _REMOTE


class StorageProbe:
    """The driver's side of the probe, on one storage root.

    Args:
        url: The checkpoint storage's root (a path or a URL).
        timeout_s: Seconds each node has to answer.
    """

    def __init__(self, url: str, timeout_s: float = PROBE_TIMEOUT_S):
        self.url = url
        self.timeout_s = timeout_s
        self.token = secrets.token_hex(16)
        self.folder = f"{storage.PROBE_DIR}/{self.token}"
        self.files: storage.Files | None = None
        self._made: list[Path] = []

    @property
    def trial_token(self) -> storage.ProbeToken:
        """What trials read before they train."""
        return storage.ProbeToken(self.url, f"{self.folder}/driver", self.token)

    def open(self) -> "StorageProbe":
        """Write the driver's token (and, on a local disk, remember the folders made
        for it, to remove them again).

        Raises:
            OSError, ValueError: The driver itself cannot write there.
        """
        location = storage.open_location(self.url)
        if location.local is not None:
            path = location.local
            while not path.exists() and path.parent != path:
                self._made.append(path)
                path = path.parent
        self.files = storage.Files(location)
        self.files.write(f"{self.folder}/driver", self.token.encode())
        return self

    def launch(self, node_id: str):
        """Start the probe task on ``node_id``; its ObjectRef."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return _remote().options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            name="hpsearch-storage-probe",
        ).remote(self.url, f"{self.folder}/driver", self.token, self._reply(node_id))

    def _reply(self, node_id: str) -> str:
        return f"{self.folder}/node-{node_id}"

    def verdict(self, node_id: str, ref) -> str | None:
        """The finished probe of ``node_id``: None if it passed, else why not."""
        import ray

        try:
            error = ray.get(ref, timeout=0)
        except Exception as exc:  # the node died, the task could not start, ...
            return f"the probe task failed: {storage._first_line(exc)}"
        if error is not None:
            return error
        if self.files.read(self._reply(node_id)) != self.token.encode():
            return "what it wrote does not reach the storage the driver sees"
        return None

    def probe(self, node_ids: list[str]) -> dict[str, str | None]:
        """Probe ``node_ids`` at once and wait for them (at most ``timeout_s``)."""
        import ray

        refs = {node: self.launch(node) for node in node_ids}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs),
                            timeout=self.timeout_s)
        done = set(ready)
        return {node: (self.verdict(node, ref) if ref in done else
                       f"no answer within {self.timeout_s:g} s")
                for node, ref in refs.items()}

    def close(self) -> None:
        """Delete the probe's files (and the folders made for them)."""
        if self.files is None:
            return
        try:
            self.files.delete_dir(self.folder)
            if self.files.local is not None:
                (self.files.local / storage.PROBE_DIR).rmdir()
        except OSError:
            pass  # another probe's folder is there too, or it is gone already
        for path in self._made:
            try:
                path.rmdir()
            except OSError:
                break
        self.files = None


def alive_nodes(nodes: list[dict[str, Any]]) -> list[str]:
    """The ids of the alive nodes in a ``ray.nodes()`` list."""
    return [str(n["NodeID"]) for n in nodes if n.get("Alive")]


def refusal(url: str, default: bool, failed: dict[str, str], nodes: list[dict]) -> str:
    """The one line a run is refused with when ``failed`` nodes cannot reach ``url``."""
    where = {str(n["NodeID"]): n.get("NodeManagerAddress", "?") for n in nodes}
    first, why = next(iter(failed.items()))
    more = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
    shown = "the run dir's checkpoints/" if default else storage.shown(url)
    return (f"node {where.get(first, '?')} ({first[:8]}){more} cannot reach the "
            f"checkpoint storage {shown}: {why}; {fix_hint(url, default)}")


class StorageGuard:
    """Probes the nodes that join during a run; keeps trials off those that fail.

    Args:
        probe: The run's open :class:`StorageProbe`.
        placement: The run's placement (its verdicts and node list).
        warn: Shows a line to the user.
        default: Whether the storage is the run dir's (for the hint).
        give_up: Called with the reason once no alive node that can run a trial
            reaches the storage (the run stops: nothing could be placed).
        clock: Monotonic seconds.
    """

    def __init__(self, probe: StorageProbe, placement: Any, warn: Callable[[str], None],
                 default: bool, give_up: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.probe, self.placement, self.warn = probe, placement, warn
        self.default = default
        self.give_up = give_up
        self.clock = clock
        self._flying: dict[str, tuple[Any, float]] = {}
        self._polled = -1e9

    def poll(self) -> None:
        """Collect finished probes; start one for each alive node not judged yet."""
        import ray

        now = self.clock()
        if now - self._polled < POLL_S:
            return
        self._polled = now
        for node, (ref, since) in list(self._flying.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                self.judge(node, self.probe.verdict(node, ref))
            elif now - since > self.probe.timeout_s:
                self.judge(node, f"no answer within {self.probe.timeout_s:g} s")
            else:
                continue
            del self._flying[node]
        for node in self.placement.storage_unjudged():
            if node not in self._flying:
                self._flying[node] = (self.probe.launch(node), now)

    def judge(self, node: str, error: str | None) -> None:
        """Record a node's verdict (from its probe, or a trial that refused it)."""
        known = self.placement.storage_refused()
        self.placement.storage_verdict(node, error)
        if error is None:
            log.info("node %s reaches the checkpoint storage", node[:8])
            return
        if node not in known:
            self.warn(f"  node {node[:8]} cannot reach the checkpoint storage ({error}): "
                      f"no trial is placed on it; {fix_hint(self.probe.url, self.default)}")
        if self.give_up is not None and self.placement.none_reach_storage():
            self.give_up(f"no alive node reaches the checkpoint storage any more (node "
                         f"{node[:8]}: {error}); {fix_hint(self.probe.url, self.default)}")
