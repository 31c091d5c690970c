"""Benchmark: pruning policies priced on real learning curves with real epoch times.

For each task and seed, a pool of N configurations (default 200) is drawn; every policy
searches the same pool in the same seeded order with the same number of workers and the
same price, in simulated time (:mod:`hpsearch.simulate`). The target is the pool's best
final validation accuracy minus 0.5 percentage points: what training every configuration
to the end would find. Per run:

* ``hit``: a trial trained to its last epoch reached the target; ``money_to_hit`` is all
  busy worker time until that moment (epochs in flight included) x the price;
* ``regret_pp``: pool best minus the best fully trained trial, at the end;
* ``money``: the whole run's busy worker time x price;
* ``x_oracle``: money to the hit over the cost of training only the best configuration;
* ``hit_start_x_oracle``: when the trial that hit first was started, in durations of
  the best configuration's training (with every worker busy, ``x_oracle`` is about
  ``workers x (hit_start_x_oracle + that trial's own duration)``);
* ``wasted``: share of the money spent on trials that were not trained to the end;
* ``money_to_hit_fixed`` / ``money_fixed``: the same search's money on a fixed cluster
  of ``--workers`` nodes billed for its wall time (to the hit / to the end), idle or
  not, beside the money above, where workers are released when idle (busy time).

Quoted: hits over runs, and the median over the runs that hit of money to the hit as a
share of no pruning's money to the hit on the same task and seed (``x_none``).

    python -m benchmarks.policies [--tasks fashion-mnist covertype higgs helena
        blood-transfusion] [--seeds 0 1 2 3 4] [--n 200] [--workers 4]
        [--policies ...] [--sampler order|tpe] [--data DIR] [--out DIR] [--quick]

With ``--sampler tpe`` the order is not fixed: hpsearch's default sampler proposes each
new trial from a real Optuna study of the run (:mod:`benchmarks.sampled`), so a policy's
evidence also decides what is tried next; ``hit_started`` says how many configurations
had started when the first one that hits did.

A second table runs every policy again on spot (a third of the price) with simulated
preemptions: the work since the last checkpoint is lost, restarts and checkpoints cost
worker time, all counted in the money.

Writes ``runs.csv`` (every run), ``summary.md`` (medians per policy) and
``accuracy_vs_money.png`` (best fully trained accuracy against money, per policy) to
``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import lcbench, peers, sampled
from benchmarks import priors as priors_mod
from hpsearch.money.nodes import fleet_cost
from hpsearch.simulate import Preemptions, SimResult, simulate

TARGET_PP = 0.5
PRICE_PER_HOUR = 1.0  # the same for every policy: money is proportional to busy time


def run_metrics(pool: lcbench.Pool, result: SimResult,
                price_per_hour: float = PRICE_PER_HOUR, workers: int | None = None) -> dict:
    """The figures of one simulated run (money in price units; with ``workers``, also on
    a fixed cluster of that many nodes).

    A hit is the pool objective's (:meth:`benchmarks.lcbench.Objective.hits`): within
    0.5 pp of the best final accuracy, or within 2% of the best final loss; ``regret_pp``
    is in percentage points of accuracy, or in percent of the best loss.
    """
    finals = pool.finals()
    objective = pool.objective
    best = pool.best_final()
    hit_at = {trial: t for trial, t in result.completed.items()
              if objective.hits(finals[trial], best)}
    first_hit = min(hit_at, key=hit_at.get) if hit_at else None
    t_hit = None if first_hit is None else hit_at[first_hit]
    trained = [finals[t] for t in result.completed]
    kept = (max(trained) if objective.mode == "max" else min(trained)) if trained else None
    total = result.busy_s()
    wasted = sum(result.trial_busy_s(t) for t in result.epochs_done
                 if t not in result.completed)
    oracle = pool.curves[pool.best()].cum_time_s[-1]
    money_to_hit = result.busy_s(t_hit) if t_hit is not None else None
    lost = sum(p[2] for p in result.preempted)
    restarts = sum(p[3] for p in result.preempted)
    return {
        "hit": t_hit is not None,
        **breakdown(pool, result, t_hit),
        "money_to_hit": None if money_to_hit is None else money_to_hit * price_per_hour / 3600,
        # Nothing trained fully: the whole best accuracy, or the pool's worst loss.
        "regret_pp": objective.regret(kept if kept is not None else (
            0.0 if objective.mode == "max" else float(finals.max())), best),
        "money": total * price_per_hour / 3600,
        "preemptions": len(result.preempted),
        "lost_share": (lost + restarts) / total if total else 0.0,
        "checkpoint_share": result.checkpoint_s / total if total else 0.0,
        "x_oracle": None if money_to_hit is None else money_to_hit / oracle,
        # When the trial that hit first was started, in durations of the oracle: with
        # every worker busy, x_oracle is about workers x (this + its own duration).
        "hit_start_x_oracle": (None if first_hit is None else min(
            when for when, trial in result.starts if trial == first_hit) / oracle),
        "wasted": wasted / total if total else 0.0,
        "trained_fully": len(result.completed),
        "epochs": sum(result.epochs_done.values()),
        "sim_hours": result.end_s / 3600,
        **({} if workers is None else {
            "money_to_hit_fixed": (None if t_hit is None
                                   else fleet_cost(workers, t_hit, price_per_hour)),
            "money_fixed": fleet_cost(workers, result.last_busy_s, price_per_hour)}),
    }


#: The breakdown of the money to the hit: a configuration is *good* when its true final
#: is in the pool's best quarter; it was *looked at* when trained at most a tenth of the
#: epochs, *tried* up to half, *run* beyond half (or to the end) by the time of the hit.
BREAKDOWN_TOP = 0.25
BREAKDOWN_DEPTHS = ((0.1, "looked_at"), (0.5, "tried"), (1.0, "run"))
BREAKDOWN_KEYS = tuple(f"to_hit_{rank}_{depth}" for rank in ("good", "poor")
                       for _, depth in BREAKDOWN_DEPTHS)


def breakdown(pool: lcbench.Pool, result: SimResult, t_hit: float | None) -> dict:
    """Shares of the money to the hit (they sum to 1) by the configuration's true rank in
    the pool (good: best quarter of the finals, poor: the rest) and by how far it was
    trained by then (see :data:`BREAKDOWN_DEPTHS`): where a cheaper policy would have to
    save. All None for a run that did not hit."""
    if t_hit is None:
        return dict.fromkeys(BREAKDOWN_KEYS)
    sign = 1.0 if pool.objective.mode == "max" else -1.0
    order = np.argsort(-sign * pool.finals(), kind="stable")
    good = set(int(t) for t in order[:max(1, int(round(BREAKDOWN_TOP * len(order))))])
    spent: dict[int, float] = {}
    for seg in result.segments:
        if seg.start_s < t_hit:
            spent[seg.trial] = spent.get(seg.trial, 0.0) + min(seg.end_s, t_hit) - seg.start_s
    trained: dict[int, int] = {}
    for at, trial, epoch, _, _ in result.reports:
        if at <= t_hit:
            trained[trial] = max(trained.get(trial, 0), epoch)
    total = sum(spent.values())
    out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    for trial, seconds in spent.items():
        share = trained.get(trial, 0) / pool.curves[trial].epochs
        depth = next(name for upto, name in BREAKDOWN_DEPTHS if share <= upto)
        rank = "good" if trial in good else "poor"
        out[f"to_hit_{rank}_{depth}"] += seconds / total if total else 0.0
    return out


def task_group(task: str) -> str:
    """``dev`` for the 13 development tasks, ``synthetic``, else ``other``."""
    if task in lcbench.DEV_TASKS or task in lcbench.SURROGATE_TASKS.values():
        return "dev"
    return "synthetic" if task == "synthetic" else "other"


def calibration(pool: lcbench.Pool, result: SimResult) -> dict:
    """How many 80% intervals the policy predicted (``pred_n``; the policy's
    ``predictions``, if it keeps any) and how many held the trial's true final value
    (``pred_in``: the final of its curve, whether or not it was trained that far)."""
    predictions = getattr(result.core.policy, "predictions", None) if result.core else None
    if predictions is None:
        return {"pred_n": None, "pred_in": None}
    finals = pool.finals()
    inside = sum(1 for p in predictions if p.low <= finals[p.trial] <= p.high)
    return {"pred_n": len(predictions), "pred_in": inside}


def anytime(pool: lcbench.Pool, result: SimResult) -> list[tuple[float, float]]:
    """(money, best fully trained accuracy) at each completion, in time order."""
    finals = pool.finals()
    points, best = [], -np.inf
    for trial, t in sorted(result.completed.items(), key=lambda kv: kv[1]):
        best = max(best, finals[trial])
        points.append((result.busy_s(t) * PRICE_PER_HOUR / 3600, best))
    return points


#: The spot market of the second table: a third of the on-demand price (the design
#: notes' rule of thumb), preemptions at 0.5 per running hour (measured single-V100 spot
#: runs last 0.8-3.6 h), a 60 s restart and a 2 s checkpoint every epoch.
SPOT_PRICE = PRICE_PER_HOUR / 3
SPOT_RATE_PER_HOUR = 0.5
SPOT_RESTART_S = 60.0
SPOT_CHECKPOINT_S = 2.0


#: What proposes new configurations: the pool in a seeded random order (every policy
#: the same order), or hpsearch's default sampler (TPE) learning from the study
#: (:mod:`benchmarks.sampled`).
SAMPLERS = ("order", "tpe", "curve")
SAMPLER_TEXT = {"order": "in a seeded random order (the same for every policy)",
                "tpe": "proposed by TPE from the study, each mapped to the nearest untried "
                       "configuration",
                "curve": "chosen by the curve sampler among the untried configurations"}


PRIOR_TEXT = {"none": "", "loto": ", from a prior of one earlier cost_aware study of every "
              "other task", "loto-full": ", from a prior of one exhaustive earlier study "
              "of every other task"}


def run_all(tasks, seeds, policies, n, workers, data, log=print, options=None,
            spot_rate: float | None = None, objective: str = "acc", sampler: str = "order",
            priors=None, study_class=None):
    """Every (task, seed, policy) run, on demand and (with ``spot_rate``) on spot with
    simulated preemptions, on ``objective`` (``acc`` or ``loss``, see
    :data:`benchmarks.lcbench.OBJECTIVES`), with new configurations from ``sampler``
    (:data:`SAMPLERS`), the curve sampler starting from ``priors(task)`` (earlier
    studies) if given, each run's study a ``study_class`` (default
    :class:`benchmarks.sampled.SampledStudy`; a benchmark's variant of it); returns the
    rows and the anytime curves (on demand)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler: one of {', '.join(SAMPLERS)} (got {sampler!r})")
    rows, curves = [], {}
    markets = ["on-demand"] + (["spot"] if spot_rate else [])
    for task in tasks:
        for seed in seeds:
            pool = lcbench.load_pool(task, n, seed, data, objective)
            order = list(np.random.default_rng([seed, 1]).permutation(n))
            space = (sampled.pool_space(pool.configs, lcbench.task_space(task, data))
                     if sampler != "order" else None)
            max_epochs = max(c.epochs for c in pool.curves)
            # Random search without pruning (the fixed order): what every row's money
            # to the hit is also measured against (x_none_order).
            order_hit = (run_metrics(pool, simulate(
                pool.curves, order, workers, peers.make(
                    "none", max_epochs=max_epochs, n_trials=n, seed=seed),
                params=pool.configs))["money_to_hit"] if space else None)
            for market in markets:
                for policy in policies:
                    run = Run(task, seed, policy, market, n, workers, sampler, spot_rate)
                    study = ((study_class or sampled.SampledStudy)(
                        pool.configs, space, pool.objective.mode, seed, sampler,
                        prior=priors(task) if priors else (), max_epochs=max_epochs)
                        if space else None)
                    row, anytime_curve = run.measure(pool, order, study, options)
                    rows.append(row)
                    if market != "spot":
                        curves[(task, seed, policy)] = anytime_curve
            _relate(rows, task, seed, order_hit if space else None, bool(space), log)
    return rows, curves


