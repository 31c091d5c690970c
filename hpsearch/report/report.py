"""The cost/accuracy report: what the money of a study bought (pure computations).

Pure module: it works on plain trial records (dicts), so the same code serves a study
read from any Optuna storage, a run still in progress, and hand-made tests. The Optuna
adapter (:mod:`hpsearch.adapters.optuna.results`) produces the records; the writers
(:mod:`hpsearch.report.writers`) turn a :class:`Report` into HTML, CSV, JSON and
Markdown.

A trial record::

    {"number": 3, "state": "PRUNED",            # COMPLETE, PRUNED, FAIL, RUNNING, WAITING
     "value": None,                             # Optuna's final value (COMPLETE only)
     "intermediate": {1: 0.52, 2: 0.61},        # the objective per epoch
     "params": {"lr": 0.01},
     "user_attrs": {"cost": 0.0012, ...},       # keys from hpsearch.keys
     "datetime_start": "2026-11-30T10:00:00", "datetime_complete": "..."}  # ISO or None

Study information: ``{"name": ..., "direction": "maximize" | "minimize",
"user_attrs": {"config": {...}, "price": {...}, ...}}``.

Money comes from the study's ``money`` attribute, the ledger's statement (see
:mod:`hpsearch.money.statement`): what every node billed, split into the trials' shares
for work kept, work wasted, and idle capacity. A study without it (written before node
billing) is reported from its trials' costs alone, with no idle figure.

Every figure that is not read from the study is an *estimate* and says how it was made
(its ``method``): the savings against training every trial to the end, and against
running on on-demand instances.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Hashable, Iterable, Mapping, Sequence

from hpsearch.money import catalog as catalog_mod
from hpsearch.money import storage as storage_money
from hpsearch import keys
from hpsearch.recovery import checkpoint_usage
from hpsearch.report import gpuuse
from hpsearch.trials import TrialState
from hpsearch.errors import ConfigError
from hpsearch.spec.config import better, mode_sign
from hpsearch.scalars import finite as _finite

#: Trial states in the order the report lists them. BUDGET_STOPPED: the budget stopped
#: it (Optuna holds it RUNNING, or PRUNED if an older version stopped it); a later
#: session with more money resumes it.
STATES = ("COMPLETE", "PRUNED", "BUDGET_STOPPED", "FAIL", "RUNNING", "WAITING")
#: The ``lifecycle`` attribute of a trial the budget stopped.
BUDGET_STOPPED = TrialState.BUDGET_STOPPED.value
#: States whose trials enter the Pareto front: only a trial trained to the end is a
#: configuration one can pick at its cost (a pruned trial's value is a partial curve).
FRONT_STATES = ("COMPLETE",)

METHOD_NO_PRUNING = (
    "estimate: each PRUNED trial's cost scaled linearly to max_epochs "
    "(cost x max_epochs / epochs it ran); every other trial's cost as billed. Linear "
    "scaling also repeats a trial's start-up time, so it overstates a little")
METHOD_ON_DEMAND = (
    "estimate: each spot trial's cost multiplied by its instance's on-demand/spot price "
    "ratio in the price catalogue; on-demand trials' costs as billed")
METHOD_BOTH = (
    "estimate: both of the above applied to each trial (scaled to max_epochs, then "
    "re-priced on demand)")
METHOD_CURVE = (
    "trials in completion order (running trials last); money is the sum of their costs, "
    "the metric the best final value of a COMPLETE trial so far")


@dataclass
class Report:
    """A study's report: per-trial rows, the summary, and the data of the plots.

    Attributes:
        summary: Best trial, counts by state, money spent and wasted, budget used and
            the savings estimates (see :func:`summarise`).
        trials: One row per trial, by number (see :func:`trial_row`).
        pareto_front: Numbers of the COMPLETE trials on the metric/cost Pareto front,
            cheapest first.
        best_vs_cost: The best metric against cumulative money (see :func:`best_vs_cost`).
        cost_by_state: ``{state: {"n", "cost", "wasted_cost"}}``.
        idle_over_time: Each node's idle money so far over time (see
            :func:`idle_over_time`); empty for a study from before node billing.
    """

    summary: dict[str, Any]
    trials: list[dict[str, Any]]
    pareto_front: list[int] = field(default_factory=list)
    best_vs_cost: list[dict[str, Any]] = field(default_factory=list)
    cost_by_state: dict[str, dict[str, Any]] = field(default_factory=dict)
    idle_over_time: list[dict[str, Any]] = field(default_factory=list)

    @property
    def metric(self) -> str:
        return self.summary["metric"]

    @property
    def currency(self) -> str | None:
        return self.summary["currency"]

    def param_names(self) -> list[str]:
        """Every parameter name of any trial, in order of first appearance.

        A conditional parameter is absent from the trials whose condition was unmet: it
        is still a name here, and those trials have no value for it.
        """
        names: dict[str, None] = {}
        for row in self.trials:
            names.update(dict.fromkeys(row["params"]))
        return list(names)

    def flat_rows(self) -> list[dict[str, Any]]:
        """The trial rows with params as ``params_<name>`` columns (CSV, DataFrame).

        Every row has every column; a parameter a trial does not have is None.
        """
        names = self.param_names()
        out = []
        for row in self.trials:
            flat = {k: v for k, v in row.items() if k != "params"}
            for name in names:
                flat[f"params_{name}"] = row["params"].get(name)
            out.append(flat)
        return out


# -- small helpers ---------------------------------------------------------------------


def _check_mode(mode: str) -> None:
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


# -- per trial -------------------------------------------------------------------------

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
    _check_mode(mode)
    attrs = record.get("user_attrs") or {}
    steps = {int(k): _finite(v) for k, v in (record.get("intermediate") or {}).items()}
    value, best = _final_and_best(record, steps, mode)
    start, end = _time(record.get("datetime_start")), _time(record.get("datetime_complete"))
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
        "epoch_s": _median(times) if times else None,
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


# -- the Pareto front ------------------------------------------------------------------

def pareto_front(points: Iterable[tuple[Hashable, float, float]], mode: str) -> list[Hashable]:
    """Keys of the points on the accuracy/cost Pareto front, cheapest first.

    A point ``(key, cost, value)`` is on the front if no other point is at least as
    good on both (cost no higher, value no worse under ``mode``) and strictly better on
    one. Identical points do not dominate each other: all of them are on the front.
    Points with a missing or non-finite cost or value are left out.
    """
    _check_mode(mode)
    sign = mode_sign(mode)
    valid = []
    for key, cost, value in points:
        cost, value = _finite(cost), _finite(value)
        if cost is not None and value is not None:
            valid.append((cost, sign * value, key))
    # Cheapest first, and at one cost the best first: a point is on the front iff it is
    # the best at its cost and strictly better than everything cheaper.
    valid.sort(key=lambda p: (p[0], -p[1]))
    front: list[Hashable] = []
    best_cheaper: float | None = None
    i = 0
    while i < len(valid):
        cost = valid[i][0]
        j = i
        while j < len(valid) and valid[j][0] == cost:
            j += 1
        top = valid[i][1]
        if best_cheaper is None or top > best_cheaper:
            front.extend(key for _, good, key in valid[i:j] if good == top)
            best_cheaper = top
        i = j
    return front


# -- the plots' data -------------------------------------------------------------------

def _completion_key(row: Mapping[str, Any]) -> tuple:
    done = row["state"] in ("COMPLETE", "PRUNED", "BUDGET_STOPPED", "FAIL")
    when = _time(row.get("datetime_complete")) if done else None
    # Unfinished (and undated) trials after the finished ones, by number.
    return (0, when.timestamp(), row["number"]) if when else (1, 0.0, row["number"])


def best_vs_cost(rows: Sequence[Mapping[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The best metric against cumulative money, one point per trial that cost money.

    Trials are taken in completion order (running trials last, by number); the money is
    the running sum of their costs and the metric the best final value of a COMPLETE
    trial so far (None until one completes). WAITING trials and trials without a cost
    are left out.
    """
    _check_mode(mode)
    total = 0.0
    best: float | None = None
    best_number: int | None = None
    out = []
    for row in sorted(rows, key=_completion_key):
        if row["cost"] is None or row["state"] == "WAITING":
            continue
        total += row["cost"]
        value = row["value"]
        if row["state"] == "COMPLETE" and value is not None and (
                best is None or better(value, best, mode)):
            best, best_number = value, row["number"]
        out.append({"number": row["number"], "state": row["state"], "cost": row["cost"],
                    "cumulative_cost": total, "value": value, "best_value": best,
                    "best_number": best_number})
    return out


