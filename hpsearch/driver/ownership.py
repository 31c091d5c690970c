"""Whether a run dir may run the study its config names: a study belongs to the run dir
whose ledger holds its money, and continues only with a compatible config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from hpsearch import keys
from hpsearch.errors import ConfigError
from hpsearch.report.progress import display_path, display_url
from hpsearch.spec import config as config_mod
from hpsearch.spec import study_storage


def check_existing_study(config: config_mod.Config, url: str, ledger=None,
                         run_path: Path | None = None) -> bool:
    """Raise if the study in ``url`` cannot be continued with ``config`` from this run
    dir's ``ledger``; True if it exists.

    A study's money is in the ledger of the run dir it ran from, whose id the study
    records. Another run dir on the same (shared) study would start from zero money and
    overspend its budget: it is refused. A run dir moved or copied with its SQLite study
    keeps its ledger and so its id, and continues. A study from before ids (or made by
    hand) is taken over unless it has trials billed in a ledger that is not this one.
    """
    from hpsearch.adapters.optuna.study import check_compatible, existing_study_record

    db_file = study_storage.sqlite_file(url)
    if db_file is not None and not db_file.exists():
        return False  # opening it would create it: nothing to check
    record = existing_study_record(url, config.name)
    if record is None:
        return False
    attrs, billed = record
    check_compatible(dict(attrs.get(keys.ATTR_CONFIG) or {}), config)
    if ledger is not None:
        check_owner(config, url, attrs, billed, ledger, run_path)
    return True


def check_owner(config, url: str, attrs: Mapping[str, Any], billed: set[int], ledger,
                 run_path: Path | None) -> None:
    """Refuse to run study ``config.name`` from a run dir whose ledger is not its own."""
    owner = attrs.get(keys.ATTR_LEDGER_ID)
    where = attrs.get(keys.ATTR_RUN_DIR)
    if owner is not None and owner == ledger.id:
        return
    elsewhere = where is not None and run_path is not None and Path(where) != run_path
    if owner is None:
        foreign = sorted(billed - set(ledger.trials()))
        if not foreign:
            return
        why = (f"its trials {', '.join(map(str, foreign[:5]))}"
               f"{' ...' if len(foreign) > 5 else ''} were billed in another run dir's "
               f"ledger, so its money would restart from zero here")
    elif elsewhere:
        why = (f"it belongs to run dir {display_path(Path(where))}, whose ledger.jsonl "
               f"holds its money")
    else:
        why = ("its money is in another ledger than this run dir's ledger.jsonl (replaced "
               "or deleted?), so it would restart from zero here")
    hint = (f"continue it there (--run-dir {display_path(Path(where))})" if elsewhere
            else "continue it from the run dir it ran in")
    shown = display_path(run_path) if run_path is not None else "this run dir"
    raise ConfigError(
        "storage", f"study '{config.name}' cannot be run from {shown}: {why}; {hint}, or "
        f"give this search another name", display_url(url, run_path or Path(".")))