@dataclass(frozen=True)
class Run:
    """One policy's search of one task's pool at one seed on one market."""

    task: str
    seed: int
    policy: str
    market: str
    n: int
    workers: int
    sampler: str
    spot_rate: float | None

    def measure(self, pool: lcbench.Pool, order, study, options) -> tuple[dict, Any]:
        """Its row of ``runs.csv`` and its anytime curve."""
        spot = self.market == "spot"
        started = time.perf_counter()
        # The study goes along for the policies that read its prior (cost_aware-model-aX).
        scheduler = peers.make(self.policy, max_epochs=max(c.epochs for c in pool.curves),
                               n_trials=self.n, seed=self.seed, mode=pool.objective.mode,
                               metric=pool.objective.metric, study=study, **(options or {}))
        result = simulate(pool.curves, order, self.workers, scheduler, preemptions=(
            Preemptions(self.spot_rate, SPOT_RESTART_S, SPOT_CHECKPOINT_S, self.seed)
            if spot else None), params=pool.configs, study=study)
        row = {"task": self.task, "seed": self.seed, "policy": self.policy,
               "market": self.market, "objective": pool.objective.name,
               "group": task_group(self.task), "sampler": self.sampler,
               "hit_started": hit_started(pool, result),
               **calibration(pool, result),
               "n": self.n, "workers": self.workers,
               **run_metrics(pool, result, SPOT_PRICE if spot else PRICE_PER_HOUR,
                             self.workers),
               **decision_cost(study),
               "wall_s": time.perf_counter() - started}
        return row, (anytime(pool, result) if not spot else None)