#: How far the metric axis reaches beyond the COMPLETE trials' values, in multiples of
#: a spread (see :func:`metric_axis`): when their own range is the spread they fill at
#: least a fifth of the axis, so a pruned trial that diverged (a loss of 1e6, an
#: accuracy at chance) cannot flatten them.
CLIP_MARGIN = 2.0
#: Padding of an axis range on each side, as a share of its span.
AXIS_PAD = 0.08
#: The band at an edge of the metric axis where pinned values are drawn (share of the
#: span of the values drawn in place), apart from the lowest or highest of those.
PIN_BAND = 0.1


class Pin(enum.Enum):
    """Where a value is drawn on the metric axis: in place, or pinned to an edge."""

    BELOW = -1
    IN_PLACE = 0
    ABOVE = 1


@dataclass(frozen=True)
class MetricAxis:
    """The metric axis of the plots: its range, and the window of values drawn in place.

    Attributes:
        low: Bottom of the axis range (metric units).
        high: Top of the axis range.
        window: ``(low, high)`` of the values drawn where they are; a value outside is
            *pinned*: drawn in a band at the edge of the axis it lies beyond, apart from
            the values drawn in place. None when every value is drawn in place.
        pinned_low: Where values pinned below are drawn (None: no such value).
        pinned_high: Where values pinned above are drawn.
    """

    low: float
    high: float
    window: tuple[float, float] | None = None
    pinned_low: float | None = None
    pinned_high: float | None = None

    def place(self, value: float) -> tuple[float, Pin]:
        """Where to draw ``value``: ``(value, IN_PLACE)``, or the band of the edge it lies
        beyond, ``(y, BELOW)`` or ``(y, ABOVE)`` (inside the axis range)."""
        if self.window is None or self.window[0] <= value <= self.window[1]:
            return value, Pin.IN_PLACE
        if value < self.window[0]:
            return (self.low if self.pinned_low is None else self.pinned_low), Pin.BELOW
        return (self.high if self.pinned_high is None else self.pinned_high), Pin.ABOVE


