"""The run dir: where it is, its files, and what a run that never started leaves of it
(nothing it made only to hold the lock)."""

from __future__ import annotations

from pathlib import Path

from hpsearch.recovery import faults
from hpsearch.spec import config as config_mod

#: The ledger's file in the run dir.
LEDGER_FILE = "ledger.jsonl"


def default_run_dir(name: str) -> Path:
    """``runs/<name>``: the run dir of search ``name`` when none is given."""
    return Path("runs") / name


def storage_url_for(config: config_mod.Config, run_dir: Path) -> str:
    """The Optuna storage URL: ``storage`` if set, else the run dir's ``optuna.db``."""
    return config.storage or f"sqlite:///{run_dir / 'optuna.db'}"


def undo_start(lock: faults.RunLock, made: list[Path], run_path: Path) -> None:
    """A run that could not start leaves no run dir it made only to hold the lock."""
    if lock.held and made:
        lock.release()
        _remove_made(run_path, made)


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing


def _remove_made(run_path: Path, made: list[Path]) -> None:
    """Undo the folders made for a run that never started (only if still empty)."""
    try:
        (run_path / faults.LOCK_FILE).unlink()
    except OSError:
        return
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


def trial_log_path(run_path: Path, number: int) -> Path:
    """``logs/trial-NNNN.log`` in the run dir: a trial's log records and traceback."""
    from hpsearch.adapters.trial.runner import trial_name

    return run_path / "logs" / f"{trial_name(number)}.log"