def _relate(rows: list[dict], task: str, seed: int, order_hit: float | None,
            sampled_in_loop: bool, log) -> None:
    """Each run of ``task`` at ``seed`` against no pruning on demand (``x_none``, on a
    fixed cluster ``x_none_fixed``) and against random search without pruning
    (``x_none_order``), logged."""
    base = next((r for r in rows if (r["task"], r["seed"], r["policy"], r["market"])
                 == (task, seed, "none", "on-demand")), None)
    for r in rows:
        if (r["task"], r["seed"]) != (task, seed):
            continue
        # Every run, spot included, against no pruning on demand.
        r["x_none"] = (r["money_to_hit"] / base["money_to_hit"]
                       if base and r["hit"] and base["hit"] else None)
        r["x_none_fixed"] = (r["money_to_hit_fixed"] / base["money_to_hit_fixed"]
                             if base and r["hit"] and base["hit"] else None)
        # Against random search without pruning (the fixed order's none).
        reference_hit = (order_hit if sampled_in_loop else
                         base["money_to_hit"] if base else None)
        r["x_none_order"] = (r["money_to_hit"] / reference_hit
                             if reference_hit and r["hit"] else None)
        log(f"{task:18s} seed {seed} {r['market']:9s} {r['policy']:17s} hit "
            f"{str(r['hit']):5s} x_none {fmt(r['x_none'])} "
            f"regret {r['regret_pp']:.2f} pp")