def _padded(low: float, high: float) -> tuple[float, float]:
    pad = AXIS_PAD * (high - low) if high > low else 0.1 * abs(high) or 0.5
    return low - pad, high + pad


def metric_axis(complete: Iterable[float | None],
                others: Iterable[float | None]) -> MetricAxis | None:
    """The metric axis for the values of COMPLETE trials and of every other trial.

    The axis follows the COMPLETE trials: a value farther from their range than
    ``CLIP_MARGIN`` times a spread is pinned to the edge instead of stretching the axis.
    The spread is the larger of the COMPLETE trials' range and the median distance of
    all values from their median (so two close COMPLETE trials do not pin the bulk of
    the pruned ones, only the far ones); their magnitude if both are 0. Without a
    COMPLETE trial nothing is pinned. The rule uses no direction and no unit: scaling
    the metric or flipping its sign pins the same trials. None when there is no finite
    value.
    """
    done = [v for v in map(_finite, complete) if v is not None]
    rest = [v for v in map(_finite, others) if v is not None]
    values = done + rest
    if not values:
        return None
    low, high = min(done, default=0.0), max(done, default=0.0)
    spread = max(high - low, _median([abs(v - _median(values)) for v in values]))
    spread = spread or abs(high)
    if not done or spread == 0:
        return MetricAxis(*_padded(min(values), max(values)))
    # A hair wider, so that a value on the edge stays put whatever the metric's units.
    reach = CLIP_MARGIN * spread * (1 + 1e-9)
    window = (low - reach, high + reach)
    inside = [v for v in values if window[0] <= v <= window[1]]
    if len(inside) == len(values):
        return MetricAxis(*_padded(min(values), max(values)))
    bottom, top = _padded(min(inside), max(inside))
    band = PIN_BAND * (top - bottom)
    below, above = any(v < window[0] for v in values), any(v > window[1] for v in values)
    return MetricAxis(bottom - band if below else bottom, top + band if above else top,
                      window=window, pinned_low=bottom - band / 2 if below else None,
                      pinned_high=top + band / 2 if above else None)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def cost_axis(costs: Iterable[float | None]) -> tuple[float, float]:
    """A money axis: from 0 to a little above the largest cost; ``(0, 1)`` without one.

    Money is never negative and 0 is its natural origin, so equal costs (a fixed price
    per trial) still read as amounts rather than as a point in the middle of nowhere.
    """
    top = max((c for c in map(_finite, costs) if c is not None), default=0.0)
    return (0.0, top * (1 + AXIS_PAD)) if top > 0 else (0.0, 1.0)


