"""Where a run's checkpoints go, what that storage costs, and whether every node reaches
it: the composition root's view of ``checkpoint.storage`` (used by :mod:`hpsearch.driver`).

* ``checkpoint.storage: null``: each trial's store is ``<run dir>/checkpoints/trial-NNNN``,
  as before object stores. On a cluster that is only right where every node mounts the
  run dir; the probe finds out before anything is spent.
* A URL or shared path: trials keep their checkpoints in
  ``<storage>/<name>-<ledger id>/trial-NNNN/``, one folder per run dir (a study's run dir
  is named by its ledger's id: see :mod:`hpsearch.money.ledger`), so several runs share
  a bucket and a continued (or moved) run dir finds its checkpoints again. The driver's
  run dir (study, ledger, report, Tune's experiment) stays on the driver's disk.

Before a run spends anything the driver writes, reads and deletes a token there (no
credentials, a typo in the bucket: refused), and on a cluster every alive node is
probed (:mod:`hpsearch.adapters.ray.storage`): a node that cannot reach the storage
refuses the run with one line saying what to configure. Nodes joining later are probed
by the storage guard, and trials avoid those that fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from hpsearch.errors import ConfigError
from hpsearch.money import storage as storage_money
from hpsearch.recovery import storage

FIELD = "checkpoint.storage"


class RunCheckpoints:
    """A run's checkpoint storage.

    Args:
        config: The run's config.
        run_path: The run dir (absolute).

    Raises:
        ConfigError: The storage cannot be opened here (a missing package, a bad
            option), or ``checkpoint.storage_price`` names no row.
    """

    def __init__(self, config: Any, run_path: Path):
        value = config.checkpoint.storage
        self.default = value is None
        self.root = str(run_path / "checkpoints") if value is None else value
        if not self.default:
            error = storage.open_error(self.root)
            if error is not None:
                raise ConfigError(FIELD, f"cannot be opened here: {error}",
                                  storage.shown(self.root))
        self.price = storage_money.resolve(config.checkpoint.storage_price, value)
        #: Where the trials' stores are (set for the run by :meth:`for_run`).
        self.trials_url = self.root
        self.probe: Any = None
        self.verdicts: dict[str, str | None] = {}

    @property
    def shown(self) -> str:
        """The trials' folder, as printed."""
        return storage.shown(self.trials_url)

    def for_run(self, name: str, ledger_id: str) -> str:
        """Fix the trials' folder of the run dir whose ledger is ``ledger_id``."""
        if not self.default:
            self.trials_url = storage.join_url(self.root, f"{name}-{ledger_id[:12]}")
        return self.trials_url

    def trial(self, name: str) -> str:
        """Trial folder ``name`` (``trial-0007``): a path or a URL."""
        return storage.join_url(self.trials_url, name)

    def check(self, nodes: list[dict[str, Any]] | None) -> None:
        """Write, read and delete a token where the checkpoints go; with ``nodes`` (a
        cluster's ``ray.nodes()``), also probe every alive node and keep the probe open
        for the trials' own check and the guard.

        Raises:
            ConfigError: The driver or some node cannot reach the storage.
        """
        from hpsearch.adapters.ray.storage import StorageProbe, alive_nodes, refusal

        if self.default and nodes is None:
            return  # the run dir's writability is checked with the run dir
        probe = StorageProbe(self.root)
        try:
            probe.open()
            if probe.files.read(f"{probe.folder}/driver") != probe.token.encode():
                raise OSError("what the driver wrote cannot be read back")
        except Exception as exc:  # OSError, ArrowInvalid, no credentials, ...
            probe.close()
            raise ConfigError(FIELD, f"the driver cannot write there: "
                                     f"{storage._first_line(exc)}",
                              storage.shown(self.root)) from None
        if nodes is None:
            probe.close()
            return
        try:
            verdicts = probe.probe(alive_nodes(nodes))
        except BaseException:
            probe.close()
            raise
        failed = {n: e for n, e in verdicts.items() if e is not None}
        if failed:
            probe.close()
            raise ConfigError(FIELD, refusal(self.root, self.default, failed, nodes))
        self.probe = probe
        self.verdicts = verdicts

    def guard(self, placement: Any, warn: Callable[[str], None], give_up: Callable[[str], None]):
        """The storage guard of the run (None without a cluster probe), with the start's
        verdicts recorded in ``placement``."""
        if self.probe is None:
            return None
        from hpsearch.adapters.ray.storage import StorageGuard

        for node, error in self.verdicts.items():
            placement.storage_verdict(node, error)
        return StorageGuard(self.probe, placement, warn, self.default, give_up=give_up)

    def preempted_note(self, store_name: str, trial_id: str) -> dict | None:
        """The preemption note a trial's process left in its store, if any."""
        from hpsearch.recovery.checkpoint import CheckpointStore

        try:
            return CheckpointStore(self.trial(store_name)).preempted(trial_id)
        except Exception:  # the storage is unreachable from here for a moment
            return None

    def study_attrs(self) -> dict[str, Any]:
        """What the study records about its checkpoint storage (for the report)."""
        from hpsearch import keys

        return {keys.ATTR_CHECKPOINT_STORAGE: self.shown,
                keys.ATTR_STORAGE_PRICE: self.price.to_dict()}

    def close(self) -> None:
        """Delete the probe's files."""
        if self.probe is not None:
            self.probe.close()
            self.probe = None