def decision_cost(study) -> dict:
    """The sampler's CPU seconds per decision (each proposal and resume ranking):
    median and largest, and how many (empty without a sampler in the loop)."""
    seconds = sorted(getattr(study, "decision_s", None) or [])
    if not seconds:
        return {"decisions": 0, "decision_s_median": None, "decision_s_max": None}
    return {"decisions": len(seconds), "decision_s_median": statistics.median(seconds),
            "decision_s_max": seconds[-1]}


def hit_started(pool: lcbench.Pool, result: SimResult) -> int | None:
    """How many configurations had been started when the first one whose final is a hit
    started (1 = the first): how soon the sampler (or the order) proposed one."""
    finals, best = pool.finals(), pool.best_final()
    seen: list[int] = []
    for _, trial in result.starts:
        if trial not in seen:
            seen.append(trial)
            if pool.objective.hits(finals[trial], best):
                return len(seen)
    return None


def publish(out: Path, text: str) -> None:
    """Write a benchmark's table to ``out`` (its folder made) and print it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print()
    print(text)


def fmt(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summarise(rows: list[dict], policies, market: str = "on-demand",
              group: str | None = None) -> list[dict]:
    """Per policy (on ``market``, in task ``group`` or all): hits, medians over the runs
    that hit of money to the hit (x none, x oracle), mean and median regret, and the
    calibration of its predicted 80% intervals (share of true finals inside)."""
    out = []
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy and r["market"] == market
                and (group is None or r.get("group") == group)]
        hits = [r for r in mine if r["hit"]]
        predicted = sum(r.get("pred_n") or 0 for r in mine)
        inside = sum(r.get("pred_in") or 0 for r in mine)

        def med(key, among=hits):
            values = [r[key] for r in among if r[key] is not None]
            return statistics.median(values) if values else None

        out.append({"policy": policy, "hits": len(hits), "runs": len(mine),
                    "x_none": med("x_none"), "x_none_fixed": med("x_none_fixed"),
                    "x_none_order": med("x_none_order"),
                    "decision_s_median": med("decision_s_median", mine),
                    "decision_s_max": max((r["decision_s_max"] for r in mine
                                           if r.get("decision_s_max") is not None),
                                          default=None),
                    "x_oracle": med("x_oracle"),
                    "hit_start_x_oracle": med("hit_start_x_oracle"),
                    "hit_started": med("hit_started", [r for r in mine
                                                       if r.get("hit_started") is not None]),
                    "regret_pp": med("regret_pp", mine),
                    "regret_mean": (statistics.mean(r["regret_pp"] for r in mine)
                                    if mine else None),
                    "calibration": inside / predicted if predicted else None,
                    "predictions": predicted,
                    "wasted": med("wasted", mine),
                    "money_x_none": _money_ratio(rows, mine),
                    "lost_share": med("lost_share", mine),
                    "checkpoint_share": med("checkpoint_share", mine),
                    "preemptions": med("preemptions", mine),
                    **{k: (statistics.mean(r[k] for r in hits) if hits else None)
                       for k in BREAKDOWN_KEYS}})
    return out


def _money_ratio(rows, mine) -> float | None:
    ratios = []
    for r in mine:
        base = next((b for b in rows if b["policy"] == "none" and b["task"] == r["task"]
                     and b["seed"] == r["seed"] and b["market"] == "on-demand"), None)
        if base:
            ratios.append(r["money"] / base["money"])
    return statistics.median(ratios) if ratios else None


def dominated_by(summary: list[dict], policy: str) -> list[str]:
    """Peers both more often right and cheaper (median x_none) than ``policy``."""
    me = next(s for s in summary if s["policy"] == policy)
    out = []
    for s in summary:
        if (s["policy"] == policy or s["policy"].startswith("cost_aware")
                or s["x_none"] is None or me["x_none"] is None):
            continue
        if s["hits"] >= me["hits"] and s["x_none"] <= me["x_none"] and (
                s["hits"] > me["hits"] or s["x_none"] < me["x_none"]):
            out.append(s["policy"])
    return out


def markdown(summary: list[dict], args, spot: list[dict] | None = None,
             groups: dict[str, list[dict]] | None = None) -> str:
    """The benchmark's summary in Markdown: its settings, a table per task group, where
    the money went, and the spot table."""
    lines = [_settings_line(args)]
    for name, rows in (groups or {"all": summary}).items():
        lines += _group_table(name, rows)
    lines += ["", f"Money to hit two ways: {args.workers} workers released when idle (busy "
              f"time x price), and a fixed cluster of {args.workers} nodes billed for the "
              "search's wall time to the hit, idle or not."]
    lines += breakdown_table(summary)
    if any(s["policy"] == "cost_aware" for s in summary):
        beaten = dominated_by(summary, "cost_aware")
        lines += ["", "Peers both more often right and cheaper than cost_aware: "
                  + (", ".join(beaten) if beaten else "none")]
    if spot:
        lines += _spot_table(spot, args)
    return "\n".join(lines) + "\n"


def _settings_line(args) -> str:
    """What was measured: the objective, tasks, seeds, sampler, pools, workers, a hit."""
    objective = lcbench.OBJECTIVES[getattr(args, "objective", "acc")]
    unit = "pp" if objective.mode == "max" else "% of the best loss"
    target = (f"within {lcbench.ACC_TOLERANCE_PP} pp of the pool's best final accuracy"
              if objective.mode == "max" else
              f"within {lcbench.LOSS_TOLERANCE:.0%} of the pool's best final loss")
    return (f"Objective {objective.name} ({objective.metric}, {objective.mode}); tasks "
            f"{', '.join(args.tasks)}; seeds {' '.join(map(str, args.seeds))}; new "
            f"configurations {SAMPLER_TEXT[getattr(args, 'sampler', 'order')]}"
            f"{PRIOR_TEXT[getattr(args, 'prior', 'none')]}; "
            f"pools of {args.n}; {args.workers} workers; hit = a trial trained to the end "
            f"{target}; regret in {unit}.")


def _group_table(name: str, rows: list[dict]) -> list[str]:
    """One task group's table: a row per policy."""
    lines = [
        "", f"Task group {name}:", "",
        "| policy | hits | money to hit (x none, median of hits) | same, x none in "
        "the fixed order | same, fixed cluster "
        "(x none) | x oracle | regret (mean) | regret (median) | wasted share | "
        "whole run (x none) | calibration of 80% intervals | first hitting "
        "configuration started (median position) | the trial that hit started at "
        "(x oracle, median) | sampler CPU per decision (median / max, s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in rows:
        calib = ("-" if s.get("calibration") is None else
                 f"{s['calibration']:.0%} of {s['predictions']}")
        lines.append(
            f"| {s['policy']} | {s['hits']}/{s['runs']} | {fmt(s['x_none'])} | "
            f"{fmt(s.get('x_none_order'))} | "
            f"{fmt(s.get('x_none_fixed'))} | {fmt(s['x_oracle'])} | "
            f"{fmt(s['regret_mean'], 3)} | {fmt(s['regret_pp'], 3)} | "
            f"{fmt(s['wasted'])} | {fmt(s['money_x_none'])} | {calib} | "
            f"{fmt(s.get('hit_started'), 0)} | {fmt(s.get('hit_start_x_oracle'))} | "
            f"{fmt(s.get('decision_s_median'), 3)} / {fmt(s.get('decision_s_max'), 2)} |")
    return lines


def _spot_table(spot: list[dict], args) -> list[str]:
    """The spot market's table and who beats cost_aware there."""
    lines = [
        "", f"On spot at a third of the price, {args.spot_rate:g} preemptions per "
        f"running hour, {SPOT_RESTART_S:g} s per restart, {SPOT_CHECKPOINT_S:g} s per "
        "checkpoint (money against no pruning on demand):", "",
        "| policy | hits | money to hit (x none on-demand) | regret pp (median) | "
        "preemptions per run | lost work + restarts (share) | checkpoints (share) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in spot:
        lines.append(f"| {s['policy']} | {s['hits']}/{s['runs']} | {fmt(s['x_none'])} | "
                     f"{fmt(s['regret_pp'])} | {fmt(s['preemptions'], 0)} | "
                     f"{fmt(s['lost_share'], 3)} | {fmt(s['checkpoint_share'], 3)} |")
    if any(s["policy"] == "cost_aware" for s in spot):
        beaten = dominated_by(spot, "cost_aware")
        lines += ["", "On spot, peers both more often right and cheaper than cost_aware: "
                  + (", ".join(beaten) if beaten else "none")]
    return lines


def breakdown_table(summary: list[dict]) -> list[str]:
    """Markdown lines: each policy's mean :func:`breakdown` over its runs that hit."""
    bounds = [0.0] + [upto for upto, _ in BREAKDOWN_DEPTHS]
    depths = ", ".join(f"{name} = trained {'up to' if low == 0 else f'over {low:.0%} and up to'} "
                       f"{upto:.0%} of its epochs"
                       for low, (upto, name) in zip(bounds, BREAKDOWN_DEPTHS))
    lines = ["", f"Where the money to the hit went (mean share over the runs that hit; "
             f"good = a configuration whose true final is in the pool's best "
             f"{BREAKDOWN_TOP:.0%}, poor = the rest; {depths}, by the time of the hit):",
             "", "| policy | " + " | ".join(k.removeprefix("to_hit_").replace("_", " ")
                                         for k in BREAKDOWN_KEYS) + " |",
             "|---|" + "---|" * len(BREAKDOWN_KEYS)]
    for s in summary:
        lines.append(f"| {s['policy']} | "
                     + " | ".join(fmt(s.get(k)) for k in BREAKDOWN_KEYS) + " |")
    return lines


def plot(curves, tasks, seeds, policies, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        seed = seeds[0]
        for policy in policies:
            pts = curves.get((task, seed, policy), [])
            if pts:
                xs, ys = zip(*pts)
                ax.step(xs, ys, where="post", label=policy)
        ax.set_xscale("log")
        ax.set_title(f"{task} (seed {seed})")
        ax.set_xlabel("money (busy worker-hours x price)")
        ax.set_ylabel("best fully trained val acc (%)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks = [args.tasks[0]] if args.tasks != parser.get_default("tasks") else (
            ["fashion-mnist"] if args.data else ["synthetic"])
        args.seeds, args.n = [args.seeds[0]], 60
    try:
        for policy in args.policies:  # a typo fails before the first run, not after an hour
            peers.make(policy, max_epochs=52, n_trials=2, seed=0)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.prior != "none" and args.sampler != "curve":
        print("error: --prior: only --sampler curve reads a prior", file=sys.stderr)
        return 2
    prior_policy = priors_mod.PRIORS[args.prior]
    priors = (priors_mod.LeaveOneTaskOut(args.tasks, args.n, args.data, args.objective,
                                         prior_policy, args.workers)
              if prior_policy else None)
    try:
        rows, curves = run_all(args.tasks, args.seeds, args.policies, args.n, args.workers,
                               args.data, spot_rate=args.spot_rate,
                               objective=args.objective, sampler=args.sampler,
                               priors=priors)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _write(args, rows, curves)
    return 0


def _write(args, rows: list[dict], curves) -> None:
    """``runs.csv``, ``summary.md`` and the plot in ``args.out``; the summary printed."""
    import pandas as pd

    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out / "runs.csv", index=False)
    summary = summarise(rows, args.policies)
    present = [g for g in ("dev", "other", "synthetic") if any(r["group"] == g for r in rows)]
    groups = {g: summarise(rows, args.policies, group=g) for g in present}
    spot = summarise(rows, args.policies, "spot") if args.spot_rate else None
    text = markdown(summary, args, spot, groups)
    (args.out / "summary.md").write_text(text)
    plot(curves, args.tasks, args.seeds, args.policies, args.out / "accuracy_vs_money.png")
    print()
    print(text)
    print(f"wrote {args.out / 'runs.csv'}, {args.out / 'summary.md'}, "
          f"{args.out / 'accuracy_vs_money.png'}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Pruning policies priced on real learning curves (simulated time).")
    parser.add_argument("--tasks", nargs="+",
                        default=list(lcbench.DEV_TASKS),
                        help="tasks (names, OpenML ids, synthetic; default the 13 "
                             "development tasks)")
    parser.add_argument("--objective", choices=sorted(lcbench.OBJECTIVES), default="acc",
                        help="acc: val_accuracy, max, hit within 0.5 pp of the pool's best; "
                             "loss: val_cross_entropy, min, hit within 2%% of the best loss")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=200, help="configurations per pool")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--policies", nargs="+", default=list(peers.PEERS))
    parser.add_argument("--data", type=Path, default=lcbench.default_data_dir(),
                        help="benchmark data folder (default $HPSEARCH_BENCHDATA or "
                             "../shared/benchdata)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--spot-rate", type=float, default=SPOT_RATE_PER_HOUR,
                        help="preemptions per running hour of the spot table "
                             f"(default {SPOT_RATE_PER_HOUR}; 0 = no spot table)")
    parser.add_argument("--sampler", choices=SAMPLERS, default="order",
                        help="order: the pool in a seeded random order, the same for every "
                             "policy (default); tpe: hpsearch's default sampler proposes "
                             "each new trial from the study, mapped to the nearest untried "
                             "configuration of the pool")
    parser.add_argument("--prior", choices=sorted(priors_mod.PRIORS), default="none",
                        help="the curve sampler's prior: none; loto: an earlier cost_aware "
                             "study of every other task (leave one task out); loto-full: "
                             "an exhaustive one")
    parser.add_argument("--quick", action="store_true",
                        help="one task, one seed, 60 configurations (CI; under a minute)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