def cost_by_state(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{state: {"n": trials, "cost": money, "wasted_cost": money}}``, in STATES order.

    Only trials with a cost count (a WAITING trial has none), and only states with one.
    """
    out: dict[str, dict[str, Any]] = {}
    for state in [*STATES, *sorted({r["state"] for r in rows} - set(STATES))]:
        members = [r for r in rows if r["state"] == state and r["cost"] is not None]
        if members:
            out[state] = {"n": len(members),
                          "cost": sum(r["cost"] or 0.0 for r in members),
                          "wasted_cost": sum(r["wasted_cost"] or 0.0 for r in members)}
    return out


# -- estimates ---------------------------------------------------------------------------

def _estimate(total: float | None, baseline: float | None, method: str,
              **extra: Any) -> dict[str, Any]:
    amount = None if total is None or baseline is None else baseline - total
    share = amount / baseline if amount is not None and baseline else None
    return {"estimate": True, "amount": amount, "baseline_cost": baseline, "share": share,
            "method": method, **extra}


def no_pruning_factor(row: Mapping[str, Any], max_epochs: int | None) -> float | None:
    """How much more a trial would have cost trained to ``max_epochs`` (1 if it was).

    PRUNED trials that ran ``e`` epochs scale by ``max_epochs / e``; other trials by 1.
    None when it cannot be estimated (unknown ``max_epochs``, a pruned trial with no
    epoch).
    """
    if row["state"] != "PRUNED":
        return 1.0
    if not max_epochs or row["epochs"] <= 0:
        return None
    return max(1.0, max_epochs / row["epochs"])


def savings_vs_no_pruning(rows: Sequence[Mapping[str, Any]],
                          max_epochs: int | None) -> dict[str, Any]:
    """Estimated money pruning saved: against training every trial to the end.

    Returns ``{"estimate": True, "amount", "baseline_cost", "share", "method",
    "n_scaled", "n_not_scaled"}``: ``baseline_cost`` is every trial's cost with each
    PRUNED trial's scaled linearly to ``max_epochs``, ``amount`` what the study saved
    against it, ``share`` that amount over the baseline. With ``max_epochs`` unknown,
    amount and baseline are None and the method says why.
    """
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    if not max_epochs:
        return _estimate(total, None, "not estimated: the study records no max_epochs",
                         n_scaled=0, n_not_scaled=0)
    baseline = 0.0
    scaled = not_scaled = 0
    for row in costed:
        factor = no_pruning_factor(row, max_epochs)
        if factor is None:
            not_scaled += 1
            factor = 1.0
        elif row["state"] == "PRUNED":
            scaled += 1
        baseline += row["cost"] * factor
    method = METHOD_NO_PRUNING
    if not_scaled:
        method += f"; {not_scaled} pruned trial(s) without a finished epoch counted as billed"
    return _estimate(total, baseline, method, n_scaled=scaled, n_not_scaled=not_scaled)


def on_demand_ratios(instances: Iterable[str],
                     catalog: catalog_mod.Catalog) -> dict[str, float | None]:
    """``{instance: on-demand price / spot price}`` from the catalogue.

    None for an instance the catalogue does not know or that lacks either price.
    """
    out: dict[str, float | None] = {}
    for name in instances:
        try:
            offer = catalog.lookup(name)
        except ConfigError:
            out[name] = None
            continue
        if offer.on_demand_per_hour is None or not offer.spot_per_hour:
            out[name] = None
        else:
            out[name] = offer.on_demand_per_hour / offer.spot_per_hour
    return out


def on_demand_cost(row: Mapping[str, Any],
                   ratios: Mapping[str, float | None]) -> float | None:
    """What a trial's billed money would have been on demand: its spot-billed part times
    the catalogue's on-demand/spot ratio, plus the part already billed on demand; None if
    it has spot money on an instance without a ratio."""
    spot_cost = row.get("spot_cost") or 0.0
    if spot_cost <= 0:
        return row["cost"]
    ratio = ratios.get(row["instance"] or "")
    if ratio is None:
        return None
    return row["cost"] - spot_cost + spot_cost * ratio


def savings_vs_on_demand(rows: Sequence[Mapping[str, Any]],
                         ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """Estimated money spot pricing saved: against running every trial on demand.

    Returns ``{"estimate": True, "amount", "baseline_cost", "share", "method",
    "n_repriced", "not_repriced"}``: the baseline re-prices each spot trial with its
    instance's on-demand/spot ratio (``ratios``, see :func:`on_demand_ratios`); trials
    already on demand count as billed, so a study without spot trials saves 0. Spot
    trials on instances without a ratio are counted as billed and listed in
    ``not_repriced``.
    """
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    baseline = 0.0
    repriced = 0
    missing: set[str] = set()
    for row in costed:
        on_demand = on_demand_cost(row, ratios)
        if on_demand is None:
            missing.add(str(row["instance"]))
            on_demand = row["cost"]
        elif (row.get("spot_cost") or 0.0) > 0:
            repriced += 1
        baseline += on_demand
    method = METHOD_ON_DEMAND
    if missing:
        method += (f"; spot trials on {', '.join(sorted(missing))} (no on-demand price in "
                   f"the catalogue) counted as billed")
    return _estimate(total, baseline, method, n_repriced=repriced,
                     not_repriced=sorted(missing))


def savings_vs_on_demand_without_pruning(rows: Sequence[Mapping[str, Any]],
                                         max_epochs: int | None,
                                         ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """Both estimates at once: every trial trained to the end on on-demand instances."""
    costed = [r for r in rows if r["cost"] is not None]
    total = sum(r["cost"] for r in costed)
    if not max_epochs:
        return _estimate(total, None, "not estimated: the study records no max_epochs")
    baseline = sum((on_demand_cost(r, ratios) or r["cost"])
                   * (no_pruning_factor(r, max_epochs) or 1.0) for r in costed)
    return _estimate(total, baseline, METHOD_BOTH)


# -- node money (the ledger's statement) ------------------------------------------------

METHOD_NO_PRUNING_NODES = (
    "estimate: each node rented longer by the work its PRUNED trials would have needed "
    "to reach max_epochs (each trial's share of the node x its remaining epochs x its "
    "median measured epoch time), at the packing the node showed while trials ran on it "
    "(their share-seconds over that span: the idle that goes with the work follows it), "
    "then billed with the node's granularity and minimum; trials the budget stopped are "
    "not counted (they resume), and 0 where pruning stopped nothing")
METHOD_ON_DEMAND_NODES = (
    "estimate: each spot node re-priced at its instance's on-demand price (the "
    "catalogue's on-demand/spot ratio), rented shorter by the work preemptions lost and "
    "the restarts after them (at its packing, as no preemption would have happened), "
    "billed with its granularity and minimum; on-demand nodes as billed, so a run "
    "without spot nodes saves 0; negative: spot cost more")
METHOD_BOTH_NODES = (
    "estimate: both of the above applied to each node (rented longer by its pruned "
    "trials' remaining work, shorter by its lost work and restarts, re-priced on demand)")
METHOD_IDLE = (
    "node money the trials' shares did not cover, per node: from the ledger, not an "
    "estimate (start-up, gaps between trials, capacity no trial reserved, and the "
    "billing's rounding and minimum)")


def node_money(study: Mapping[str, Any]) -> dict[str, Any] | None:
    """The study's ``money`` attribute (the ledger's statement), or None when the study
    has none (written before node billing) or it is not readable."""
    money = (study.get("user_attrs") or {}).get(keys.ATTR_MONEY)
    if not isinstance(money, Mapping) or not isinstance(money.get("nodes"), list):
        return None
    if any(_finite(money.get(k)) is None for k in ("total", "kept", "wasted", "idle")):
        return None
    return dict(money)


def node_rows(money: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per rental for the report's node table (no timeline)."""
    out = []
    for i, node in enumerate(money.get("nodes") or []):
        cost = _finite(node.get("cost")) or 0.0
        idle = _finite(node.get("idle_cost")) or 0.0
        out.append({
            "rental": i, "node": str(node.get("node", "")), "instance": node.get("instance"),
            "spot": bool(node.get("spot")), "lost": bool(node.get("lost")),
            "price_per_hour": _finite(node.get("price_per_hour")),
            "rented_s": _finite(node.get("length_s")), "billed_s": _finite(node.get("billed_s")),
            "cost": cost, "kept_cost": _finite(node.get("kept_cost")),
            "wasted_cost": _finite(node.get("wasted_cost")), "idle_cost": idle,
            "idle_share": idle / cost if cost > 0 else None,
            "trials": len(node.get("trials") or {}),
        })
    return out


