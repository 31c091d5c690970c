"""The cost/accuracy report: what the money of a study bought (pure computations).

Pure module: it works on plain trial records (dicts), so the same code serves a study
read from any Optuna storage, a run still in progress, and hand-made tests. The Optuna
adapter (:mod:`hpsearch.adapters.optuna.results`) produces the records; the writers
(:mod:`hpsearch.report.writers`) turn a :class:`Report` into HTML, CSV, JSON and
Markdown. :func:`build` puts the parts together: each trial's row
(:mod:`.rows`), what the plots draw (:mod:`.curves`), the summary (:mod:`.summary`)
with its money from the nodes' bills (:mod:`.node_money`) or, for an older study, the
trials' own costs (:mod:`.savings`).

A trial record is the dict :mod:`.rows` describes (number, state, value,
intermediate values, params, user attributes, start and end).

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

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from hpsearch import keys
from hpsearch.errors import ConfigError
from hpsearch.money import catalog as catalog_mod
from hpsearch.report.curves import FRONT_STATES, best_vs_cost, cost_by_state, pareto_front
from hpsearch.report.node_money import idle_over_time, node_money
from hpsearch.report.rows import trial_row
from hpsearch.report.savings import on_demand_ratios
from hpsearch.report.summary import storage_summary, study_mode, summarise


@dataclass
class Report:
    """A study's report: per-trial rows, the summary, and the data of the plots.

    Attributes:
        summary: Best trial, counts by state, money spent and wasted, budget used and
            the savings estimates (see :func:`~hpsearch.report.summary.summarise`).
        trials: One row per trial, by number (see
            :func:`~hpsearch.report.rows.trial_row`).
        pareto_front: Numbers of the COMPLETE trials on the metric/cost Pareto front,
            cheapest first.
        best_vs_cost: The best metric against cumulative money (see
            :func:`~hpsearch.report.curves.best_vs_cost`).
        cost_by_state: ``{state: {"n", "cost", "wasted_cost"}}``.
        idle_over_time: Each node's idle money so far over time (see
            :func:`~hpsearch.report.node_money.idle_over_time`); empty for a study from
            before node billing.
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
    summary.update(storage_summary(rows, records, study))
    return Report(
        summary=summary,
        trials=rows,
        pareto_front=front,
        best_vs_cost=best_vs_cost(rows, mode),
        cost_by_state=cost_by_state(rows),
        idle_over_time=idle_over_time(money) if money is not None else [],
    )
