"""The report's row of each trial, from the trial record the Optuna adapter produces.

Pure module: it works on plain trial records (dicts), so the same code serves a study
read from any Optuna storage, a run still in progress, and hand-made tests. A trial
record::

    {"number": 3, "state": "PRUNED",            # COMPLETE, PRUNED, FAIL, RUNNING, WAITING
     "value": None,                             # Optuna's final value (COMPLETE only)
     "intermediate": {1: 0.52, 2: 0.61},        # the objective per epoch
     "params": {"lr": 0.01},
     "user_attrs": {"cost": 0.0012, ...},       # keys from hpsearch.keys
     "datetime_start": "2026-11-30T10:00:00", "datetime_complete": "..."}  # ISO or None
"""

from __future__ import annotations

from datetime import datetime
from statistics import median
from typing import Any, Mapping

from hpsearch import keys
from hpsearch.report import gpuuse
from hpsearch.scalars import finite as _finite
from hpsearch.spec.objective import better
from hpsearch.trials import TrialState

#: Trial states in the order the report lists them. BUDGET_STOPPED: the budget stopped
#: it (Optuna holds it RUNNING, or PRUNED if an older version stopped it); a later
#: session with more money resumes it.
STATES = ("COMPLETE", "PRUNED", "BUDGET_STOPPED", "FAIL", "RUNNING", "WAITING")
#: The ``lifecycle`` attribute of a trial the budget stopped.
BUDGET_STOPPED = TrialState.BUDGET_STOPPED.value


def check_mode(mode: str) -> None:
    """Refuse a ``mode`` that is neither ``max`` nor ``min`` (ValueError)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")


def parse_time(text: str | None) -> datetime | None:
    """An ISO date and time, or None when there is none or it does not parse."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _final_and_best(record: Mapping[str, Any], steps: Mapping[int, float | None],
                    mode: str) -> tuple[float | None, float | None]:
    """``(final value, best value)`` of a trial (see :func:`trial_row`)."""
    value = _finite(record.get("value"))
    if value is None and steps:
        value = steps[max(steps)]
    best = None
    for v in [v for _, v in sorted(steps.items()) if v is not None] + (
            [value] if value is not None else []):
        if best is None or better(v, best, mode):
            best = v
    return value, best


def trial_row(record: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """One trial's row of the report.

    ``value`` is the final metric: Optuna's value for a COMPLETE trial, otherwise the
    last epoch it reported (None if none). ``best_value`` is its best epoch. Money and
    instance come from the user attributes the ledger mirrors (missing money is None,
    never 0); ``preemptions`` defaults to 0. A RUNNING trial's money is what it has
    been billed up to its latest epoch.
    """
    check_mode(mode)
    attrs = record.get("user_attrs") or {}
    steps = {int(k): _finite(v) for k, v in (record.get("intermediate") or {}).items()}
    value, best = _final_and_best(record, steps, mode)
    start, end = (parse_time(record.get("datetime_start")),
                  parse_time(record.get("datetime_complete")))
    spot = attrs.get(keys.ATTR_SPOT)
    times = [t for t in map(_finite, attrs.get(keys.ATTR_EPOCH_TIMES) or []) if t is not None]
    return {
        "number": int(record["number"]),
        "state": _state(record, attrs),
        "value": value,
        "best_value": best,
        "epochs": _epochs(attrs, steps),
        "params": dict(record.get("params") or {}),
        "stop_reason": attrs.get(keys.ATTR_STOP_REASON),
        "error": attrs.get(keys.ATTR_ERROR),
        "cost": _finite(attrs.get(keys.ATTR_COST)),
        "wasted_cost": _finite(attrs.get(keys.ATTR_WASTED_COST)),
        "billed_s": _finite(attrs.get(keys.ATTR_BILLED_S)),
        "preemptions": int(attrs.get(keys.ATTR_PREEMPTIONS) or 0),
        **pauses_of(attrs),
        "instance": attrs.get(keys.ATTR_INSTANCE),
        "spot": None if spot is None else bool(spot),
        "share": _finite(attrs.get(keys.ATTR_SHARE)),
        "epoch_s": median(times) if times else None,
        # Money billed at spot prices: all of it for a spot trial whose record predates
        # the split, none for an on-demand one.
        "spot_cost": _finite(attrs.get(keys.ATTR_SPOT_COST,
                                       attrs.get(keys.ATTR_COST) if spot else 0.0)),
        "currency": attrs.get(keys.ATTR_CURRENCY),
        "saved_cost": _finite(attrs.get(keys.ATTR_SAVED_COST)),
        "predicted_final": _finite(attrs.get(keys.ATTR_PREDICTED_FINAL)),
        **_usage(attrs),
        "datetime_start": record.get("datetime_start"),
        "datetime_complete": record.get("datetime_complete"),
        "duration_s": (end - start).total_seconds() if start and end else None,
        "on_pareto_front": False,
    }


def pauses_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's pauses from its user attributes: ``paused_at`` (the epochs it was
    paused after, oldest first) and ``resumes`` (how many of those pauses were undone)."""
    return {"paused_at": [int(e) for e in attrs.get(keys.ATTR_PAUSED_AT) or []],
            "resumes": int(attrs.get(keys.ATTR_RESUMES) or 0)}


def _state(record: Mapping[str, Any], attrs: Mapping[str, Any]) -> str:
    """The trial's state as the report names it: Optuna's, except that a trial stopped
    by the budget (RUNNING in Optuna, or PRUNED when an older version wrote it) is
    ``BUDGET_STOPPED``."""
    state = str(record["state"])
    if attrs.get(keys.ATTR_LIFECYCLE) == BUDGET_STOPPED and state in ("RUNNING", "PRUNED"):
        return "BUDGET_STOPPED"
    return state


def _epochs(attrs: Mapping[str, Any], steps: Mapping[int, float | None]) -> int:
    """Epochs trained: the recorded count, else the last epoch reported (0 if none)."""
    epochs = attrs.get(keys.ATTR_EPOCHS)
    if not isinstance(epochs, int) or isinstance(epochs, bool):
        return max(steps) if steps else 0
    return epochs


def _usage(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's GPU use and checkpoint columns, in the row's order."""
    return {
        "gpu_util_mean": _finite(attrs.get(keys.ATTR_GPU_UTIL)),
        "gpu_mem_peak_mib": _finite(attrs.get(keys.ATTR_GPU_MEM_PEAK_MIB)),
        "idle_gpu_cost": gpuuse.idle_cost(attrs.get(keys.ATTR_COST),
                                          attrs.get(keys.ATTR_GPU_UTIL)),
        # What its checkpoints cost (storage money is set by build(), at the study's
        # storage price).
        "checkpoints": int(attrs.get(keys.ATTR_CKPT_COUNT) or 0),
        "checkpoint_bytes": _finite(attrs.get(keys.ATTR_CKPT_BYTES)),
        "checkpoint_s": _finite(attrs.get(keys.ATTR_CKPT_S)),
        "checkpoint_stored_bytes": _finite(attrs.get(keys.ATTR_CKPT_STORED_BYTES)),
        "storage_cost": None,
    }


#: The columns of a trial row, params apart (CSV and DataFrame add ``params_<name>``).
ROW_COLUMNS = tuple(k for k in trial_row({"number": 0, "state": "WAITING"}, "max")
                    if k != "params")
