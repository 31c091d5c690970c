"""The simulated backend: replay learning curves on W workers in simulated time, through
the same search core a real run uses.

Pure module, no Ray, no sleeping. Each configuration is a :class:`Curve` (the metric
after each epoch and the cumulative seconds it took). :func:`simulate` runs a search over
an ordered list of configurations with ``workers`` trials at a time: an event queue
orders epoch ends by simulated time, so which trial reports next follows the curves' own
epoch times, exactly as it would on a cluster of that many workers, whatever the speed
of this machine.

Every decision is the :class:`~hpsearch.core.search.SearchCore`'s, as in a real run: a
free worker asks it what to start (a preempted trial the policy still wants first, then
a paused trial the policy resumes, then the next configuration), each epoch end is
reported to it and it answers CONTINUE, STOP or PAUSE (the budget, then the pruning
policy), and it bills every attempt in the ledger on the simulated clock. This module
only moves the clock.

Each worker is a node, priced at ``price.per_hour`` with the price's billing terms. By
default (:attr:`~hpsearch.money.nodes.Fleet.PER_TRIAL`) a worker is rented when a trial
starts on it and released when the trial leaves it (workers released when idle: money
is busy time, with the minimum once per attempt); with
:attr:`~hpsearch.money.nodes.Fleet.HELD` the ``workers`` nodes are a fixed cluster,
rented from time 0 to the end of the search, idle or not.

The result is the full timeline: the busy intervals of every trial (from which money
up to any moment follows), every report and decision, and the core itself (its ledger,
its trials' states).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hpsearch.money.budget import Accountant
from hpsearch.spec.sections import Budget
from hpsearch.trials import TrialState
from hpsearch.core.ports import EpochReport, MemoryStudy, Policy
from hpsearch.core.search import SearchCore
from hpsearch.core.starts import StartKind
from hpsearch.pruning.decisions import Decision
from hpsearch.money.ledger import Ledger
from hpsearch.money.nodes import Demand, Fleet, NodeSpec
from hpsearch.recovery.preemption import preemption_delay_s
from hpsearch.money.pricing import Price


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve.

    Attributes:
        values: The metric after epochs 1..E.
        cum_time_s: Cumulative seconds at the end of epochs 1..E (non-decreasing).
        startup_s: Seconds before the first epoch of every (re)start.
    """

    values: Sequence[float]
    cum_time_s: Sequence[float]
    startup_s: float = 0.0

    @property
    def epochs(self) -> int:
        return len(self.values)

    def epoch_s(self, epoch: int) -> float:
        """Duration of ``epoch`` (1-based)."""
        before = self.cum_time_s[epoch - 2] if epoch > 1 else 0.0
        return max(0.0, self.cum_time_s[epoch - 1] - before)


@dataclass(frozen=True)
class Preemptions:
    """Spot instances in the simulation: each running attempt is preempted at seeded
    Poisson times; the work since its last checkpoint is lost, the restart pays
    ``restart_s`` before its first epoch, and every epoch pays ``checkpoint_s``.

    Attributes:
        rate_per_hour: Preemptions per hour of a running trial.
        restart_s: Seconds a restarted trial is busy before it trains again.
        checkpoint_s: Seconds each epoch's checkpoint adds.
        seed: Seeds every attempt's draw.
    """

    rate_per_hour: float
    restart_s: float = 60.0
    checkpoint_s: float = 0.0
    seed: int = 0

    def after_s(self, trial: int, attempt: int) -> float:
        return preemption_delay_s(self.seed, trial, attempt, self.rate_per_hour)


@dataclass
class Segment:
    """One stretch of a trial on a worker: busy from ``start_s`` to ``end_s``."""

    trial: int
    start_s: float
    end_s: float
    first_epoch: int
    last_epoch: int


@dataclass
class SimResult:
    """Everything that happened in a simulated run.

    Attributes:
        segments: Busy stretches, in the order they ended.
        starts: ``(time, trial)`` of every start and restart, in start order.
        reports: ``(time, trial, epoch, value, decision)`` for every result.
        epochs_done: Epochs each trial completed.
        completed: Trials trained to their last epoch (COMPLETE), with the time they
            finished.
        end_s: When the last worker went idle.
        preempted: ``(time, trial, seconds of work lost, restart seconds paid)``: the
            restart is paid by the trial's next attempt, at once or when the policy
            resumes it (0 if none follows: the policy pruned it, or paused it and never
            resumed it, or it ran out of restarts).
        checkpoint_s: Worker-seconds spent writing checkpoints.
        core: The search core that decided (its ledger holds the money).
    """

    segments: list[Segment] = field(default_factory=list)
    starts: list[tuple[float, int]] = field(default_factory=list)
    reports: list[tuple[float, int, int, float, Decision]] = field(default_factory=list)
    epochs_done: dict[int, int] = field(default_factory=dict)
    completed: dict[int, float] = field(default_factory=dict)
    end_s: float = 0.0
    preempted: list[tuple[float, int, float, float]] = field(default_factory=list)
    checkpoint_s: float = 0.0
    core: SearchCore | None = None

    def busy_s(self, until_s: float | None = None) -> float:
        """Worker-seconds busy up to ``until_s`` (work in flight counts up to that moment)."""
        total = 0.0
        for seg in self.segments:
            end = seg.end_s if until_s is None else min(seg.end_s, until_s)
            total += max(0.0, end - seg.start_s)
        return total

    def trial_busy_s(self, trial: int) -> float:
        return sum(s.end_s - s.start_s for s in self.segments if s.trial == trial)

    @property
    def last_busy_s(self) -> float:
        """When the last worker left its last trial (``end_s`` may be later: it is the
        time of the last event taken from the queue, a preemption of an attempt that had
        already ended included)."""
        return max((seg.end_s for seg in self.segments), default=0.0)


