"""The lines a session starts with: what it runs, at what price and budget, where its
files are, and what a continued study already holds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from hpsearch.driver.prepare import prior_text
from hpsearch.money.fmt import fmt_money
from hpsearch.report.progress import display_path, display_url
from hpsearch.spec import config as config_mod

log = logging.getLogger("hpsearch")


def _billing_terms(price) -> str:
    """``billed per second, at least 60 s per rental``."""
    unit = ("per second" if price.billing_granularity_s <= 1
            else f"per {price.billing_granularity_s} s")
    minimum = (f", at least {price.min_billing_s} s per rental"
               if price.min_billing_s > price.billing_granularity_s else "")
    return f"billed {unit}{minimum}"


class SessionHeader:
    """The lines a session starts with.

    Args:
        config: The run's config.
        price: The trial's price on the run's nodes (:class:`~hpsearch.money.pricing.Price`).
        run_path: The run dir.
        url: The study's storage URL.
        checkpoints: The run's checkpoint storage (shown when it is not the run dir's).
        prior: The curve sampler's earlier studies (``search.prior``).
        out: Receives the lines.
    """

    def __init__(self, config: config_mod.Config, price: Any, run_path: Path, url: str,
                 checkpoints: Any, prior: list, out: Callable[[str], None]):
        self.config = config
        self.price = price
        self.run_path = run_path
        self.url = url
        self.checkpoints = checkpoints
        self.prior = prior
        self.out = out

    def continuing(self, done_before: int, orphans: list, stopped: list, paused: int,
                   spent_before: float) -> None:
        """Say what a continued study holds: trials finished (``done_before`` less the
        ``paused`` and budget-``stopped`` ones), money spent, and the trials that resume."""
        price = self.price
        self.out(f"Continuing study '{self.config.name}' in {display_path(self.run_path)}: "
                 f"{done_before - paused - len(stopped)} trial(s) finished, "
                 f"{fmt_money(spent_before, price.currency)} spent"
                 + (f"; resuming {len(orphans)} unfinished trial(s) "
                    f"({', '.join(map(str, orphans))}) from their checkpoints"
                    if orphans else "")
                 + (f"; {len(stopped)} stopped by budget ({', '.join(map(str, stopped))}) "
                    f"resume first from their checkpoints, as money allows" if stopped else "")
                 + (f"; {paused} paused" if paused else ""))

    def announce(self, concurrency: int, remaining: int) -> None:
        """Say what the session runs (``remaining`` trials, ``concurrency`` at a time),
        at what price and budget, and where its files are."""
        config, out, price = self.config, self.out, self.price
        budget = config.budget
        limits = ", ".join(f"{name} {value:g}" for name, value in (
            ("max_cost", budget.max_cost), ("max_cost_per_trial", budget.max_cost_per_trial),
            ("max_wall_s", budget.max_wall_s)) if value is not None) or "none"
        out(f"Search '{config.name}': {remaining} trial(s), {concurrency} at a time, "
            f"{config.max_epochs} epochs max, pruning: {config.pruning.policy}, "
            f"sampler: {config.search.sampler}{prior_text(self.prior)}")
        out(f"Pricing: {price.instance}{' (spot)' if price.spot else ''} at "
            f"{fmt_money(price.instance_per_hour, price.currency)}/node-hour, "
            f"{_billing_terms(price)}; a trial pays its share "
            f"({price.share:.3g} of the node: {fmt_money(price.per_hour, price.currency)}"
            f"/trial-hour); budget: {limits}")
        if price.note:
            out(f"  ({price.note})")
        out(f"Run dir: {display_path(self.run_path)}   Study: "
            f"{display_url(self.url, self.run_path)}")
        if not self.checkpoints.default:
            out(f"Checkpoints: {self.checkpoints.shown}/ (priced as "
                f"{self.checkpoints.price.key})")
        log.info("session start: %d trials, concurrency %d, price %s", remaining,
                 concurrency, price)
