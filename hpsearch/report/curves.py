"""What the report's plots draw, computed from the trial rows: the Pareto front of the
COMPLETE trials, the best metric against money spent, and cost by trial state.

Pure module.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping, Sequence

from hpsearch.report.rows import STATES, check_mode, parse_time
from hpsearch.scalars import finite as _finite
from hpsearch.spec.objective import better, mode_sign

#: States whose trials enter the Pareto front: only a trial trained to the end is a
#: configuration one can pick at its cost (a pruned trial's value is a partial curve).
FRONT_STATES = ("COMPLETE",)
METHOD_CURVE = (
    "trials in completion order (running trials last); money is the sum of their costs, "
    "the metric the best final value of a COMPLETE trial so far")



def pareto_front(points: Iterable[tuple[Hashable, float, float]], mode: str) -> list[Hashable]:
    """Keys of the points on the accuracy/cost Pareto front, cheapest first.

    A point ``(key, cost, value)`` is on the front if no other point is at least as
    good on both (cost no higher, value no worse under ``mode``) and strictly better on
    one. Identical points do not dominate each other: all of them are on the front.
    Points with a missing or non-finite cost or value are left out.
    """
    check_mode(mode)
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
    when = parse_time(row.get("datetime_complete")) if done else None
    # Unfinished (and undated) trials after the finished ones, by number.
    return (0, when.timestamp(), row["number"]) if when else (1, 0.0, row["number"])


def best_vs_cost(rows: Sequence[Mapping[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The best metric against cumulative money, one point per trial that cost money.

    Trials are taken in completion order (running trials last, by number); the money is
    the running sum of their costs and the metric the best final value of a COMPLETE
    trial so far (None until one completes). WAITING trials and trials without a cost
    are left out.
    """
    check_mode(mode)
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