#: The price of a simulated worker-hour unless one is given: 1 per hour, billed exactly
#: (no rounding, no minimum), so money is busy time.
SIM_PRICE = Price(1.0, "USD", "sim", False, 1.0, 1.0, billing_granularity_s=0)


class _Clock:
    """The simulated clock the core and its ledger read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(curves: Sequence[Curve], order: Sequence[int], workers: int,
             policy: Policy | Callable[[Accountant], Policy], preemptions: Preemptions | None = None, *,
             price: Price = SIM_PRICE, budget: Budget | None = None,
             max_epochs: int | None = None, fleet: Fleet = Fleet.PER_TRIAL,
             params: Sequence[Mapping[str, Any]] | None = None,
             study: MemoryStudy | None = None) -> SimResult:
    """Run a search over ``order`` (indices into ``curves``) on ``workers`` workers.

    Epoch ends at the same simulated time are taken in the order they were scheduled, so
    a run is deterministic. With ``preemptions``, a preempted trial the policy still
    wants restarts (before any new configuration) from its last completed epoch; one it
    no longer wants is paused (it resumes, paying the restart, if the policy picks it) or
    pruned, as the core decides.

    Args:
        curves: Every configuration's curve; trial numbers are their indices.
        order: The configurations in the order new trials take them.
        workers: Trials at once.
        policy: The pruning policy the core asks, or a function of the run's
            accountant that makes it (a policy that weighs money).
        preemptions: Spot preemptions, restarts and checkpoint costs, or None.
        price: The price of a worker-hour (billed in the core's ledger: each worker is a
            node at ``price.per_hour``, with the price's granularity and minimum).
        budget: Money and time caps (the core's admission control), or none.
        max_epochs: Epochs of a full trial; default the longest curve.
        fleet: Workers rented per trial attempt (PER_TRIAL, released when idle) or a
            fixed cluster held for the whole search (HELD).
        params: Each configuration's hyperparameters (what a policy sees on start),
            or none.
        study: The study that hands out new configurations (default: a
            :class:`~hpsearch.core.ports.MemoryStudy` over ``order``). Given one (a
            sampler that proposes from what it has seen), ``order`` is unused and the
            search may start as many new trials as the study has left.
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    clock = _Clock()
    epochs = max_epochs or max((c.epochs for c in curves), default=1)
    accountant = Accountant(price, budget or Budget(), Ledger(), epochs, clock,
                            demand=Demand(1.0, 0.0), fleet=fleet)
    if not hasattr(policy, "on_result"):
        policy = policy(accountant)
    configs = list(params) if params is not None else [{} for _ in curves]
    if len(configs) != len(curves):
        raise ValueError(f"params: one per curve ({len(curves)}), got {len(configs)}")
    if study is None:
        study = MemoryStudy(configs, order)
    core = SearchCore(study=study, accountant=accountant,
                      policy=policy, max_epochs=epochs, new_trials=study.left,
                      max_restarts=math.inf, clock=clock)
    return _Simulation(curves, workers, core, clock, preemptions,
                       _Workers(accountant, price, workers, fleet)).run()


class _Workers:
    """The simulated nodes: rented per attempt, or a fixed cluster (see the module)."""

    def __init__(self, accountant: Accountant, price: Price, workers: int, fleet: Fleet):
        self.accountant, self.price, self.fleet = accountant, price, fleet
        self.free = [f"w{k}" for k in range(workers)] if fleet is Fleet.HELD else []
        self.on: dict[int, str] = {}  # trial -> its node
        for node in self.free:
            accountant.node_rented(self.node(node), 0.0)

    def node(self, node_id: str) -> NodeSpec:
        price = self.price
        return NodeSpec(node_id, price.instance, price.spot, price.per_hour, price.currency,
                        cpus=1.0, granularity_s=price.billing_granularity_s,
                        min_billing_s=price.min_billing_s)

    def take(self, trial: int, attempt: int, at: float) -> str:
        if self.fleet is Fleet.HELD:
            node = self.free.pop(0)
        else:
            node = f"w{trial}.{attempt}"
            self.accountant.node_rented(self.node(node), at)
        self.on[trial] = node
        return node

    def give_back(self, trial: int, at: float, lost: bool = False) -> None:
        node = self.on.pop(trial)
        if self.fleet is Fleet.HELD:
            self.free.append(node)
        else:
            self.accountant.node_released(node, at, lost=lost)

    def release_all(self, at: float) -> None:
        for node in list(self.free):
            self.accountant.node_released(node, at)


class _Simulation:
    """The event loop of :func:`simulate`."""

    def __init__(self, curves: Sequence[Curve], workers: int, core: SearchCore,
                 clock: _Clock, preemptions: Preemptions | None, nodes: _Workers):
        self.curves, self.workers, self.core, self.clock = curves, workers, core, clock
        self.nodes = nodes
        self.preemptions = preemptions
        self.ckpt_s = preemptions.checkpoint_s if preemptions else 0.0
        self.result = SimResult(core=core)
        # (time, sequence, trial, epoch or 0 for a preemption, attempt)
        self.events: list[tuple[float, int, int, int, int]] = []
        self.running: dict[int, tuple[float, int, int]] = {}  # trial -> (start, first, attempt)
        self.attempts: dict[int, int] = {}
        self.checkpointed_at: dict[int, float] = {}
        #: Preempted trials that will pay restart_s at their next start: the index of
        #: their preemption in ``result.preempted``.
        self.restarting: dict[int, int] = {}
        self.sequence = 0

    def push(self, t: float, trial: int, epoch: int, attempt: int) -> None:
        heapq.heappush(self.events, (t, self.sequence, trial, epoch, attempt))
        self.sequence += 1

    def start(self, trial: int, at: float) -> None:
        done = self.result.epochs_done.get(trial, 0)
        curve = self.curves[trial]
        attempt = self.attempts[trial] = self.attempts.get(trial, 0) + 1
        self.core.started(trial, node=self.nodes.take(trial, attempt, at))
        self.result.starts.append((at, trial))
        self.running[trial] = (at, done + 1, attempt)
        self.checkpointed_at[trial] = at
        restart_s = 0.0
        if trial in self.restarting:
            index = self.restarting.pop(trial)
            restart_s = self.preemptions.restart_s
            when, _, lost_s, _ = self.result.preempted[index]
            self.result.preempted[index] = (when, trial, lost_s, restart_s)
        setup = curve.startup_s + restart_s
        self.push(at + setup + curve.epoch_s(done + 1) + self.ckpt_s, trial, done + 1, attempt)
        if self.preemptions is not None:
            self.push(at + self.preemptions.after_s(trial, attempt), trial, 0, attempt)

    def fill(self, at: float) -> None:
        while len(self.running) < self.workers:
            start = self.core.next_start()
            if start.kind not in (StartKind.NEW, StartKind.RESUME):
                return
            self.start(start.number, at)

    def leave(self, trial: int, now: float, epoch: int) -> None:
        seg_start, first, _ = self.running.pop(trial)
        self.result.segments.append(Segment(trial, seg_start, now, first, epoch))

    def preempt(self, trial: int, now: float) -> None:
        self.leave(trial, now, self.result.epochs_done.get(trial, 0))
        self.result.preempted.append((now, trial, now - self.checkpointed_at[trial], 0.0))
        # The policy judges it again: it restarts (PREEMPTED), waits with the paused
        # trials (PAUSED), or is gone (PRUNED, FAILED). Its node goes back either way.
        state = self.core.preempted(trial, "simulated preemption")
        self.nodes.give_back(trial, now, lost=True)
        if state in (TrialState.PREEMPTED, TrialState.PAUSED):
            self.restarting[trial] = len(self.result.preempted) - 1

    def epoch_end(self, trial: int, epoch: int, attempt: int, now: float) -> None:
        curve = self.curves[trial]
        value = curve.values[epoch - 1]
        epoch_s = curve.epoch_s(epoch) + self.ckpt_s
        seg_start, first, _ = self.running[trial]
        self.result.epochs_done[trial] = epoch
        self.result.checkpoint_s += self.ckpt_s
        self.checkpointed_at[trial] = now
        decision = self.core.reported(EpochReport(
            trial, epoch, value, epoch_s, trial_time_s=now - seg_start,
            start_epoch=first - 1))
        self.result.reports.append((now, trial, epoch, value, decision))
        if decision is Decision.CONTINUE and epoch < curve.epochs:
            self.push(now + curve.epoch_s(epoch + 1) + self.ckpt_s, trial, epoch + 1, attempt)
            return
        self.leave(trial, now, epoch)
        state = self.core.ended(trial)
        self.nodes.give_back(trial, now)
        if state is TrialState.COMPLETE:
            self.result.completed[trial] = now

    def run(self) -> SimResult:
        now = 0.0
        self.fill(now)
        while self.events:
            now, _, trial, epoch, attempt = heapq.heappop(self.events)
            if trial not in self.running or self.running[trial][2] != attempt:
                continue  # an event of an attempt that has ended
            self.clock.now = now
            if epoch == 0:
                self.preempt(trial, now)
            else:
                self.epoch_end(trial, epoch, attempt, now)
            self.fill(now)
        self.result.end_s = now
        self.nodes.release_all(self.result.last_busy_s)
        self.core.close()
        return self.result

