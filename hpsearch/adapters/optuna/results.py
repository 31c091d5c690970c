"""Read a study of record for the report, the dashboard and notebooks (Optuna adapter).

A *source* is a run dir or an Optuna storage URL. A run dir's study lives in
``sqlite:///<run dir>/optuna.db`` unless its ``space.yaml`` names another ``storage``.
Reading never creates anything: a missing run dir, a missing SQLite file, a storage
without a study, or an unknown ``--study`` is a :class:`~hpsearch.errors.ConfigError`
naming the value. Everything the report needs is in the storage (the trials' user
attributes carry their money), so a run from another machine or one still in progress
reads the same way; RUNNING trials come with what they were billed up to their latest
epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import optuna
import yaml

from hpsearch.report import report as report_mod
from hpsearch.report import writers
from hpsearch.report.rows import ROW_COLUMNS
from hpsearch.adapters.optuna.curve_sampler import EarlierStudy
from hpsearch.adapters.optuna.study import make_storage
from hpsearch.errors import ConfigError

SQLITE_PREFIX = "sqlite:///"


@dataclass(frozen=True)
class Source:
    """Where a study is read from.

    Attributes:
        url: The Optuna storage URL.
        run_dir: The run dir, as the user named it, or None for a URL.
        name_hint: The run's study name from its ``space.yaml``, if any.
    """

    url: str
    run_dir: Path | None = None
    name_hint: str | None = None


def is_url(text: str) -> bool:
    return "://" in text


def resolve_source(source: str | Path) -> Source:
    """The storage URL of a run dir or URL; ConfigError if there is no study to read."""
    text = str(source)
    if is_url(text):
        _check_sqlite_file(text, "storage", text)
        return Source(text)
    run_dir = Path(text)
    if not run_dir.exists():
        raise ConfigError("run dir", "not found", text)
    if not run_dir.is_dir():
        raise ConfigError("run dir", "is not a directory (give a run dir or a storage URL)",
                          text)
    space = _read_space(run_dir / "space.yaml")
    name = space.get("name") if isinstance(space.get("name"), str) else None
    storage = space.get("storage")
    if isinstance(storage, str) and storage:
        _check_sqlite_file(storage, "storage", storage)
        return Source(storage, run_dir, name)
    db = run_dir / "optuna.db"
    if not db.is_file():
        raise ConfigError("run dir", "holds no study (no optuna.db, and no storage in a "
                                     "space.yaml)", text)
    return Source(SQLITE_PREFIX + str(db.absolute()), run_dir, name)


def _read_space(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError("space.yaml", f"cannot read it ({type(exc).__name__})",
                          str(path)) from None
    return data if isinstance(data, dict) else {}


def _check_sqlite_file(url: str, field: str, value: str) -> None:
    # Opening a missing SQLite file would create it: refuse before touching it.
    if url.startswith(SQLITE_PREFIX):
        path = url[len(SQLITE_PREFIX):]
        if path and path != ":memory:" and not Path(path).is_file():
            raise ConfigError(field, f"SQLite file not found: {path}", value)


def _open(url: str) -> optuna.storages.BaseStorage:
    try:
        return make_storage(url)
    except Exception as exc:  # noqa: BLE001 - any driver error means the same to a user
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError("storage", f"cannot open it ({type(exc).__name__}: {first})",
                          url) from None


def _close(storage: optuna.storages.BaseStorage) -> None:
    remove = getattr(storage, "remove_session", None)
    if remove:
        remove()
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()


def choose_study(names: Iterable[str], study: str | None, source: Source,
                 shown: str) -> str:
    """The study to read: ``study`` if given, else the only one, else the run's own.

    Raises:
        ConfigError: no study, an unknown ``study`` or several to choose from, listing
            the names the storage holds.
    """
    names = sorted(names)
    listed = ", ".join(names)
    if not names:
        raise ConfigError("study", f"the storage {source.url} holds no study", shown)
    if study is not None:
        if study not in names:
            raise ConfigError("--study", f"no such study in {shown}; it holds: {listed}",
                              study)
        return study
    if len(names) == 1:
        return names[0]
    if source.name_hint in names:
        return source.name_hint
    raise ConfigError("--study", f"{shown} holds {len(names)} studies; choose one of: "
                                 f"{listed}", None)


def study_names(source: Source) -> list[str]:
    """The names of the studies in ``source``'s storage."""
    storage = _open(source.url)
    try:
        return [s.study_name for s in optuna.get_all_study_summaries(storage, False)]
    finally:
        _close(storage)


