"""The ledger's statement: money spent on work kept, wasted, and paid for idle capacity.

Pure module. :func:`statement` adds up a :class:`~hpsearch.money.ledger.Ledger` at a
moment into three figures kept apart (every node's money is its trials' shares plus its
idle):

* **work kept**: the trials' shares of their nodes, less what was lost;
* **wasted**: the part of those shares paid for work that was lost (the epochs since
  the last checkpoint of an attempt that was preempted or failed);
* **idle**: what the nodes billed beyond their trials' shares: capacity paid for and not
  used (the driver starting, the last trial running alone on a node of several slots,
  gaps between trials, a minimum billing period longer than the work).

Per node (:class:`NodeMoney`) it also keeps what the savings estimates of the report
need (the trials that ran on it, its measured packing, restarts after preemptions) and
its idle money over time. The statement is what the terminal summary prints and what
the study's ``money`` attribute holds (:meth:`Statement.attrs`), so the two agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hpsearch.money.ledger import Ledger
from hpsearch.money.ledger_entries import PREEMPTED, Interval, Rental

#: Most points of one node's idle-over-time series kept in the study.
MAX_POINTS = 200

METHOD = ("nodes billed from rental to release as their provider bills them (rounded "
          "up to the billing granularity, at least the minimum once per rental); each "
          "trial pays its reserved GPUs (or CPUs) over the node's, for the seconds it "
          "ran; idle = node money - trials' shares; wasted = shares paid for work lost "
          "to preemption, failure or interruption")


@dataclass
class NodeMoney:
    """One rental's money.

    Attributes:
        node, instance, spot, price_per_hour, currency, granularity_s, min_billing_s,
        lost: The rental (see :class:`~hpsearch.money.ledger_entries.Rental`).
        start_s, end_s: Rented from, and until (None: still rented at the statement).
        length_s: Seconds rented; ``billed_s``: seconds billed; ``cost``: money billed.
        work_cost: The trials' shares; ``wasted_cost``: the lost part of them;
            ``idle_cost``: ``cost - work_cost``.
        work_s: Share-seconds the trials used (seconds x share).
        wasted_s: Share-seconds of work lost.
        restart_s: Share-seconds restarted trials spent starting again after a preemption.
        active_s: Seconds from its first trial's start to its last trial's end.
        trials: Trial number -> the share it paid (its latest interval on this node).
        timeline: ``(time, idle money so far)`` points (ledger clock), the last one
            with the billing rounding included.
    """

    node: str
    instance: str
    spot: bool
    price_per_hour: float
    currency: str
    start_s: float
    end_s: float | None
    length_s: float
    billed_s: float
    cost: float
    work_cost: float
    wasted_cost: float
    idle_cost: float
    work_s: float
    wasted_s: float
    restart_s: float
    active_s: float
    granularity_s: int
    min_billing_s: int
    lost: bool
    trials: dict[int, float] = field(default_factory=dict)
    timeline: list[tuple[float, float]] = field(default_factory=list)

    @property
    def kept_cost(self) -> float:
        return self.work_cost - self.wasted_cost

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kept_cost"] = self.kept_cost
        out["trials"] = {str(k): v for k, v in self.trials.items()}
        out["timeline"] = [list(p) for p in self.timeline]
        return out


@dataclass
class Statement:
    """The money of a ledger at a moment (see the module docstring).

    Attributes:
        currency: The ledger's currency (None when nothing was billed).
        at_s: The moment (ledger clock).
        total: Everything billed: every rental, plus intervals billed on their own.
        kept: Work kept (trials' shares less wasted).
        wasted: Work lost to preemption, failure or interruption (Ctrl-C, a killed
            driver: the epochs since a trial's last checkpoint).
        idle: Paid capacity no trial used (``total - kept - wasted``).
        unplaced: Money of intervals billed on their own (a format-1 ledger; part of
            kept and wasted).
        nodes: One entry per rental, in rental order.
    """

    currency: str | None
    at_s: float
    total: float
    kept: float
    wasted: float
    idle: float
    unplaced: float = 0.0
    nodes: list[NodeMoney] = field(default_factory=list)

    def attrs(self) -> dict[str, Any]:
        """The study's ``money`` attribute (plain JSON data)."""
        return {"currency": self.currency, "at_s": self.at_s, "total": self.total,
                "kept": self.kept, "wasted": self.wasted, "idle": self.idle,
                "unplaced": self.unplaced, "method": METHOD,
                "nodes": [n.to_dict() for n in self.nodes]}


def statement(ledger: Ledger, now_s: float, max_points: int = MAX_POINTS) -> Statement:
    """The :class:`Statement` of ``ledger`` with what is open billed up to ``now_s``."""
    assigned = _by_rental(ledger)
    nodes = [_node_money(rental, assigned.get(i, []), ledger, now_s, max_points)
             for i, rental in enumerate(ledger.rentals)]
    work = sum(i.cost(now_s) for i in ledger.intervals)
    wasted = sum(i.wasted_cost() for i in ledger.intervals)
    total = ledger.spent(now_s)
    unplaced = sum(i.cost(now_s) for i in ledger.intervals if i.node is None)
    return Statement(ledger.currency, now_s, total, work - wasted, wasted, total - work,
                     unplaced, nodes)


def _by_rental(ledger: Ledger) -> dict[int, list[Interval]]:
    """Each node-billed interval under the rental of its node that was open when it
    started (a node id can be rented again in a later session)."""
    starts: dict[str, list[tuple[float, int]]] = {}
    for index, rental in enumerate(ledger.rentals):
        starts.setdefault(rental.node, []).append((rental.start_s, index))
    out: dict[int, list[Interval]] = {}
    for interval in ledger.intervals:
        if interval.node is None or interval.node not in starts:
            continue
        candidates = [i for s, i in starts[interval.node] if s <= interval.start_s + 1e-6]
        index = candidates[-1] if candidates else starts[interval.node][0][1]
        out.setdefault(index, []).append(interval)
    return out


def _node_money(rental: Rental, intervals: list[Interval], ledger: Ledger, now_s: float,
                max_points: int) -> NodeMoney:
    work = sum(i.cost(now_s) for i in intervals)
    wasted = sum(i.wasted_cost() for i in intervals)
    until = rental.until_s(now_s)
    spans = [(max(i.start_s, rental.start_s), min(i.until_s(now_s), until), i.share)
             for i in intervals]
    active = (max(e for _, e, _ in spans) - min(s for s, _, _ in spans)) if spans else 0.0
    cost = rental.cost(now_s)
    return NodeMoney(
        node=rental.node, instance=rental.instance, spot=rental.spot,
        price_per_hour=rental.price_per_hour, currency=rental.currency,
        start_s=rental.start_s, end_s=rental.end_s, length_s=rental.length_s(now_s),
        billed_s=rental.billed_s(now_s), cost=cost, work_cost=work, wasted_cost=wasted,
        idle_cost=cost - work,
        work_s=sum(i.share * (i.until_s(now_s) - i.start_s) for i in intervals),
        wasted_s=sum(i.share * i.wasted_s() for i in intervals),
        restart_s=sum(i.share * (i.startup_s or 0.0) for i in intervals
                      if _after_preemption(ledger, i)),
        active_s=max(0.0, active), granularity_s=rental.granularity_s,
        min_billing_s=rental.min_billing_s, lost=rental.lost,
        trials={i.trial: i.share for i in intervals},
        timeline=_timeline(rental, spans, until, cost, max_points),
    )


def _after_preemption(ledger: Ledger, interval: Interval) -> bool:
    """Whether ``interval`` restarts its trial after a preemption (its start-up is then
    the restart's price)."""
    before = [i for i in ledger.intervals if i.trial == interval.trial
              and i.end_s is not None and i.end_s <= interval.start_s + 1e-6]
    return bool(before) and before[-1].outcome == PREEMPTED


def _timeline(rental: Rental, spans: list[tuple[float, float, float]], until: float,
              cost: float, max_points: int) -> list[tuple[float, float]]:
    """Idle money so far at each moment the node's use changed."""
    steps = sorted([(s, share) for s, _, share in spans]
                   + [(e, -share) for _, e, share in spans])
    per_s = rental.price_per_hour / 3600.0
    points = [(rental.start_s, 0.0)]
    busy, idle, last = 0.0, 0.0, rental.start_s
    for at, change in steps:
        at = min(max(at, rental.start_s), until)
        idle += (1.0 - busy) * (at - last) * per_s
        busy, last = busy + change, at
        if points[-1][0] == at:
            points[-1] = (at, idle)
        else:
            points.append((at, idle))
    idle += (1.0 - busy) * (until - last) * per_s
    work = sum(share * (e - s) for s, e, share in spans) * per_s
    # The billing's rounding and minimum: idle paid at the end of the rental.
    points.append((until, cost - work))
    if len(points) > max_points:
        step = (len(points) - 1) / (max_points - 1)
        points = [points[round(k * step)] for k in range(max_points)]
    return points


def summary_lines(money: Statement, cap: float | None = None,
                  max_nodes: int = 8) -> list[str]:
    """The terminal summary's money lines: the three figures, and one line per node when
    there are several (the largest idle first, at most ``max_nodes``)."""
    from hpsearch.money.fmt import fmt_money

    cur = money.currency or ""
    budget = f" of budget.max_cost {fmt_money(cap, cur)}" if cap is not None else ""
    lines = [f"Spent: {fmt_money(money.total, cur)}{budget}: work kept "
             f"{fmt_money(money.kept, cur)}, wasted {fmt_money(money.wasted, cur)} (work "
             f"lost to preemption, failure or interruption), idle "
             f"{fmt_money(money.idle, cur)} (paid capacity no trial used)"]
    if len(money.nodes) > 1:
        for node in sorted(money.nodes, key=lambda n: -n.idle_cost)[:max_nodes]:
            kind = "spot" if node.spot else "on-demand"
            lines.append(f"  node {node.node[:12]} ({node.instance}, {kind}"
                         f"{', lost' if node.lost else ''}): billed "
                         f"{fmt_money(node.cost, cur)} for {node.billed_s:.0f} s, trials "
                         f"{fmt_money(node.work_cost, cur)}, idle "
                         f"{fmt_money(node.idle_cost, cur)}")
    return lines
