"""The composition root: config -> study, Ray cluster, scheduler, runner -> results.

``run()`` validates everything it can before writing anything: the config, the
trainable's import path, compatibility with an existing study in the run dir, and that
some Ray node can hold one trial. Only then does it create the run dir:

    runs/<name>/
      space.yaml      the resolved config of the latest session (defaults filled in)
      ledger.jsonl    billed intervals of every trial (money spent and wasted)
      optuna.db       the Optuna study (unless ``storage`` points elsewhere)
      checkpoints/    trial-NNNN/: each trial's checkpoints (atomic, checksummed)
      tune/session-N  Ray Tune's experiment: per-attempt results and errors
      logs/           trial-NNNN.log: each trial's log records (Lightning, warnings)
      hpsearch.log    the driver's log (Ray and Tune warnings, trial errors)

Faults (see :mod:`hpsearch.recovery.faults`): one driver per run dir (a second is refused, exit
2); a read-only run dir is refused up front (exit 2); SIGTERM is handled like Ctrl-C
(exit 143 instead of 130); a full disk stops the run cleanly with every unfinished
trial resumable (exit 75); a study belongs to the run dir whose ledger holds its money
(another run dir on a shared study is refused, exit 2).

One module per job: :mod:`.prepare` (every check before the run dir is touched),
:mod:`.launch` (the lock, then :mod:`.nothing` to run or a :mod:`.session` on the Ray of
:mod:`.cluster`), the session's parts (:mod:`.header`, :mod:`.policies`, :mod:`.tuner`,
:mod:`.studymoney`, :mod:`.closing`, :mod:`.outputs`), and what they share: the run dir
(:mod:`.rundir`, :mod:`.ownership`, :mod:`.checkpoints`), signals (:mod:`.interrupts`),
logging (:mod:`.logs`), the process's settings (:mod:`.process`) and how trials run
(:mod:`.backend`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from hpsearch.driver.backend import LightningBackend
from hpsearch.driver.launch import start
from hpsearch.driver.outputs import RunResult
from hpsearch.driver.process import ProcessState
from hpsearch.driver.rundir import default_run_dir, storage_url_for
from hpsearch.errors import RunAborted, RunFailed, RunInterrupted

__all__ = ["run", "RunResult", "RunAborted", "RunFailed", "RunInterrupted",
           "LightningBackend", "default_run_dir", "storage_url_for"]


def run(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | list[str] | None = None,
    run_dir: str | Path | None = None,
    *,
    emit: Callable[[str], None] | None = print,
    progress_interval_s: float = 10.0,
    backend: Any = None,
    trainable: str | Callable[..., Any] | None = None,
) -> RunResult:
    """Run (or continue) a search: the Python form of ``python -m hpsearch run``.

    Args:
        source: Path to a ``space.yaml`` or the same content as a mapping.
        overrides: ``{"search.n_trials": 3}`` or ``["search.n_trials=3"]``.
        run_dir: Where results go; default ``runs/<name>/``. An existing run dir with a
            compatible study is continued: its finished trials count toward
            ``search.n_trials`` and its ledger toward ``budget.max_cost``.
        emit: Receives progress lines; ``None`` for silence.
        progress_interval_s: Least seconds between two status lines.
        backend: How trials run; default :class:`LightningBackend` (for benchmarks).
        trainable: The build function itself (a notebook's or a script's, cloudpickled
            to the trial processes), or an import path; replaces the ``trainable`` key,
            which may then be left out. A function is recorded in the study's config as
            ``module:qualname`` (see :func:`hpsearch.spec.trainable.display_name`), so a later
            run with the same function continues the study.

    Returns:
        A :class:`RunResult` with the study, the best trial and the run dir.

    Raises:
        ConfigError: Bad input, or a run dir that cannot be used as it is (read-only,
            held by another driver: :class:`~hpsearch.recovery.faults.RunDirBusy`, or a study
            that belongs to another run dir); nothing was written.
        LedgerCorrupt: A damaged line inside the ledger (``hpsearch repair`` mends it).
        RunAborted: A trial broke the trainable's contract (e.g. the objective is never
            logged): every trial would, so the run stopped at once (exit code 2).
        RunFailed: The first ``search.fail_fast`` trials all failed with the same error,
            or no trial of the session completed (exit code 1).
        RunInterrupted: Ctrl-C or SIGTERM; finished trials are kept, unfinished ones
            resume from their checkpoints.
        DiskFull: A write failed for lack of space; the run stopped cleanly and
            ``resume`` continues it once space is freed.
    """
    with ProcessState():
        return start(source, overrides, run_dir, emit=emit,
                     progress_interval_s=progress_interval_s, backend=backend,
                     trainable=trainable)