def idle_over_time(money: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each rental's idle money so far against seconds since the first rental started:
    ``[{"rental", "node", "instance", "spot", "t_s": [...], "idle_cost": [...]}]``."""
    nodes = money.get("nodes") or []
    starts = [_finite(n.get("start_s")) for n in nodes]
    origin = min((t for t in starts if t is not None), default=0.0)
    out = []
    for i, node in enumerate(nodes):
        points = [(float(t), float(c)) for t, c in node.get("timeline") or []]
        out.append({"rental": i, "node": str(node.get("node", "")),
                    "instance": node.get("instance"), "spot": bool(node.get("spot")),
                    "t_s": [t - origin for t, _ in points],
                    "idle_cost": [c for _, c in points]})
    return out


def _packing(node: Mapping[str, Any]) -> float:
    """Share-seconds of trials over the span they ran on the node, in (0, 1]."""
    work, active = _finite(node.get("work_s")) or 0.0, _finite(node.get("active_s")) or 0.0
    return min(1.0, work / active) if work > 0 and active > 0 else 1.0


def _rebilled(node: Mapping[str, Any], extra_s: float, price: float) -> float:
    """The node's bill with its rental ``extra_s`` longer (or shorter), at ``price``."""
    from hpsearch.money.nodes import billed_seconds

    length = max(0.0, (_finite(node.get("length_s")) or 0.0) + extra_s)
    return billed_seconds(length, int(node.get("granularity_s") or 0),
                          int(node.get("min_billing_s") or 0)) * price / 3600.0


def _pruned_extra_s(money: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                    max_epochs: int) -> dict[int, float]:
    """Rental index -> share-seconds its PRUNED trials needed to reach ``max_epochs``
    (each trial on the last rental it ran on)."""
    last: dict[int, tuple[int, float]] = {}
    for i, node in enumerate(money.get("nodes") or []):
        for trial, share in (node.get("trials") or {}).items():
            last[int(trial)] = (i, _finite(share) or 0.0)
    extra: dict[int, float] = {}
    for row in rows:
        if row["state"] != "PRUNED" or row["number"] not in last or row["epochs"] <= 0:
            continue
        epoch_s = row.get("epoch_s") or ((row.get("billed_s") or 0.0) / row["epochs"])
        rental, share = last[row["number"]]
        remaining = max(0, max_epochs - row["epochs"])
        extra[rental] = extra.get(rental, 0.0) + share * remaining * epoch_s
    return extra


def node_savings(money: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                 max_epochs: int | None, ratios: Mapping[str, float | None], *,
                 pruning: bool, on_demand: bool) -> dict[str, Any]:
    """What the same nodes would have billed without pruning (``pruning``) and/or on
    demand (``on_demand``), against what they billed (see the ``METHOD_*_NODES``)."""
    total = _finite(money.get("total")) or 0.0
    if pruning and not max_epochs:
        return _estimate(total, None, "not estimated: the study records no max_epochs")
    extra = _pruned_extra_s(money, rows, max_epochs) if pruning else {}
    baseline = _finite(money.get("unplaced")) or 0.0
    missing: set[str] = set()
    repriced = 0
    for i, node in enumerate(money.get("nodes") or []):
        price = _finite(node.get("price_per_hour")) or 0.0
        packing = _packing(node)
        change = extra.get(i, 0.0) / packing
        if on_demand and node.get("spot"):
            ratio = ratios.get(str(node.get("instance") or ""))
            if ratio is None:
                missing.add(str(node.get("instance")))
            else:
                lost = (_finite(node.get("wasted_s")) or 0.0) + (
                    _finite(node.get("restart_s")) or 0.0)
                change -= lost / packing
                price *= ratio
                repriced += 1
        baseline += _rebilled(node, change, price)
    method = (METHOD_BOTH_NODES if pruning and on_demand
              else METHOD_NO_PRUNING_NODES if pruning else METHOD_ON_DEMAND_NODES)
    if missing:
        method += (f"; spot nodes of {', '.join(sorted(missing))} (no on-demand price in "
                   f"the catalogue) counted as billed")
    estimate = _estimate(total, baseline, method, n_nodes=len(money.get("nodes") or []))
    if abs(estimate["amount"]) < 1e-12:
        estimate["amount"], estimate["share"] = 0.0, 0.0
    if on_demand:
        estimate.update(n_repriced=repriced, not_repriced=sorted(missing))
    if pruning:
        estimate["n_scaled"] = sum(1 for r in rows if r["state"] == "PRUNED")
    return estimate


# -- the summary -------------------------------------------------------------------------

def study_mode(study: Mapping[str, Any]) -> str:
    """``max`` or ``min``: the config's objective mode, else the study's direction."""
    config = (study.get("user_attrs") or {}).get(keys.ATTR_CONFIG) or {}
    mode = (config.get("objective") or {}).get("mode")
    if mode in ("max", "min"):
        return mode
    return "min" if str(study.get("direction", "")).lower().startswith("min") else "max"


def _currency(study_attrs: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str | None:
    price = study_attrs.get(keys.ATTR_PRICE) or {}
    if price.get("currency"):
        return price["currency"]
    for row in rows:
        if row["currency"]:
            return row["currency"]
    pricing = (study_attrs.get(keys.ATTR_CONFIG) or {}).get("pricing") or {}
    return pricing.get("currency")


def summarise(rows: Sequence[Mapping[str, Any]], study: Mapping[str, Any],
              ratios: Mapping[str, float | None], front: Sequence[int]) -> dict[str, Any]:
    """The report's summary.

    Keys: ``study``, ``metric``, ``mode``, ``currency``, ``instance``, ``spot``,
    ``max_epochs``; ``n_trials`` and ``n_by_state``; ``best_trial``, ``best_value``,
    ``best_params``, ``best_epochs``, ``best_cost`` (the best COMPLETE trial, lowest
    number on ties; None if none completed); the money (see :func:`money_summary`);
    ``pareto_front`` (COMPLETE trials) and ``pareto_front_label`` (``"<metric> vs
    cost"``); ``preemptions``; the pauses (see :func:`pause_summary`);
    ``idle_gpu_cost`` (money paid while trials' GPUs ran no kernel, an estimate; None
    when no trial sampled a GPU), ``gpu_util_mean`` (cost-weighted over GPU trials) and
    ``idle_gpu_cost_method``.
    """
    attrs = study.get("user_attrs") or {}
    config = attrs.get(keys.ATTR_CONFIG) or {}
    price = attrs.get(keys.ATTR_PRICE) or {}
    mode = study_mode(study)
    best = None
    for row in rows:
        if row["state"] == "COMPLETE" and row["value"] is not None and (
                best is None or better(row["value"], best["value"], mode)):
            best = row
    by_state = dict.fromkeys(STATES, 0)
    for row in rows:
        by_state[row["state"]] = by_state.get(row["state"], 0) + 1
    gpu_rows = [r for r in rows if r["idle_gpu_cost"] is not None]
    gpu_cost = sum(r["cost"] or 0.0 for r in gpu_rows)
    metric = (config.get("objective") or {}).get("metric") or "value"
    return {
        "study": study.get("name"),
        "metric": metric,
        "mode": mode,
        "currency": _currency(attrs, rows),
        "instance": price.get("instance"),
        "spot": price.get("spot"),
        "max_epochs": config.get("max_epochs"),
        "n_trials": len(rows),
        "n_by_state": by_state,
        "best_trial": best["number"] if best else None,
        "best_value": best["value"] if best else None,
        "best_params": dict(best["params"]) if best else None,
        "best_epochs": best["epochs"] if best else None,
        "best_cost": best["cost"] if best else None,
        **money_summary(rows, study, ratios),
        "preemptions": sum(r["preemptions"] for r in rows),
        **pause_summary(rows),
        "pareto_front": list(front),
        "pareto_front_label": f"{metric} vs cost",
        "best_vs_cost_method": METHOD_CURVE,
        "idle_gpu_cost": (sum(r["idle_gpu_cost"] for r in gpu_rows)
                          if gpu_rows else None),
        "gpu_util_mean": (sum((r["cost"] or 0.0) * r["gpu_util_mean"] for r in gpu_rows)
                          / gpu_cost if gpu_cost > 0 else None),
        "idle_gpu_cost_method": gpuuse.METHOD_IDLE,
    }


def pause_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The pauses of a run: ``paused_trials`` (trials paused at least once),
    ``pauses`` (pauses in all), ``resumes`` (pauses undone: the trial was picked to
    train on) and ``ended_paused`` (trials whose last pause was never undone: pruned
    where they paused when the run ended, or still paused in a run that goes on)."""
    paused = [r for r in rows if r["paused_at"]]
    return {"paused_trials": len(paused),
            "pauses": sum(len(r["paused_at"]) for r in paused),
            "resumes": sum(r["resumes"] for r in paused),
            "ended_paused": sum(len(r["paused_at"]) > r["resumes"] for r in paused)}


def money_summary(rows: Sequence[Mapping[str, Any]], study: Mapping[str, Any],
                  ratios: Mapping[str, float | None]) -> dict[str, Any]:
    """The summary's money: ``total_cost`` (what the nodes billed), ``kept_cost``,
    ``wasted_cost``, ``idle_cost`` (kept apart: total = kept + wasted + idle),
    ``node_billed_s``, ``billed_s`` (the trials' seconds), ``nodes`` (see
    :func:`node_rows`), ``money_method``, ``budget_max_cost`` and ``budget_used``
    (total / budget.max_cost), and the estimates ``savings_vs_no_pruning``,
    ``savings_vs_on_demand`` and ``savings_vs_on_demand_without_pruning``.

    From the study's ``money`` attribute when it has one; otherwise (a study from
    before node billing) from the trials' costs, with ``idle_cost`` and ``nodes``
    unknown (None, []) and the per-trial estimates.
    """
    config = (study.get("user_attrs") or {}).get(keys.ATTR_CONFIG) or {}
    max_epochs = config.get("max_epochs")
    cap = _finite((config.get("budget") or {}).get("max_cost"))
    money = node_money(study)
    trial_s = sum(r["billed_s"] or 0.0 for r in rows)
    if money is None:
        total = sum(r["cost"] or 0.0 for r in rows)
        wasted = sum(r["wasted_cost"] or 0.0 for r in rows)
        out = {"total_cost": total, "kept_cost": total - wasted, "wasted_cost": wasted,
               "idle_cost": None, "node_billed_s": None, "billed_s": trial_s, "nodes": [],
               "money_method": "the trials' own costs (a study from before node billing: "
                               "no idle figure)",
               "savings_vs_no_pruning": savings_vs_no_pruning(rows, max_epochs),
               "savings_vs_on_demand": savings_vs_on_demand(rows, ratios),
               "savings_vs_on_demand_without_pruning":
                   savings_vs_on_demand_without_pruning(rows, max_epochs, ratios)}
    else:
        def saved(pruning: bool, on_demand: bool) -> dict[str, Any]:
            return node_savings(money, rows, max_epochs, ratios, pruning=pruning,
                                on_demand=on_demand)

        nodes = node_rows(money)
        out = {"total_cost": money["total"], "kept_cost": money["kept"],
               "wasted_cost": money["wasted"], "idle_cost": money["idle"],
               "node_billed_s": sum(n["billed_s"] or 0.0 for n in nodes),
               "billed_s": trial_s, "nodes": nodes,
               "money_method": str(money.get("method") or ""),
               "idle_cost_method": METHOD_IDLE,
               "savings_vs_no_pruning": saved(True, False),
               "savings_vs_on_demand": saved(False, True),
               "savings_vs_on_demand_without_pruning": saved(True, True)}
    out["budget_max_cost"] = cap
    out["budget_used"] = out["total_cost"] / cap if cap else None
    return out


def _storage_money(rows: list[dict[str, Any]], records: Iterable[Mapping[str, Any]],
                   study: Mapping[str, Any]) -> dict[str, Any]:
    """Each row's ``storage_cost`` (set in place) and the summary's storage figures:
    ``storage_cost``, ``storage_requests_cost``, ``storage_per_month_kept``,
    ``storage_currency``, ``storage_price`` (the row's key and source),
    ``checkpoint_storage``, ``checkpoint_bytes``, ``checkpoint_s``, ``checkpoints``,
    ``checkpoint_s_mean`` and ``storage_method`` (see
    :mod:`hpsearch.money.storage`). Money is None without a recorded storage price."""
    attrs = study.get("user_attrs") or {}
    price = storage_money.StoragePrice.from_dict(attrs.get(keys.ATTR_STORAGE_PRICE) or {})
    by_number = {int(r["number"]): checkpoint_usage.from_attrs(r.get("user_attrs") or {})
                 for r in records}
    total = requests = kept = 0.0
    for row in rows:
        use = by_number.get(row["number"])
        if use is None or price is None:
            continue
        cost = storage_money.storage_cost(use, price)
        row["storage_cost"] = cost.total
        total += cost.total
        requests += cost.requests
        kept += cost.per_month_kept
    count = sum(r["checkpoints"] for r in rows)
    seconds = sum(r["checkpoint_s"] or 0.0 for r in rows)
    return {
        "storage_cost": total if price is not None else None,
        "storage_requests_cost": requests if price is not None else None,
        "storage_per_month_kept": kept if price is not None else None,
        "storage_currency": price.currency if price is not None else None,
        "storage_price": ({"row": price.key, "per_gb_month": price.per_gb_month,
                           "source": price.source, "snapshot_date": price.snapshot_date}
                          if price is not None else None),
        "checkpoint_storage": attrs.get(keys.ATTR_CHECKPOINT_STORAGE),
        "checkpoints": count,
        "checkpoint_bytes": sum(r["checkpoint_bytes"] or 0.0 for r in rows),
        "checkpoint_stored_bytes": sum(r["checkpoint_stored_bytes"] or 0.0 for r in rows),
        "checkpoint_s": seconds,
        "checkpoint_s_mean": seconds / count if count else None,
        "storage_method": storage_money.METHOD,
    }


def default_catalog(study: Mapping[str, Any]) -> catalog_mod.Catalog:
    """The packaged catalogue, plus the run's ``pricing.catalog`` where it can be read."""
    config = (study.get("user_attrs") or {}).get(keys.ATTR_CONFIG) or {}
    user = (config.get("pricing") or {}).get("catalog")
    if user:
        try:
            return catalog_mod.load(user)
        except ConfigError:
            pass  # a run from another machine: its catalogue file is not here
    return catalog_mod.packaged()


def build(records: Iterable[Mapping[str, Any]], study: Mapping[str, Any],
          catalog: catalog_mod.Catalog | None = None) -> Report:
    """Build the report of a study from its trial records.

    Args:
        records: Trial records (see the module docstring), in any order.
        study: ``{"name", "direction", "user_attrs"}`` of the study.
        catalog: Price catalogue for the on-demand estimate; default
            :func:`default_catalog`.
    """
    mode = study_mode(study)
    rows = sorted((trial_row(r, mode) for r in records), key=lambda r: r["number"])
    front = pareto_front(((r["number"], r["cost"], r["value"]) for r in rows
                          if r["state"] in FRONT_STATES), mode)
    on_front = set(front)
    for row in rows:
        row["on_pareto_front"] = row["number"] in on_front
    money = node_money(study)
    spot_instances = sorted({r["instance"] for r in rows
                             if (r.get("spot_cost") or 0) > 0 and r["instance"]}
                            | {str(n.get("instance")) for n in (money or {}).get("nodes", [])
                               if n.get("spot")})
    ratios = on_demand_ratios(spot_instances, catalog or default_catalog(study)) \
        if spot_instances else {}
    summary = summarise(rows, study, ratios, front)
    summary.update(_storage_money(rows, records, study))
    return Report(
        summary=summary,
        trials=rows,
        pareto_front=front,
        best_vs_cost=best_vs_cost(rows, mode),
        cost_by_state=cost_by_state(rows),
        idle_over_time=idle_over_time(money) if money is not None else [],
    )