def records_from_study(study: optuna.Study) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The report's plain records of every trial of ``study``, and the study's info."""
    if len(study.directions) != 1:
        raise ConfigError("study", "is multi-objective; the report needs one objective",
                          study.study_name)
    records = []
    for t in study.get_trials(deepcopy=False):
        records.append({
            "number": t.number,
            "state": t.state.name,
            "value": t.values[0] if t.values else None,
            "intermediate": dict(t.intermediate_values),
            "params": dict(t.params),
            "user_attrs": dict(t.user_attrs),
            "datetime_start": t.datetime_start.isoformat() if t.datetime_start else None,
            "datetime_complete": (t.datetime_complete.isoformat()
                                  if t.datetime_complete else None),
        })
    info = {"name": study.study_name, "direction": study.direction.name.lower(),
            "user_attrs": dict(study.user_attrs)}
    return records, info


def load_prior(sources: Iterable[str | Path], space: Iterable[str],
               field: str = "search.prior",
               own: tuple[str, str] | None = None) -> list[EarlierStudy]:
    """The earlier studies ``sources`` (run dirs or storage URLs, one study each) name,
    read into memory for the curve sampler's prior.

    Raises:
        ConfigError: on ``field[i]``: a source that does not exist or holds no single
            study (see :func:`resolve_source`), the run's ``own`` study (its storage URL
            and name), or a study whose trials have none of the ``space``'s parameters
            (another space: nothing to learn from).
    """
    out = []
    names = set(space)
    for i, source in enumerate(sources):
        where = f"{field}[{i}]"
        try:
            resolved = resolve_source(source)
            storage = _open(resolved.url)
        except ConfigError as exc:
            raise ConfigError(where, exc.reason, str(source)) from None
        try:
            listed = [s.study_name for s in optuna.get_all_study_summaries(storage, False)]
            try:
                name = choose_study(listed, None, resolved, str(source))
            except ConfigError as exc:
                raise ConfigError(where, exc.reason, str(source)) from None
            if own is not None and (resolved.url, name) == own:
                raise ConfigError(where, "is this run's own study; a prior is an earlier "
                                  "study of the same space", str(source))
            earlier = EarlierStudy.of(optuna.load_study(study_name=name, storage=storage))
        finally:
            _close(storage)
        if not any(names & set(t.params) for t in earlier.trials):
            raise ConfigError(where, f"its study '{name}' has no trial with any of this "
                              f"space's parameters ({', '.join(sorted(names))}): a prior "
                              "must search the same space", str(source))
        out.append(earlier)
    return out


def report_of_study(study: optuna.Study) -> report_mod.Report:
    records, info = records_from_study(study)
    return report_mod.build(records, info)


def load_report(source: str | Path, study: str | None = None
                ) -> tuple[report_mod.Report, Source]:
    """Read the study of a run dir or storage URL and build its report.

    Args:
        source: A run dir or an Optuna storage URL.
        study: The study's name; needed only when the storage holds several and the run
            dir does not say which.

    Raises:
        ConfigError: see :func:`resolve_source` and :func:`choose_study`.
    """
    resolved = resolve_source(source)
    storage = _open(resolved.url)
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage, False)]
        name = choose_study(names, study, resolved, str(source))
        loaded = optuna.load_study(study_name=name, storage=storage)
        return report_of_study(loaded), resolved
    finally:
        _close(storage)


def load_results(run_dir_or_storage_url: str | Path, study: str | None = None):
    """A study's trials as a ``pandas.DataFrame``, one row per trial (for notebooks).

    Columns: ``number``, ``state``, ``value`` (final metric), ``best_value``,
    ``epochs``, ``stop_reason``, ``error``, ``cost``, ``wasted_cost``, ``billed_s``,
    ``preemptions``, ``instance``, ``spot``, ``currency``, ``saved_cost``,
    ``predicted_final``, ``datetime_start``, ``datetime_complete``, ``duration_s``,
    ``on_pareto_front`` and one ``params_<name>`` column per parameter. The report's
    summary (best trial, money, estimates) is in ``df.attrs["summary"]``.

    Args:
        run_dir_or_storage_url: A run dir (``runs/digits-mlp``) or an Optuna storage URL.
        study: The study's name, if the storage holds several.
    """
    import pandas as pd

    report, _ = load_report(run_dir_or_storage_url, study)
    rows = report.flat_rows()
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(ROW_COLUMNS))
    frame.attrs["summary"] = report.summary
    return frame


def write_study_report(study: optuna.Study, out_dir: str | Path,
                       formats: Iterable[str] = tuple(writers.FORMATS)) -> list[Path]:
    """Write the report of an open study into ``out_dir``; return the paths written."""
    from hpsearch.version import __version__

    return writers.write(report_of_study(study), out_dir, formats, version=__version__)
